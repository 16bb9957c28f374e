"""Overlay shape from snapshots and overhead from counters (small tables: plain Python + networkx)."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .schemas import SNAPSHOTS


@dataclass
class Snapshot:
    """One snapshot (one ``t_ns``): its Arrow table (``schemas.SNAPSHOTS``), and the same rows as
    dicts for the analyses that want them (built on first use)."""

    table: pa.Table

    @classmethod
    def from_rows(cls, rows: list[dict]) -> Snapshot:
        return cls(pa.Table.from_pylist(rows, SNAPSHOTS))

    @cached_property
    def rows(self) -> list[dict]:
        rows = self.table.to_pylist()
        for r in rows:
            r["per_topic"] = dict(r["per_topic"] or ())
        return rows


def snapshot_count(rd: Path) -> int:
    """How many snapshots ``snapshots`` will give (0 for a run written before they were files:
    not counted up front)."""
    return len(list((rd / "snapshots").glob("*.parquet")))


def snapshots(rd: Path) -> Iterator[Snapshot]:
    """The run's snapshots one at a time, in time order (``snapshots/``, a file each), so a
    10,000-node run's snapshots are never in memory at once. A run written before snapshots were
    columns has ``snapshots.jsonl`` instead: read the same way."""
    files = sorted((rd / "snapshots").glob("*.parquet"))
    if files:
        for f in files:
            yield Snapshot(pq.read_table(f, schema=SNAPSHOTS))
        return
    if (rd / "snapshots.jsonl").exists():
        with (rd / "snapshots.jsonl").open() as f:
            rows = (json.loads(line) for line in f if line.strip())
            for _, group in itertools.groupby(rows, key=lambda r: r["t_ns"]):
                yield Snapshot.from_rows(list(group))


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
