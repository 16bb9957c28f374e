"""Overlay shape from snapshots and overhead from counters (small tables: plain Python + networkx)."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import networkx as nx
import numpy as np


def snapshots_by_time(path: Path) -> Iterator[list[dict]]:
    """The rows of ``snapshots.jsonl`` one snapshot (one ``t_ns``) at a time, as written (in time
    order), so a 10,000-node run's gigabytes of snapshots are never in memory at once."""
    if not path.exists():
        return
    with path.open() as f:
        rows = (json.loads(line) for line in f if line.strip())
        for _, group in itertools.groupby(rows, key=lambda r: r["t_ns"]):
            yield list(group)


def degrees(snapshot_rows: list[dict]) -> dict:
    """Out-, in- and undirected degree over the union of all layers' links (METRICS.md)."""
    out: dict[int, set[int]] = defaultdict(set)
    nodes = {r["node"] for r in snapshot_rows}
    for r in snapshot_rows:
        out[r["node"]].update(n for n in r["neighbours"] if n != r["node"])
    inn: dict[int, set[int]] = defaultdict(set)
    for v, ns in out.items():
        for u in ns:
            inn[u].add(v)
    if not nodes:
        return {"mean": None, "max": None}
    und = [len(out[v] | inn[v]) for v in nodes]
    outs = [len(out[v]) for v in nodes]
    ins = [len(inn[v]) for v in nodes]
    return {
        "mean": float(np.mean(und)), "max": int(max(und)),
        "out_mean": float(np.mean(outs)), "in_mean": float(np.mean(ins)),
        "in_stddev": float(np.std(ins)), "in_max": int(max(ins)),
    }


def topic_connectivity(snapshot_rows: list[dict], subscriptions: dict[int, list[str]]) -> float | None:
    """Share of topics whose (snapshotted, hence alive) subscribers form one connected component
    using only links between subscribers of that topic."""
    alive = {r["node"] for r in snapshot_rows}
    g = nx.Graph()
    for r in snapshot_rows:
        g.add_edges_from((r["node"], n) for n in r["neighbours"] if n != r["node"])
    by_topic: dict[str, list[int]] = defaultdict(list)
    for node, topics in subscriptions.items():
        if node in alive:
            for t in topics:
                by_topic[t].append(node)
    if not by_topic:
        return None
    connected = 0
    for members in by_topic.values():
        sub = g.subgraph(members).copy()
        sub.add_nodes_from(members)
        connected += nx.is_connected(sub)
    return connected / len(by_topic)


def overhead(stats_rows: list[dict], duration_s: float, cycle_s: float) -> dict:
    """Control messages and bytes sent per node per gossip cycle, total and by layer."""
    cycles = duration_s / cycle_s if cycle_s > 0 else 0
    nodes = len(stats_rows)
    if not nodes or cycles <= 0:
        return {"msgs_per_node_per_cycle": None, "bytes_per_node_per_cycle": None, "by_layer": {}}
    by_layer: dict[str, dict[str, float]] = defaultdict(lambda: {"msgs": 0.0, "bytes": 0.0})
    for row in stats_rows:
        for key, v in row["counters"].items():
            kind, _, layer = key.partition(".")
            if kind in ("msgs_sent", "bytes_sent") and layer:
                by_layer[layer]["msgs" if kind == "msgs_sent" else "bytes"] += v
    scale = 1.0 / (nodes * cycles)
    return {
        "msgs_per_node_per_cycle": sum(l["msgs"] for l in by_layer.values()) * scale,
        "bytes_per_node_per_cycle": sum(l["bytes"] for l in by_layer.values()) * scale,
        "by_layer": {k: {"msgs_per_node_per_cycle": v["msgs"] * scale, "bytes_per_node_per_cycle": v["bytes"] * scale}
                     for k, v in sorted(by_layer.items())},
    }


def counter_totals(stats_rows: list[dict], names: list[str]) -> dict[str, int]:
    return {n: int(sum(r["counters"].get(n, 0) for r in stats_rows)) for n in names}


def ring_convergence(snapshot_rows: list[dict], subscriptions: dict[int, list[str]], start_ns: int,
                     cycle_s: float) -> list[dict]:
    """Ring convergence (``RingConvergence.add``) of the snapshots in ``snapshot_rows``."""
    tracker = RingConvergence(subscriptions, start_ns, cycle_s)
    by_time: dict[int, list[dict]] = defaultdict(list)
    for r in snapshot_rows:
        by_time[r["t_ns"]].append(r)
    return [row for t in sorted(by_time) if (row := tracker.add(by_time[t])) is not None]


def _size_bin(n: int) -> int:
    """Power-of-two bin start of a size (0 for 0)."""
    return 1 << (n.bit_length() - 1) if n else 0


class RingConvergence:
    """PolderCast ring convergence, fed one snapshot at a time (METRICS.md, poldercast.md §7.3).

    ``add`` gives the paper's Fig. 5 per snapshot: the share of ideal ring links missing (every
    alive subscriber's true successor and predecessor by ring id among the topic's alive
    subscribers, against its succ[0]/pred[0]) and the share of rings (topics with >= 2 alive
    subscribers) with any link missing. ``cycle`` counts gossip cycles: the simulator's frozen
    dissemination rounds are left out (rows' ``gossip_ns``), ``t_s`` keeps them.

    ``by_size`` gives Fig. 6 after the last snapshot: per node, the first snapshot's cycle from
    which all its target links stay in place, binned by subscription size; per ring, the first
    cycle from which it stays complete, binned by ring size. A node or ring still incomplete at
    the last snapshot has not converged (counted apart)."""

    def __init__(self, subscriptions: dict[int, list[str]], start_ns: int, cycle_s: float) -> None:
        self.subscriptions, self.start_ns, self.cycle_s = subscriptions, start_ns, cycle_s
        self.cycles: list[float] = []
        self.node_bad: dict[int, int] = {}  # node -> index of the last snapshot with a link missing
        self.ring_bad: dict[str, int] = {}
        self.nodes: dict[int, int] = {}  # subscription size of the nodes with target links, last snapshot
        self.rings: dict[str, int] = {}  # ring size, last snapshot

    def add(self, snapshot_rows: list[dict]) -> dict | None:
        """The snapshot's row of Fig. 5; None for a snapshot without rings (other protocols)."""
        from node.core.poldercast import ring_id

        alive: set[int] = set()
        succ: dict[int, dict] = {}
        pred: dict[int, dict] = {}
        t_ns = gossip_ns = 0
        for r in snapshot_rows:
            alive.add(r["node"])
            t_ns, gossip_ns = r["t_ns"], r.get("gossip_ns", r["t_ns"])
            if r["layer"] == "rings.succ":
                succ[r["node"]] = r["per_topic"]
            elif r["layer"] == "rings.pred":
                pred[r["node"]] = r["per_topic"]
        if not succ and not pred:
            return None
        members: dict[str, list[int]] = defaultdict(list)
        for node in alive:
            for topic in self.subscriptions.get(node, ()):
                members[topic].append(node)
        k_snap = len(self.cycles)
        self.nodes, self.rings = {}, {}
        targets = missing = incomplete = 0
        for topic, nodes in members.items():
            if len(nodes) < 2:
                continue
            ring = sorted(nodes, key=ring_id)
            self.rings[topic] = len(ring)
            bad = False
            for k, x in enumerate(ring):
                self.nodes[x] = len(self.subscriptions[x])
                for want, have in ((ring[(k + 1) % len(ring)], succ.get(x, {}).get(topic)),
                                   (ring[k - 1], pred.get(x, {}).get(topic))):
                    targets += 1
                    if not have or have[0] != want:
                        missing += 1
                        bad = True
                        self.node_bad[x] = k_snap
            if bad:
                incomplete += 1
                self.ring_bad[topic] = k_snap
        gossip_s = (gossip_ns - self.start_ns) / 1e9  # frozen rounds left out: they are no cycles
        cycle = round(gossip_s / self.cycle_s, 3) if self.cycle_s else None
        self.cycles.append(cycle)
        return {
            "t_s": (t_ns - self.start_ns) / 1e9, "cycle": cycle,
            "missing_links_pct": 100 * missing / targets if targets else 0.0,
            "incomplete_rings_pct": 100 * incomplete / len(self.rings) if self.rings else 0.0,
            "rings": len(self.rings),
        }

    def by_size(self) -> dict:
        def table(sizes: dict, last_bad: dict, key: str) -> list[dict]:
            bins: dict[int, list] = defaultdict(list)
            for x, size in sizes.items():
                k = last_bad.get(x, -1) + 1  # the first snapshot from which x stays complete
                bins[_size_bin(size)].append(self.cycles[k] if k < len(self.cycles) else None)
            out = []
            for b, cycles in sorted(bins.items()):
                done = [c for c in cycles if c is not None]
                out.append({key: b, "count": len(cycles), "not_converged": len(cycles) - len(done),
                            "mean_cycle": float(np.mean(done)) if done else None,
                            "p90_cycle": float(np.percentile(done, 90)) if done else None,
                            "max_cycle": max(done) if done else None})
            return out

        if not self.cycles:
            return {"nodes": [], "rings": []}
        return {"nodes": table(self.nodes, self.node_bad, "subscriptions_from"),
                "rings": table(self.rings, self.ring_bad, "ring_size_from")}


def rings_degree_by_subscriptions(snapshot_rows: list[dict]) -> list[dict]:
    """RINGS degree (distinct ring neighbours) against subscription size, in power-of-two bins
    (poldercast.md E2, Fig. 7), from the last snapshot."""
    if not snapshot_rows:
        return []
    last = max(r["t_ns"] for r in snapshot_rows)
    bins: dict[int, list[int]] = defaultdict(list)
    for r in snapshot_rows:
        if r["t_ns"] == last and r["layer"] == "rings":
            bins[_size_bin(len(r["topics"]))].append(len(set(r["neighbours"])))
    return [{"subscriptions_from": b, "nodes": len(d), "mean_rings_degree": float(np.mean(d)),
             "max_rings_degree": int(max(d))} for b, d in sorted(bins.items())]
