"""StaN's analysis (stan.md §6.1, §7): logical and physical view sizes per round, per-node
improvement, the omniscient reference, and the fitness of every topic overlay before and after.

From the snapshots' per-topic views (``per_topic``: topic -> out-neighbours): LVS(p) = Σ_t
|views_p[t]|, PVS(p) = |∪_t views_p[t]|, per snapshot (one per round with ``lockstep``); IPVS and
FPVS are the first and the last snapshot's PVS. Every mean is over one snapshot's own nodes
(``ipvs_mean``: the first's, as ``rounds[0]``; ``fpvs_mean`` and ``omniscient_pvs_mean``: the
last's, as ``rounds[-1]``); what compares a node with itself (the relative improvement 100
(IPVS − FPVS) / IPVS, ``per_node``) is over the ``nodes`` in both, which under churn are
fewer. The omniscient PVS of p is |∪_t lowest_k(S_t \\ {p})| with k = |views_p[t]| and the
weight the protocol documents (SHA-1 of "p|q"), recomputed here from the subscriptions. Each
topic overlay G_t (directed, on its subscribers): weakly connected components, strong
connectivity, mean clustering coefficient of its undirected form, directed diameter (None where
not strongly connected). On real peers the open gRPC channels of each peer (``stats.parquet``
``open_channels``) are a second measure of PVS.
"""

from __future__ import annotations

import hashlib
import statistics
from pathlib import Path

import networkx as nx
import numpy as np

from ..overlay import Snapshot
from ..plotting import plt, save
from .base import ProtocolAnalysis


def weight(p: int, q: int) -> int:
    return int.from_bytes(hashlib.sha1(f"{p}|{q}".encode()).digest(), "big")


def view_sizes(rows: list[dict]) -> dict[int, tuple[int, int]]:
    """node -> (LVS, PVS) of one snapshot's rows."""
    return {r["node"]: (sum(len(v) for v in r["per_topic"].values()), len({q for v in r["per_topic"].values() for q in v}))
            for r in rows if "per_topic" in r}


def topic_graphs(rows: list[dict]) -> dict[str, nx.DiGraph]:
    graphs: dict[str, nx.DiGraph] = {}
    for r in rows:
        for t, view in r.get("per_topic", {}).items():
            g = graphs.setdefault(t, nx.DiGraph())
            g.add_node(r["node"])
            g.add_edges_from((r["node"], q) for q in view)
    return graphs


def fitness(graphs: dict[str, nx.DiGraph]) -> dict[str, dict]:
    """Per topic overlay: components (weak), strongly connected, clustering, diameter."""
    out = {}
    for t, g in sorted(graphs.items()):
        strong = nx.is_strongly_connected(g)
        out[t] = {
            "members": g.number_of_nodes(),
            "components": nx.number_weakly_connected_components(g),
            "strongly_connected": strong,
            "clustering": nx.average_clustering(g.to_undirected()),
            "diameter": nx.diameter(g) if strong else None,
            "no_in_links": sum(1 for _, d in g.in_degree() if d == 0),
        }
    return out


def omniscient_pvs(final: list[dict], subscriptions: dict[int, list[str]]) -> dict[int, int]:
    members: dict[str, list[int]] = {}
    for node, topics in subscriptions.items():
        for t in topics:
            members.setdefault(t, []).append(node)
    out = {}
    for r in final:
        p, chosen = r["node"], set()
        for t, view in r.get("per_topic", {}).items():
            ranked = sorted((weight(p, q), q) for q in members.get(t, ()) if q != p)
            chosen.update(q for _, q in ranked[:len(view)])
        out[p] = len(chosen)
    return out


class StanAnalysis(ProtocolAnalysis):
    title = "StaN: link sharing across topic overlays"

    def __init__(self, meta: dict, subscriptions: dict[int, list[str]]) -> None:
        super().__init__(meta, subscriptions)
        self.rounds: list[dict] = []
        self.first: list[dict] = []
        self.first_sizes: dict[int, tuple[int, int]] = {}
        self.lvs_changed: set[int] = set()
        self.open_channels: list[int] = []
        self.replies_late = 0

    def add_snapshot(self, snapshot: Snapshot) -> None:
        rows = snapshot.rows
        sizes = view_sizes(rows)
        if not sizes:
            return
        if not self.first:
            self.first, self.first_sizes = rows, sizes
        self.lvs_changed.update(p for p, (lvs, _) in sizes.items() if p in self.first_sizes and lvs != self.first_sizes[p][0])
        self.rounds.append({"t_s": rows[0]["t_ns"] / 1e9, "lvs_mean": statistics.fmean(v[0] for v in sizes.values()),
                            "pvs_mean": statistics.fmean(v[1] for v in sizes.values())})

    def add_stats(self, rows: list[dict]) -> None:
        self.open_channels = [r["counters"]["open_channels"] for r in rows if "open_channels" in r.get("counters", {})]
        self.replies_late = sum(r.get("counters", {}).get("replies_late", 0) for r in rows)

    def metrics(self, final: list[dict]) -> dict:
        if not self.rounds:
            return {}
        last = view_sizes(final)
        nodes = sorted(set(last) & set(self.first_sizes))  # per node: those in both snapshots
        ipvs = np.array([self.first_sizes[p][1] for p in nodes], dtype=float)
        fpvs = np.array([last[p][1] for p in nodes], dtype=float)
        improvement = np.where(ipvs > 0, 100 * (ipvs - fpvs) / np.maximum(ipvs, 1), 0.0)
        omni = omniscient_pvs(final, self.subscriptions)
        ipvs_mean = statistics.fmean(v[1] for v in self.first_sizes.values())  # each snapshot's own nodes
        fpvs_mean = statistics.fmean(v[1] for v in last.values())
        before, after = fitness(topic_graphs(self.first)), fitness(topic_graphs(final))
        out: dict = {
            "nodes": len(nodes),
            "rounds": self.rounds,
            "lvs_mean": self.rounds[-1]["lvs_mean"],
            "lvs_constant": not self.lvs_changed,
            "nodes_whose_lvs_changed": len(self.lvs_changed),
            "ipvs_mean": ipvs_mean,
            "fpvs_mean": fpvs_mean,
            "pvs_reduction": 1 - fpvs_mean / ipvs_mean if ipvs_mean else 0.0,
            "omniscient_pvs_mean": statistics.fmean(omni.values()),
            "improvement_pct": {"median": float(np.median(improvement)), "mean": float(improvement.mean()),
                                "share_over_40": float((improvement > 40).mean()),
                                "share_negative": float((improvement < 0).mean())},
            "per_node": [{"node": p, "ipvs": int(i), "fpvs": int(f), "omniscient_pvs": omni[p]}
                         for p, i, f in zip(nodes, ipvs, fpvs)],
            "overlays": len(after),
            "overlays_disconnected": {"initial": sum(v["components"] > 1 for v in before.values()),
                                      "final": sum(v["components"] > 1 for v in after.values())},
            "overlays_not_strongly_connected": {"initial": sum(not v["strongly_connected"] for v in before.values()),
                                                "final": sum(not v["strongly_connected"] for v in after.values())},
            "members_without_in_links": {"initial": sum(v["no_in_links"] for v in before.values()),
                                         "final": sum(v["no_in_links"] for v in after.values())},
            "clustering_mean": {"initial": _mean(before, "clustering"), "final": _mean(after, "clustering")},
            "diameter_mean": {"initial": _mean(before, "diameter"), "final": _mean(after, "diameter")},
            "per_topic": {t: {"initial": before.get(t), "final": v} for t, v in after.items()},
        }
        if self.open_channels:
            out["open_channels_mean"] = statistics.fmean(self.open_channels)
        out["replies_late"] = self.replies_late
        return out

    @staticmethod
    def sweep(sweep_dir: Path, runs: list[tuple[dict, dict]]) -> dict:
        return growth(sweep_dir, runs)

    def plots(self, plots: Path, metrics: dict) -> dict[str, str]:
        if not metrics:
            return {}
        fig, (left, mid, right) = plt.subplots(1, 3, figsize=(14, 3.8))
        rounds = metrics["rounds"]
        x = range(len(rounds))
        left.plot(x, [r["lvs_mean"] for r in rounds], "s-", label="LVS (logical links)")
        left.plot(x, [r["pvs_mean"] for r in rounds], "o-", label="PVS (physical links)")
        left.axhline(metrics["omniscient_pvs_mean"], color="k", ls=":", label="omniscient PVS")
        left.set(xlabel="snapshot (round)", ylabel="mean view size", ylim=(0, None))
        left.legend(fontsize=8)
        per = metrics["per_node"]
        i, f = np.array([p["ipvs"] for p in per]), np.array([p["fpvs"] for p in per])
        mid.scatter(i, f, s=8, alpha=0.6)
        top = max(1, int(i.max(initial=1)))
        mid.plot([0, top], [0, top], "k--", lw=0.8)
        mid.set(xlabel="initial PVS", ylabel="final PVS")
        topics = metrics["per_topic"].values()
        for key, pos in (("clustering", 0), ("diameter", 1)):
            data = [[v[when][key] for v in topics if v[when] and v[when][key] is not None] for when in ("initial", "final")]
            right.boxplot(data, positions=[pos * 3, pos * 3 + 1], widths=0.8)
        right.set_xticks([0, 1, 3, 4], ["clust. init", "clust. final", "diam. init", "diam. final"], fontsize=8)
        right.set(ylabel="per topic overlay")
        return {"stan": save(fig, plots, "stan.png")}

    def report_rows(self, metrics: dict) -> list[tuple[str, object]]:
        if not metrics:
            return []
        m = metrics
        rows: list[tuple[str, object]] = [
            ("LVS (mean; constant across snapshots)", f"{m['lvs_mean']:.2f} ({'yes' if m['lvs_constant'] else 'no'})"),
            ("PVS initial → final (omniscient)", f"{m['ipvs_mean']:.2f} → {m['fpvs_mean']:.2f} "
                                                 f"({m['omniscient_pvs_mean']:.2f}); −{100 * m['pvs_reduction']:.1f}%"),
            ("PVS per snapshot", ", ".join(f"{r['pvs_mean']:.2f}" for r in m["rounds"])),
            ("improvement per node: median, > 40%, < 0",
             f"{m['improvement_pct']['median']:.1f}%, {100 * m['improvement_pct']['share_over_40']:.0f}% of nodes, "
             f"{100 * m['improvement_pct']['share_negative']:.0f}% of nodes"),
            ("topic overlays disconnected (initial, final)",
             f"{m['overlays_disconnected']['initial']}, {m['overlays_disconnected']['final']} of {m['overlays']}"),
            ("not strongly connected; members no one links to (initial, final)",
             f"{m['overlays_not_strongly_connected']['initial']}, {m['overlays_not_strongly_connected']['final']}; "
             f"{m['members_without_in_links']['initial']}, {m['members_without_in_links']['final']}"),
            ("mean clustering (initial → final)", _pair(m["clustering_mean"])),
            ("mean directed diameter (initial → final)", _pair(m["diameter_mean"])),
        ]
        if "open_channels_mean" in m:
            rows.append(("open gRPC channels per peer (mean)", f"{m['open_channels_mean']:.2f}"))
        return rows


def growth(sweep_dir: Path, runs: list[tuple[dict, dict]]) -> dict:
    """The paper's Fig. 8: mean IPVS and FPVS against the universe's topic count, per workload
    flavour (or one group), with least-squares slopes and their ratio (IPVS slope / FPVS slope:
    how many times faster PVS grows without StaN than with it), averaged over seeds per point."""
    groups: dict[str, dict[int, list[tuple[float, float]]]] = {}
    for row, summary in runs:
        m = summary.get("protocol_metrics", {})
        if "ipvs_mean" in m:
            group = groups.setdefault(str(row.get("workload.flavour", "all")), {})
            group.setdefault(summary["topics"], []).append((m["ipvs_mean"], m["fpvs_mean"]))
    out: dict = {}
    for name, by_topics in sorted(groups.items()):
        topics = sorted(by_topics)
        ipvs = [statistics.fmean(i for i, _ in by_topics[t]) for t in topics]
        fpvs = [statistics.fmean(f for _, f in by_topics[t]) for t in topics]
        entry: dict = {"topics": topics, "ipvs_mean": ipvs, "fpvs_mean": fpvs}
        if len(topics) > 1:
            a, b = np.polyfit(topics, ipvs, 1)[0], np.polyfit(topics, fpvs, 1)[0]
            entry.update(ipvs_slope=float(a), fpvs_slope=float(b), slope_ratio=float(a / b) if b else None)
        out[name] = entry
    if out:
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, e in out.items():
            line, = ax.plot(e["topics"], e["ipvs_mean"], "o--", label=f"{name}: initial PVS")
            ax.plot(e["topics"], e["fpvs_mean"], "s-", color=line.get_color(), label=f"{name}: final PVS (StaN)")
        ax.set(xlabel="topics in the universe", ylabel="mean PVS")
        ax.legend(fontsize=8)
        save(fig, sweep_dir, "stan_growth.png")
    return {"pvs_growth": out} if out else {}


def _mean(fit: dict[str, dict], key: str) -> float | None:
    values = [v[key] for v in fit.values() if v[key] is not None]
    return statistics.fmean(values) if values else None


def _pair(d: dict) -> str:
    return " → ".join("n/a" if d[k] is None else f"{d[k]:.3f}" for k in ("initial", "final"))


ANALYSES = {"stan": StanAnalysis}
