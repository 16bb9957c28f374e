"""SpiderCast's analysis and its comparison overlays' (spidercast.md §6.1, §7): topic
connectivity, partitioned topics, degree statistics, topic diameters, coverage, RingPT computed
offline, and control messages per join and leave.

The overlay is the undirected union of the snapshots' links. G_t is the subgraph induced by the
nodes whose snapshot lists t (their interest at that moment); a topic with at least two such
nodes is partitioned when G_t has more than one component (the denominator: topics with >= 2
members; ``components_total`` sums components over topics with >= 1 member, Fig. 13's measure).
Nodes that joined less than ``exclude_joined_s`` (2 s, the paper's churn rule) before a
snapshot are left out of it. The topic diameter is the largest hop distance inside G_t, exact
(breadth-first from every member, scipy). The degree's 95% interval is given both ways the
paper may mean (spec §9.12): of the mean (1.96 σ/√N) and the 2.5-97.5 percentiles of node
degrees. RingPT's degree is recomputed here from the final snapshot's interests (a second route
to the ``ring_per_topic`` protocol, and the paper's Fig. 14 reference for the others). Control
messages are those of the ``spidercast`` layer (connect, connect-ok, redirect, disconnect, its
answers, leave; heartbeats are the ``heartbeat`` layer), over the run, per join or leave
(the initial joins included: a static run's figure is the cost of building the overlay).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, shortest_path

from ..overlay import Snapshot
from ..plotting import plt, save
from .base import ProtocolAnalysis

EXCLUDE_JOINED_S = 2.0
K_PARAM = "kg"


def adjacency(rows: list[dict], left_out: set[int] = frozenset()) -> tuple[dict[int, set[int]], dict[int, list[str]]]:
    """Undirected links among the snapshot's nodes (but ``left_out``) and each node's topics."""
    interests = {r["node"]: r.get("topics", []) for r in rows if r["node"] not in left_out}
    adj: dict[int, set[int]] = {n: set() for n in interests}
    for r in rows:
        u = r["node"]
        if u not in interests:
            continue
        for v in r["neighbours"]:
            if v != u and v in interests:
                adj[u].add(v)
                adj[v].add(u)
    return adj, interests


def topic_members(interests: dict[int, list[str]]) -> dict[str, list[int]]:
    members: dict[str, list[int]] = defaultdict(list)
    for node, topics in interests.items():
        for t in topics:
            members[t].append(node)
    return members


def topic_graph(adj: dict[int, set[int]], members: list[int]) -> csr_matrix:
    index = {n: i for i, n in enumerate(members)}
    pairs = [(index[u], index[v]) for u in members for v in adj[u] if v in index]
    rows, cols = zip(*pairs) if pairs else ((), ())
    return csr_matrix((np.ones(len(pairs)), (rows, cols)), shape=(len(members), len(members)))


def topic_components(adj: dict[int, set[int]], interests: dict[int, list[str]]) -> dict[str, int]:
    return {t: int(connected_components(topic_graph(adj, m), directed=False)[0])
            for t, m in sorted(topic_members(interests).items())}


def topic_diameters(adj: dict[int, set[int]], interests: dict[int, list[str]]) -> dict[str, int | None]:
    """Largest hop distance inside each connected G_t (None where G_t is partitioned)."""
    out: dict[str, int | None] = {}
    for t, m in sorted(topic_members(interests).items()):
        dist = shortest_path(topic_graph(adj, m), directed=False, unweighted=True)
        out[t] = int(dist.max()) if np.isfinite(dist).all() else None
    return out


def ring_pt_degrees(interests: dict[int, list[str]]) -> dict[int, int]:
    """RingPT offline: per topic its members in id order around a ring, each linked to the next
    and the previous; a node's degree is its distinct ring neighbours over all its topics."""
    links: dict[int, set[int]] = {n: set() for n in interests}
    for members in topic_members(interests).values():
        ring = sorted(members)
        if len(ring) < 2:
            continue
        for i, n in enumerate(ring):
            links[n].update((ring[i - 1], ring[(i + 1) % len(ring)]))
    return {n: len(s - {n}) for n, s in links.items()}


def not_k_covered(rows: list[dict], interests: dict[int, list[str]], k: int) -> int:
    """Nodes whose greedy task (``task0``) covers some topic of theirs by fewer than
    min(k, members - 1) neighbours (D1: a topic with fewer members cannot be covered)."""
    members = Counter(t for ts in interests.values() for t in ts)
    count = 0
    for r in rows:
        greedy = r.get("per_topic", {}).get("task0")
        if greedy is None or r["node"] not in interests:
            continue
        held = Counter(t for q in greedy if q in interests for t in interests[q])
        count += any(held[t] < min(k, members[t] - 1) for t in interests[r["node"]])
    return count


def degree_stats(adj: dict[int, set[int]]) -> dict:
    d = np.array([len(v) for v in adj.values()], dtype=float)
    if not len(d):
        return {}
    hist = Counter(int(x) for x in d)
    return {"mean": float(d.mean()), "max": int(d.max()), "ci95_of_mean": float(1.96 * d.std() / np.sqrt(len(d))),
            "p2_5": float(np.percentile(d, 2.5)), "p97_5": float(np.percentile(d, 97.5)),
            "histogram": {str(k): hist[k] for k in sorted(hist)}}


class SpiderCastAnalysis(ProtocolAnalysis):
    title = "SpiderCast: topic connectivity and degree"

    def __init__(self, meta: dict, subscriptions: dict[int, list[str]]) -> None:
        super().__init__(meta, subscriptions)
        self.joined: dict[int, list[int]] = defaultdict(list)
        self.ops = 0
        self.series: list[dict] = []
        self.control = self.heartbeats = 0

    def add_timeline(self, rows: list[dict]) -> None:
        for e in rows:
            if e["kind"] == "join":
                self.joined[e["node"]].append(e["t_ns"])
            if e["kind"] in ("join", "leave", "crash") and not e.get("end_of_run"):
                self.ops += 1

    def _recent(self, t_ns: int) -> set[int]:
        since = t_ns - EXCLUDE_JOINED_S * 1e9
        return {n for n, times in self.joined.items() if any(since < t <= t_ns for t in times)}

    def add_snapshot(self, snapshot: Snapshot) -> None:
        rows = snapshot.rows
        t_ns = rows[0]["t_ns"]
        adj, interests = adjacency(rows, self._recent(t_ns))
        comps = topic_components(adj, interests)
        members = topic_members(interests)
        self.series.append({
            "t_s": (t_ns - self.meta["started_ns"]) / 1e9, "nodes": len(adj),
            "degree_mean": statistics.fmean(len(v) for v in adj.values()) if adj else None,
            "partitioned_topics": sum(1 for t, c in comps.items() if c > 1 and len(members[t]) >= 2),
        })

    def add_stats(self, rows: list[dict]) -> None:
        self.control = int(sum(r["counters"].get("msgs_sent.spidercast", 0) for r in rows))
        self.heartbeats = int(sum(r["counters"].get("msgs_sent.heartbeat", 0) for r in rows))

    def metrics(self, final: list[dict]) -> dict:
        if not final:
            return {}
        adj, interests = adjacency(final, self._recent(final[0]["t_ns"]))
        comps = topic_components(adj, interests)
        members = topic_members(interests)
        counted = [t for t in comps if len(members[t]) >= 2]
        diameters = topic_diameters(adj, interests)
        known = [d for d in diameters.values() if d is not None]
        degree = degree_stats(adj)
        ring = ring_pt_degrees(interests)
        subs = statistics.fmean(len(ts) for ts in interests.values()) if interests else 0.0
        out: dict = {
            "nodes": len(adj),
            "degree": degree,
            "topics": len(comps),
            "topics_with_two_or_more": len(counted),
            "partitioned_topics": sum(1 for t in counted if comps[t] > 1),
            "topic_connected": all(comps[t] == 1 for t in counted),
            "components_total": sum(comps.values()),
            "max_topic_diameter": max(known, default=None),
            "mean_topic_diameter": statistics.fmean(known) if known else None,
            "ringpt_degree_mean": statistics.fmean(ring.values()) if ring else None,
            "control_messages": self.control,
            "heartbeats": self.heartbeats,
            "joins_and_leaves": self.ops,
            "snapshots": self.series,
        }
        if self.ops and degree:
            per_op = self.control / self.ops
            out.update(control_per_join_leave=per_op, control_per_link=per_op / degree["mean"] if degree["mean"] else None,
                       control_per_topic=per_op / subs if subs else None)
        k = self.meta.get("protocol_params", {}).get(K_PARAM)
        if self.meta.get("protocol") == "spidercast" and k:
            out["nodes_not_k_covered"] = not_k_covered(final, interests, int(k))
        return out

    def plots(self, plots: Path, metrics: dict) -> dict[str, str]:
        if not metrics or not metrics.get("degree"):
            return {}
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
        hist = metrics["degree"]["histogram"]
        left.bar([int(k) for k in hist], list(hist.values()))
        left.axvline(metrics["degree"]["mean"], color="k", ls="--", label=f"mean {metrics['degree']['mean']:.2f}")
        if metrics["ringpt_degree_mean"]:
            left.axvline(metrics["ringpt_degree_mean"], color="r", ls=":", label=f"RingPT {metrics['ringpt_degree_mean']:.2f}")
        left.set(xlabel="node degree", ylabel="nodes")
        left.legend(fontsize=8)
        series = metrics["snapshots"]
        right.plot([s["t_s"] for s in series], [s["degree_mean"] for s in series], "o-", label="mean degree")
        right.set(xlabel="time (s)", ylabel="mean degree", ylim=(0, None))
        twin = right.twinx()
        twin.plot([s["t_s"] for s in series], [s["partitioned_topics"] for s in series], "s--", color="r",
                  label="partitioned topics")
        twin.set(ylabel="partitioned topics")
        right.legend(fontsize=8, loc="lower left")
        twin.legend(fontsize=8, loc="lower right")
        return {"spidercast": save(fig, plots, "spidercast.png")}

    def report_rows(self, metrics: dict) -> list[tuple[str, object]]:
        if not metrics or not metrics.get("degree"):
            return []
        m, d = metrics, metrics["degree"]
        rows: list[tuple[str, object]] = [
            ("average degree (95% CI of the mean; 2.5-97.5 percentiles); max",
             f"{d['mean']:.2f} (± {d['ci95_of_mean']:.2f}; {d['p2_5']:.0f}-{d['p97_5']:.0f}); {d['max']}"),
            ("partitioned topics (of topics with ≥ 2 members)", f"{m['partitioned_topics']} of {m['topics_with_two_or_more']}"),
            ("connected components over all topics", m["components_total"]),
            ("max (mean) topic diameter", f"{m['max_topic_diameter']} ({_fmt(m['mean_topic_diameter'])})"),
            ("RingPT degree on the same interests (offline)", _fmt(m["ringpt_degree_mean"])),
            ("control messages; per join or leave", f"{m['control_messages']}; {_fmt(m.get('control_per_join_leave'))}"),
        ]
        if "nodes_not_k_covered" in m:
            rows.append(("nodes not Kg-covered", m["nodes_not_k_covered"]))
        return rows

    @staticmethod
    def sweep(sweep_dir: Path, runs: list[tuple[dict, dict]]) -> dict:
        """The paper's Fig. 12/14 table: mean degree and partitioned topics per overlay (the
        protocol and the point's other settings) and N."""
        table: dict[str, dict[int, list[tuple[float, int]]]] = defaultdict(lambda: defaultdict(list))
        for row, summary in runs:
            m = summary.get("protocol_metrics", {})
            if m.get("degree"):
                table[_overlay(summary["protocol"], row)][summary["nodes"]].append((m["degree"]["mean"], m["partitioned_topics"]))
                if m.get("ringpt_degree_mean") is not None:  # depends on the interests only
                    table[_overlay("RingPT (offline)", row, protocol_settings=False)][summary["nodes"]].append(
                        (m["ringpt_degree_mean"], 0))
        out = {name: {str(n): {"degree_mean": statistics.fmean(d for d, _ in v), "partitioned_topics": max(p for _, p in v)}
                      for n, v in sorted(by_n.items())} for name, by_n in sorted(table.items())}
        if out:
            fig, ax = plt.subplots(figsize=(6, 4))
            for name, by_n in out.items():
                ax.plot([int(n) for n in by_n], [v["degree_mean"] for v in by_n.values()], "o-", label=name)
            ax.set(xlabel="nodes", ylabel="average degree", ylim=(0, None))
            ax.legend(fontsize=7)
            save(fig, sweep_dir, "spidercast_degree.png")
        return {"degree_table": out} if out else {}


def _overlay(protocol: str, row: dict, protocol_settings: bool = True) -> str:
    """A table row's name: the protocol and the point's other settings (``--set`` paths) but N
    (and but the protocol's, for what depends on the interests only)."""
    settings = {k.rpartition(".")[2]: v for k, v in row.items()
                if "." in k and " " not in k and not k.endswith(".") and k not in ("nodes.count", "protocol.name")
                and (protocol_settings or not k.startswith("protocol."))}
    return protocol + (f" ({', '.join(f'{k}={v}' for k, v in settings.items())})" if settings else "")


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.2f}"


ANALYSES = {name: SpiderCastAnalysis for name in ("spidercast", "similarity", "random_overlay", "ring_per_topic")}
