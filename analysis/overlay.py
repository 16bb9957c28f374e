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
    """PolderCast ring convergence per snapshot (METRICS.md, poldercast.md §7.3): the share of
    ideal ring links missing (every alive subscriber's true successor and predecessor by ring id
    among the topic's alive subscribers, against its succ[0]/pred[0]) and the share of rings
    (topics with >= 2 alive subscribers) with any link missing. ``cycle`` counts gossip cycles:
    the simulator's frozen dissemination rounds are left out (rows' ``gossip_ns``), ``t_s`` keeps
    them. Empty for protocols without rings."""
    from node.core.poldercast import ring_id

    by_time: dict[int, dict[str, dict[int, dict]]] = defaultdict(lambda: {"rings.succ": {}, "rings.pred": {}})
    alive_at: dict[int, set[int]] = defaultdict(set)
    gossip_at: dict[int, int] = {}
    for r in snapshot_rows:
        alive_at[r["t_ns"]].add(r["node"])
        gossip_at[r["t_ns"]] = r.get("gossip_ns", r["t_ns"])
        if r["layer"] in ("rings.succ", "rings.pred"):
            by_time[r["t_ns"]][r["layer"]][r["node"]] = r["per_topic"]
    out = []
    for t_ns in sorted(by_time):
        alive = alive_at[t_ns]
        members: dict[str, list[int]] = defaultdict(list)
        for node in alive:
            for topic in subscriptions.get(node, ()):
                members[topic].append(node)
        succ, pred = by_time[t_ns]["rings.succ"], by_time[t_ns]["rings.pred"]
        targets = missing = rings = incomplete = 0
        for topic, nodes in members.items():
            if len(nodes) < 2:
                continue
            ring = sorted(nodes, key=ring_id)
            rings += 1
            bad = False
            for k, x in enumerate(ring):
                for want, have in ((ring[(k + 1) % len(ring)], succ.get(x, {}).get(topic)),
                                   (ring[k - 1], pred.get(x, {}).get(topic))):
                    targets += 1
                    if not have or have[0] != want:
                        missing += 1
                        bad = True
            incomplete += bad
        gossip_s = (gossip_at[t_ns] - start_ns) / 1e9  # frozen rounds left out: they are no cycles
        out.append({
            "t_s": (t_ns - start_ns) / 1e9, "cycle": round(gossip_s / cycle_s, 3) if cycle_s else None,
            "missing_links_pct": 100 * missing / targets if targets else 0.0,
            "incomplete_rings_pct": 100 * incomplete / rings if rings else 0.0, "rings": rings,
        })
    return out


def rings_degree_by_subscriptions(snapshot_rows: list[dict]) -> list[dict]:
    """RINGS degree (distinct ring neighbours) against subscription size, in power-of-two bins
    (poldercast.md E2, Fig. 7), from the last snapshot."""
    if not snapshot_rows:
        return []
    last = max(r["t_ns"] for r in snapshot_rows)
    bins: dict[int, list[int]] = defaultdict(list)
    for r in snapshot_rows:
        if r["t_ns"] == last and r["layer"] == "rings":
            size = len(r["topics"])
            bins[1 << max(0, size.bit_length() - 1) if size else 0].append(len(set(r["neighbours"])))
    return [{"subscriptions_from": b, "nodes": len(d), "mean_rings_degree": float(np.mean(d)),
             "max_rings_degree": int(max(d))} for b, d in sorted(bins.items())]
