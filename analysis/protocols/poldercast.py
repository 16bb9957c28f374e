"""PolderCast's analysis: ring convergence per cycle (Fig. 5) and by size (Fig. 6), RINGS degree
against subscription size (Fig. 7); METRICS.md and poldercast.md §7.3.

Ring ids are recomputed here from node ids with the formula the protocol documents
(:mod:`node.protocols.poldercast.rings`: the first 8 bytes of BLAKE2b of the 8-byte big-endian id), so the
ideal rings come from the run's subscriptions alone, not from the cores' code.
"""

from __future__ import annotations

import functools
import hashlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..overlay import Snapshot
from ..plotting import plt, save
from .base import ProtocolAnalysis


@functools.cache
def ring_id(node_id: int) -> int:
    return int.from_bytes(hashlib.blake2b(node_id.to_bytes(8, "big"), digest_size=8).digest(), "big")


def ring_convergence(table: pa.Table, subscriptions: dict[int, list[str]], start_ns: int, cycle_s: float) -> list[dict]:
    """Ring convergence (``RingConvergence.add``) of the snapshots in ``table``, in time order."""
    tracker = RingConvergence(subscriptions, start_ns, cycle_s)
    return [row for t in sorted(set(table["t_ns"].to_pylist()))
            if (row := tracker.add(table.filter(pc.equal(table["t_ns"], t)))) is not None]


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
    the last snapshot has not converged (counted apart).

    The rings are arrays: every (topic, subscriber) pair in ring order, once; a snapshot keeps the
    pairs whose node is in it, and compares each with its neighbours in that order (a 10,000-node
    snapshot in tens of milliseconds)."""

    def __init__(self, subscriptions: dict[int, list[str]], start_ns: int, cycle_s: float) -> None:
        self.start_ns, self.cycle_s = start_ns, cycle_s
        self.topics = sorted({t for ts in subscriptions.values() for t in ts})
        number = {t: k for k, t in enumerate(self.topics)}
        pairs = sorted((number[t], ring_id(n), n) for n, ts in subscriptions.items() for t in ts)
        self.pair_topic = np.array([p[0] for p in pairs], np.int64)
        self.pair_node = np.array([p[2] for p in pairs], np.int64)
        size = max(subscriptions, default=-1) + 1
        self.sub_size = np.zeros(size, np.int64)
        for n, ts in subscriptions.items():
            self.sub_size[n] = len(ts)
        self.cycles: list[float | None] = []
        self.node_bad = np.full(size, -1)  # node -> index of the last snapshot with a link missing
        self.ring_bad = np.full(len(self.topics), -1)
        self.nodes = np.zeros(0, np.int64)  # the nodes with target links, last snapshot
        self.rings = np.zeros(0, np.int64)  # the rings (topic numbers), last snapshot
        self.ring_size = np.zeros(len(self.topics), np.int64)

    def _first_links(self, table: pa.Table, layer: str) -> tuple[np.ndarray, np.ndarray]:
        """Per (node, topic) of ``layer``'s rows with a link: the key node * topics + topic, sorted,
        and the first link."""
        rows = table.filter(pc.equal(table["layer"], layer))
        per_topic = rows["per_topic"].combine_chunks()
        entries = np.diff(per_topic.offsets.to_numpy())
        node = np.repeat(rows["node"].to_numpy().astype(np.int64), entries)
        topic = pc.index_in(per_topic.keys, value_set=pa.array(self.topics, pa.string())).to_numpy(zero_copy_only=False)
        lengths = pc.list_value_length(per_topic.items).to_numpy(zero_copy_only=False)
        flat = per_topic.items.flatten().to_numpy()
        keep = (lengths > 0) & ~np.isnan(topic.astype(float))
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        key = node[keep] * len(self.topics) + topic[keep].astype(np.int64)
        first = flat[starts[keep]].astype(np.int64)
        order = np.argsort(key, kind="stable")
        return key[order], first[order]

    def add(self, table: pa.Table) -> dict | None:
        """The snapshot's row of Fig. 5; None for a snapshot without rings."""
        layers = set(table["layer"].unique().to_pylist())
        if not layers & {"rings.succ", "rings.pred"}:
            return None
        t_ns = table["t_ns"][0].as_py()
        gossip_ns = table["gossip_ns"][0].as_py()
        gossip_ns = t_ns if gossip_ns is None else gossip_ns
        alive = np.unique(table["node"].to_numpy())
        keep = np.isin(self.pair_node, alive)
        node, topic = self.pair_node[keep], self.pair_topic[keep]
        counts = np.bincount(topic, minlength=len(self.topics))
        in_ring = counts[topic] >= 2
        node, topic = node[in_ring], topic[in_ring]
        ring_start = np.concatenate([[0], np.cumsum(np.where(counts >= 2, counts, 0))[:-1]])
        start, length = ring_start[topic], counts[topic]
        pos = np.arange(len(node)) - start
        key = node * len(self.topics) + topic
        bad = np.zeros(len(node), bool)
        missed = 0
        for layer, step in (("rings.succ", 1), ("rings.pred", -1)):
            want = node[start + (pos + step) % length]
            keys, first = self._first_links(table, layer)
            at = np.minimum(np.searchsorted(keys, key), max(len(keys) - 1, 0))
            have = np.where(keys[at] == key, first[at], -1) if len(keys) else np.full(len(key), -1)
            missing = have != want
            bad |= missing
            missed += int(missing.sum())
        k_snap = len(self.cycles)
        self.node_bad[np.unique(node[bad])] = k_snap
        bad_rings = np.unique(topic[bad])
        self.ring_bad[bad_rings] = k_snap
        self.nodes = np.unique(node)
        self.rings = np.flatnonzero(counts >= 2)
        self.ring_size = counts
        targets = 2 * len(node)
        gossip_s = (gossip_ns - self.start_ns) / 1e9  # frozen rounds left out: they are no cycles
        cycle = round(gossip_s / self.cycle_s, 3) if self.cycle_s else None
        self.cycles.append(cycle)
        return {
            "t_s": (t_ns - self.start_ns) / 1e9, "cycle": cycle,
            "missing_links_pct": 100 * missed / targets if targets else 0.0,
            "incomplete_rings_pct": 100 * len(bad_rings) / len(self.rings) if len(self.rings) else 0.0,
            "rings": len(self.rings),
        }

    def by_size(self) -> dict:
        def table(sizes: np.ndarray, last_bad: np.ndarray, key: str) -> list[dict]:
            bins: dict[int, list] = defaultdict(list)
            for size, bad in zip(sizes.tolist(), last_bad.tolist()):
                k = bad + 1  # the first snapshot from which it stays complete
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
        return {"nodes": table(self.sub_size[self.nodes], self.node_bad[self.nodes], "subscriptions_from"),
                "rings": table(self.ring_size[self.rings], self.ring_bad[self.rings], "ring_size_from")}


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


class PolderCastAnalysis(ProtocolAnalysis):
    title = "PolderCast rings"

    def __init__(self, meta: dict, subscriptions: dict[int, list[str]]) -> None:
        super().__init__(meta, subscriptions)
        self.rings = RingConvergence(subscriptions, meta["started_ns"], meta["cycle_s"])
        self.convergence: list[dict] = []

    def add_snapshot(self, snapshot: Snapshot) -> None:
        if (row := self.rings.add(snapshot.table)) is not None:
            self.convergence.append(row)

    def metrics(self, final: list[dict]) -> dict:
        if not self.convergence:
            return {}
        last = self.convergence[-1]
        return {
            "ring_convergence": self.convergence,
            "rings_complete_pct": 100 - last["incomplete_rings_pct"],
            "missing_links_pct": last["missing_links_pct"],
            "rings_degree_by_subscriptions": rings_degree_by_subscriptions(final),
            "convergence_by_size": self.rings.by_size(),
        }

    def report_rows(self, metrics: dict) -> list[tuple[str, object]]:
        if not metrics:
            return []
        return [("rings complete (%), last snapshot", metrics["rings_complete_pct"]),
                ("ring links missing (%), last snapshot", metrics["missing_links_pct"]),
                ("rings", metrics["ring_convergence"][-1]["rings"])]

    def plots(self, plots: Path, metrics: dict) -> dict[str, str]:
        out = {}
        conv = metrics.get("ring_convergence")
        if conv and len(conv) > 1:
            fig, ax = plt.subplots(figsize=(6, 4))
            cycles = [c["cycle"] for c in conv]
            ax.plot(cycles, [c["missing_links_pct"] for c in conv], label="missing ring links (%)")
            ax.plot(cycles, [c["incomplete_rings_pct"] for c in conv], label="incomplete rings (%)")
            ax.set(xlabel="cycle", ylabel="%", title="Ring convergence", ylim=(0, 101))
            ax.legend()
            ax.grid(alpha=0.3)
            out["ring_convergence"] = save(fig, plots, "ring_convergence.png")
        by_size = metrics.get("convergence_by_size")
        if by_size and by_size["nodes"]:
            fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
            for ax, rows, key, label in ((axes[0], by_size["nodes"], "subscriptions_from", "subscriptions (bin start)"),
                                         (axes[1], by_size["rings"], "ring_size_from", "ring size (bin start)")):
                done = [r for r in rows if r["mean_cycle"] is not None]
                ax.plot([r[key] or 1 for r in done], [r["mean_cycle"] for r in done], marker="o", label="mean")
                ax.plot([r[key] or 1 for r in done], [r["max_cycle"] for r in done], marker=".", ls=":", label="max")
                ax.set(xscale="log", xlabel=label)
                ax.grid(alpha=0.3)
            axes[0].set(ylabel="cycle from which complete", title="Nodes")
            axes[1].set(title="Rings")
            axes[0].legend()
            out["convergence_by_size"] = save(fig, plots, "convergence_by_size.png")
        degree = metrics.get("rings_degree_by_subscriptions")
        if degree:
            fig, ax = plt.subplots(figsize=(6, 4))
            ax.plot([d["subscriptions_from"] or 1 for d in degree], [d["mean_rings_degree"] for d in degree], marker="o")
            ax.set(xscale="log", yscale="log", xlabel="subscriptions (bin start)", ylabel="mean RINGS degree",
                   title="RINGS degree against subscription size")
            ax.grid(alpha=0.3)
            out["rings_degree"] = save(fig, plots, "rings_degree.png")
        return out


ANALYSES = {"poldercast": PolderCastAnalysis}
