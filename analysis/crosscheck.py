"""A second computation of the core metrics, written from docs/metrics.md's definitions alone:
``overlaylab crosscheck RUN_DIR`` compares it with the Spark summary metric by metric, so that a
disagreement is a finding about one of the two. It shares no code and no rule with the Spark job
(it imports nothing from ``analysis``): its own readers of the raw files, its own matching of
content filters, its own alive intervals and windows. Small and slow on purpose: it is the
check, not the product.

The definitions it follows (docs/metrics.md):

- the run ends at ``run.json``'s ``ended_ns`` (else the last thing written); a node is alive from
  each join to its next leave or crash (else the end);
- an event's window runs from its publication for ``analysis.delivery_window_s`` (else to the
  end), cut at the end of the run;
- its expected receivers: the subscribers of its topic (a content filter: those whose filter it
  matches, per ``subscriptions.jsonl``), the publisher aside, alive from ``join_warmup_s`` after
  a join up to the publication through the window's end;
- delivered: an expected receiver with any copy inside the window; latency: its earliest such
  copy; hops: its first copy (the one it flagged, the earliest if it flagged several);
- a relay copy: a copy at a node not subscribed to the event's topic (per the subscriptions);
- events published twice, or with a copy older than the publication, are left out.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import yaml

COLUMNS = ("span_id", "parent_span_id", "name", "time_ns", "node", "event_id", "topic", "hops", "first_copy")


def lines(path: Path) -> list[dict]:
    """A JSON-lines file's records (a missing file: none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_spans(traces: Path) -> list[dict]:
    """Every publish and receive span: the simulator's Parquet file, the peers' OTLP JSON lines
    (a batch exported twice counted once)."""
    spans: list[dict] = []
    if (traces / "spans.parquet").exists():
        spans += pq.read_table(traces / "spans.parquet", columns=list(COLUMNS)).to_pylist()
    seen: set[tuple[str, str]] = set()
    for path in sorted(traces.glob("*.jsonl")):
        for request in lines(path):
            for rs in request.get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    for s in ss.get("spans", []):
                        key = (s["traceId"], s["spanId"])
                        if s["name"] not in ("publish", "receive") or key in seen:
                            continue
                        seen.add(key)
                        a = {x["key"]: next(iter(x["value"].values())) for x in s.get("attributes", [])}
                        spans.append({"span_id": s["spanId"], "parent_span_id": s.get("parentSpanId") or None,
                                      "name": s["name"], "time_ns": int(s["startTimeUnixNano"]),
                                      "node": int(a["pubsub.node"]), "event_id": a["pubsub.event_id"],
                                      "topic": a["pubsub.topic"], "hops": int(a["pubsub.hops"]),
                                      "first_copy": a["pubsub.first_copy"] in (True, "true")})
    return spans


# --- content filters: ``?name op value&...`` (docs/protocols/dps.md, the text form) ------------

_PREDICATE = re.compile(r"([A-Za-z_][\w.-]*)(<=|>=|\^=|\$=|\*=|=|<|>|\?)(.*)")


def _literal(text: str) -> Any:
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        return text[1:-1]
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)


def event_values(topic: str) -> dict[str, Any]:
    """An event's attributes from its text form (a plain topic: ``topic = 'topic'``)."""
    if not topic.startswith("?"):
        return {"topic": topic}
    return {m[1]: _literal(m[3]) for m in (_PREDICATE.fullmatch(p) for p in topic[1:].split("&")) if m}


def _type(v: Any) -> str:
    return "string" if isinstance(v, str) else "int" if isinstance(v, int) else "float"


def matches(flt: str, values: dict[str, Any]) -> bool:
    """Whether an event's values satisfy every predicate of a filter (same-typed values only)."""
    if not flt.startswith("?"):
        return values.get("topic") == flt
    for part in flt[1:].split("&"):
        m = _PREDICATE.fullmatch(part)
        if m is None:
            raise ValueError(f"filter {flt!r}: {part!r}")
        name, op, raw = m[1], m[2], m[3]
        if name not in values:
            return False
        v = values[name]
        if op == "?":
            if _type(v) != raw:
                return False
            continue
        want = _literal(raw)
        if _type(v) != _type(want):
            return False
        ok = {"=": v == want, "<": v < want, ">": v > want, "<=": v <= want, ">=": v >= want}.get(op)
        if ok is None:
            ok = {"^=": v.startswith(want), "$=": v.endswith(want), "*=": want in v}[op]
        if not ok:
            return False
    return True


# --- the metrics --------------------------------------------------------------------------------

def lives(timeline: list[dict], end_ns: int) -> dict[int, list[tuple[int, int]]]:
    """Per node, (join, exit) for each join: its next leave or crash, else the end of the run."""
    by_node: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for e in timeline:
        if e.get("node") is not None and e["kind"] in ("join", "leave", "crash"):
            by_node[e["node"]].append((e["t_ns"], e["kind"]))
    out: dict[int, list[tuple[int, int]]] = {}
    for node, events in by_node.items():
        exits = sorted(t for t, k in events if k != "join")
        out[node] = [(t, min((x for x in exits if x >= t), default=end_ns)) for t, k in events if k == "join"]
    return out


def compute(run_dir: str | Path) -> dict:
    rd = Path(run_dir)
    meta = json.loads((rd / "run.json").read_text())
    settings = (yaml.safe_load((rd / "experiment.yaml").read_text()) or {}).get("analysis") or {}
    window_s, warmup_ns = settings.get("delivery_window_s"), round((settings.get("join_warmup_s") or 0.0) * 1e9)
    raw = read_spans(rd / "traces")
    timeline = lines(rd / "timeline.jsonl")
    end_ns = meta.get("ended_ns") or max([meta["started_ns"], *(s["time_ns"] for s in raw), *(e["t_ns"] for e in timeline)])

    publishes: dict[str, list[dict]] = defaultdict(list)
    for s in raw:
        if s["name"] == "publish":
            publishes[s["event_id"]].append(s)
    twice = {e for e, ps in publishes.items() if len(ps) > 1}
    early = {s["event_id"] for s in raw if s["name"] == "receive" and s["event_id"] in publishes
             and s["time_ns"] < min(p["time_ns"] for p in publishes[s["event_id"]])}
    left_out = twice | early
    pubs = [ps[0] for e, ps in publishes.items() if e not in left_out]
    copies: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for s in raw:
        if s["name"] == "receive" and s["event_id"] not in left_out:
            copies[(s["event_id"], s["node"])].append(s)

    filters = {row["node"]: row["topics"] for row in lines(rd / "subscriptions.jsonl")}
    subscribed_memo: dict[str, set[int]] = {}

    def subscribers(topic: str) -> set[int]:
        if topic not in subscribed_memo:
            values = event_values(topic)
            subscribed_memo[topic] = {v for v, fs in filters.items() if topic in fs or any(
                f.startswith("?") and matches(f, values) for f in fs)}
        return subscribed_memo[topic]

    alive = lives(timeline, end_ns)
    expected = delivered = clipped = 0
    per_event, latencies, hops = [], [], []
    for p in pubs:
        t0 = p["time_ns"]
        full = t0 + round(window_s * 1e9) if window_s is not None else end_ns
        end = min(full, end_ns)
        clipped += full > end_ns
        xs = [v for v in subscribers(p["topic"]) if v != p["node"]
              and any(j + warmup_ns <= t0 and x >= end for j, x in alive.get(v, ()))]
        got = 0
        for v in xs:
            mine = copies.get((p["event_id"], v), [])
            inside = [c["time_ns"] for c in mine if t0 <= c["time_ns"] <= end]
            if inside:
                got += 1
                latencies.append((min(inside) - t0) / 1e6)
                flagged = [c for c in mine if c["first_copy"]] or mine
                hops.append(min(flagged, key=lambda c: (c["time_ns"], c["hops"]))["hops"])
        expected, delivered = expected + len(xs), delivered + got
        if xs:
            per_event.append(got / len(xs))

    received = [c for cs in copies.values() for c in cs]
    ids = {s["span_id"] for s in raw}

    def pct(values: list[float], q: float) -> float | None:
        return float(np.percentile(values, q)) if values else None

    out = {
        "events": len(pubs),
        "expected_receivers": expected, "deliveries": delivered,
        "hit_ratio": delivered / expected if expected else None,
        "hit_ratio_mean_per_event": float(np.mean(per_event)) if per_event else None,
        "complete_event_ratio": sum(r == 1.0 for r in per_event) / len(per_event) if per_event else None,
        "window_clipped_events": clipped,
        "latency_ms": {"p50": pct(latencies, 50), "p90": pct(latencies, 90), "p99": pct(latencies, 99),
                       "max": max(latencies) if latencies else None},
        "hops": {"mean": float(np.mean(hops)) if hops else None, "p50": pct(hops, 50), "p99": pct(hops, 99),
                 "max": max(hops) if hops else None},
        "duplication_factor": len(received) / len(copies) if copies else None,
        "relay_ratio": sum(c["node"] not in subscribers(c["topic"]) for c in received) / len(received) if received else None,
        "degree": degree(rd),
        "refused_events": {"count": len(left_out), "published_twice": len(twice), "received_before_publish": len(early)},
        "spans": {"lost_at_least": len({s["parent_span_id"] for s in raw if s["parent_span_id"]} - ids),
                  "without_parent": sum(s["name"] == "receive" and not s["parent_span_id"] for s in raw)},
    }
    if meta["protocol"] == "static_gossip":
        out["protocol_metrics"] = reach(pubs, copies, meta["nodes"])
    return out


def reach(pubs: list[dict], copies: dict[tuple[str, int], list[dict]], nodes: int) -> dict:
    """static_gossip: receivers per event (the publisher and every node with a copy), their mean
    over all events and its spread over the networks (a network is node // nodes), the most hops."""
    got: dict[str, set[int]] = defaultdict(set)
    for e, v in copies:
        got[e].add(v)
    by_network: dict[int, list[int]] = defaultdict(list)
    for p in pubs:
        by_network[p["node"] // nodes].append(len(got[p["event_id"]] | {p["node"]}))
    every = [r for rs in by_network.values() for r in rs]
    means = [float(np.mean(by_network[k])) for k in sorted(by_network)]
    spread = [r for r in every if 10 * r > nodes]  # docs/metrics.md: an event spreads past a tenth of its network
    return {"receivers_mean": float(np.mean(every)) if every else None,
            "receivers_sd_across_networks": float(np.std(means, ddof=1)) if len(means) > 1 else 0.0,
            "events_spreading_share": len(spread) / len(every) if every else None,
            "receivers_mean_spreading": float(np.mean(spread)) if spread else None,
            "max_hops": max((c["hops"] for cs in copies.values() for c in cs), default=0)}


def degree(rd: Path) -> dict:
    """Undirected degree over the union of every layer's links, last snapshot (the last file of
    ``snapshots/``; ``snapshots.jsonl`` in a run written before)."""
    files = sorted((rd / "snapshots").glob("*.parquet"))
    if files:
        rows = pq.read_table(files[-1], columns=["t_ns", "node", "neighbours"]).to_pylist()
    else:
        rows = lines(rd / "snapshots.jsonl")
    if not rows:
        return {"mean": None, "max": None}
    last = max(r["t_ns"] for r in rows)
    links: dict[int, set[int]] = defaultdict(set)
    for r in rows:
        if r["t_ns"] == last:
            for n in r["neighbours"]:
                if n != r["node"]:
                    links[r["node"]].add(n)
                    links[n].add(r["node"])
    sizes = [len(links[v]) for v in {r["node"] for r in rows if r["t_ns"] == last}]
    return {"mean": float(np.mean(sizes)), "max": max(sizes)}


def _flat(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def compare(run_dir: str | Path, rel_tol: float = 1e-9) -> list[dict]:
    """Each metric of ``compute`` against ``summary.json``: rows of metric, spark, python, agree."""
    rd = Path(run_dir)
    summary = _flat(json.loads((rd / "summary.json").read_text()))
    rows = []
    for key, mine in _flat(compute(rd)).items():
        theirs = summary.get(key)
        if mine is None or theirs is None:
            agree = mine is None and theirs is None
        else:
            agree = math.isclose(float(mine), float(theirs), rel_tol=rel_tol, abs_tol=1e-9)
        rows.append({"metric": key, "spark": theirs, "python": mine, "agree": agree})
    return rows
