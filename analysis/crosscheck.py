"""A second computation of the core metrics, in plain Python over a run's raw files, written from
../shared/design/METRICS.md; ``overlaylab crosscheck RUN_DIR`` compares it with the Spark
summary metric by metric. Small and slow on purpose: it is the check, not the product.

Reads: ``traces/`` (the simulator's ``spans.parquet`` or the peers' OTLP JSON lines),
``subscriptions.jsonl``, ``timeline.jsonl``, ``snapshots.jsonl`` (the last snapshot), ``run.json``
and the experiment's ``analysis`` settings.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

from .filters import attributes, filter_matches
from .runfiles import read_jsonl, run_end_ns

Span = dict  # name, time_ns, node, event_id, topic, hops, first_copy, subscriber


def _otlp_value(v: dict):
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    return int(v["intValue"]) if "intValue" in v else None


def read_spans(traces: Path) -> list[Span]:
    spans: list[Span] = []
    if (traces / "spans.parquet").exists():
        cols = ("span_id", "parent_span_id", "name", "time_ns", "node", "event_id", "topic", "hops", "first_copy",
                "subscriber")
        spans += pq.read_table(traces / "spans.parquet", columns=list(cols)).to_pylist()
    seen: set[tuple[str, str]] = set()  # a batch sent again can reach the Collector twice
    for path in sorted(traces.glob("*.jsonl")):
        for request in read_jsonl(path):
            for rs in request.get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    for s in ss.get("spans", []):
                        if s["name"] not in ("publish", "receive") or (s["traceId"], s["spanId"]) in seen:
                            continue
                        seen.add((s["traceId"], s["spanId"]))
                        a = {x["key"]: _otlp_value(x["value"]) for x in s.get("attributes", [])}
                        spans.append({"span_id": s["spanId"], "parent_span_id": s.get("parentSpanId") or None,
                                      "name": s["name"], "time_ns": int(s["startTimeUnixNano"]),
                                      "node": a["pubsub.node"], "event_id": a["pubsub.event_id"],
                                      "topic": a["pubsub.topic"], "hops": a["pubsub.hops"],
                                      "first_copy": a["pubsub.first_copy"], "subscriber": a["pubsub.subscriber"]})
    return spans


def alive(timeline: list[dict], end_ns: int) -> dict[int, list[tuple[int, int]]]:
    """node -> [(join, exit)]: each join until the node's next leave or crash (or the end)."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    by_node: dict[int, list[dict]] = defaultdict(list)
    for e in timeline:
        if e.get("node") is not None:
            by_node[e["node"]].append(e)
    for node, events in by_node.items():
        exits = sorted(e["t_ns"] for e in events if e["kind"] in ("leave", "crash"))
        for j in sorted(e["t_ns"] for e in events if e["kind"] == "join"):
            out[node].append((j, next((x for x in exits if x >= j), end_ns)))
    return out


def compute(run_dir: str | Path) -> dict:
    rd = Path(run_dir)
    meta = json.loads((rd / "run.json").read_text())
    settings = (yaml.safe_load((rd / "experiment.yaml").read_text()) or {}).get("analysis", {})
    window_s, warmup_ns = settings.get("delivery_window_s"), round(settings.get("join_warmup_s", 0.0) * 1e9)
    raw = read_spans(rd / "traces")
    timeline = read_jsonl(rd / "timeline.jsonl")
    end_ns = run_end_ns(meta, timeline, max((s["time_ns"] for s in raw), default=0))
    spans, refused = scored(raw)
    subscribers: dict[str, set[int]] = defaultdict(set)
    filters: dict[int, list[str]] = defaultdict(list)
    for row in read_jsonl(rd / "subscriptions.jsonl"):
        for t in row["topics"]:
            subscribers[t].add(row["node"])
            if t.startswith("?"):  # a content filter: matched against each event below
                filters[row["node"]].append(t)
    if filters:
        for topic in {s["topic"] for s in spans if s["name"] == "publish"}:
            attrs = attributes(topic)
            subscribers[topic] = {v for v, fs in filters.items() if any(filter_matches(f, attrs) for f in fs)}
    intervals = alive(timeline, end_ns)

    # The first copy of (event, node): the copy the node flagged, earliest first, fewest hops.
    first: dict[tuple[str, int], tuple[int, int]] = {}
    keyed: dict[tuple[str, int], tuple] = {}
    for s in spans:
        if s["name"] != "receive":
            continue
        k = (s["event_id"], s["node"])
        rank = (not s["first_copy"], s["time_ns"], s["hops"])
        if k not in keyed or rank < keyed[k]:
            keyed[k], first[k] = rank, (s["time_ns"], s["hops"])

    expected = delivered = 0
    per_event, latencies, hops = [], [], []
    for p in (s for s in spans if s["name"] == "publish"):
        t0 = p["time_ns"]
        end = t0 + round(window_s * 1e9) if window_s is not None else end_ns
        x = [v for v in subscribers[p["topic"]] if v != p["node"]
             and any(j + warmup_ns <= t0 and leave >= end for j, leave in intervals.get(v, ()))]
        d = 0
        for v in x:
            got = first.get((p["event_id"], v))
            if got is not None and got[0] <= end:
                d += 1
                latencies.append((got[0] - t0) / 1e6)
                hops.append(got[1])
        expected, delivered = expected + len(x), delivered + d
        if x:
            per_event.append(d / len(x))

    receives = [s for s in spans if s["name"] == "receive"]
    receipts = len({(s["event_id"], s["node"]) for s in receives})

    def pct(values: list[float], q: float) -> float | None:
        return float(np.percentile(values, q)) if values else None

    out = {
        "events": sum(s["name"] == "publish" for s in spans),
        "expected_receivers": expected, "deliveries": delivered,
        "hit_ratio": delivered / expected if expected else None,
        "hit_ratio_mean_per_event": float(np.mean(per_event)) if per_event else None,
        "complete_event_ratio": sum(r == 1.0 for r in per_event) / len(per_event) if per_event else None,
        "latency_ms": {"p50": pct(latencies, 50), "p90": pct(latencies, 90), "p99": pct(latencies, 99),
                       "max": max(latencies) if latencies else None},
        "hops": {"mean": float(np.mean(hops)) if hops else None, "p50": pct(hops, 50), "p99": pct(hops, 99),
                 "max": max(hops) if hops else None},
        "duplication_factor": len(receives) / receipts if receipts else None,
        "relay_ratio": sum(not s["subscriber"] for s in receives) / len(receives) if receives else None,
        "degree": degree(rd / "snapshots.jsonl"),
        "refused_events": refused,
        "spans": {"lost_at_least": len({s["parent_span_id"] for s in raw if s["parent_span_id"]}
                                        - {s["span_id"] for s in raw})},
    }
    if meta["protocol"] == "static_gossip":
        out["protocol_metrics"] = reach(spans, meta["nodes"])
    return out


def reach(spans: list[Span], nodes: int) -> dict:
    """Receivers per event (the publisher and every node with a copy), their mean over all events
    and its spread over the networks (a network is node // nodes), and the largest hop count."""
    got: dict[str, set[int]] = defaultdict(set)
    for s in spans:
        if s["name"] == "receive":
            got[s["event_id"]].add(s["node"])
    by_network: dict[int, list[int]] = defaultdict(list)
    for p in (s for s in spans if s["name"] == "publish"):
        by_network[p["node"] // nodes].append(len(got[p["event_id"]] | {p["node"]}))
    every = [r for rs in by_network.values() for r in rs]
    means = [float(np.mean(by_network[k])) for k in sorted(by_network)]
    return {"receivers_mean": float(np.mean(every)) if every else None,
            "receivers_sd_across_networks": float(np.std(means, ddof=1)) if len(means) > 1 else 0.0,
            "max_hops": max((s["hops"] for s in spans if s["name"] == "receive"), default=0)}


def scored(spans: list[Span]) -> tuple[list[Span], dict]:
    """The spans of the events that can be scored, and the count of those refused: an id
    published more than once, or with a copy received before its (earliest) publish."""
    published: dict[str, list[int]] = defaultdict(list)
    for s in spans:
        if s["name"] == "publish":
            published[s["event_id"]].append(s["time_ns"])
    twice = {e for e, ts in published.items() if len(ts) > 1}
    early = {s["event_id"] for s in spans
             if s["name"] == "receive" and s["event_id"] in published and s["time_ns"] < min(published[s["event_id"]])}
    bad = twice | early
    return ([s for s in spans if s["event_id"] not in bad],
            {"count": len(bad), "published_twice": len(twice), "received_before_publish": len(early)})


def degree(path: Path) -> dict:
    """Undirected degree over the union of every layer's links, last snapshot."""
    rows = read_jsonl(path)
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
    alive_nodes = {r["node"] for r in rows if r["t_ns"] == last}
    sizes = [len(links[v]) for v in alive_nodes]
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
