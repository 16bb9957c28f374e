"""Interest-aware gossip on a static graph (ferretti-gossip.md §9): reach per event and per
network, set beside the analytic model on the run's own graphs.

Per event (``metrics/events.parquet``): receivers R(e) (the source, relays and subscribers),
subscribers reached S(e) (the source counts if it subscribes), copies M(e) and duplicates
M(e) − (R(e) − 1). Networks (``sim.networks``): the publisher's network is its id // nodes.

The model (:mod:`analysis.gossip_model`) is evaluated per network on the realised degree
histogram (``run.json`` ``topology``) and the realised σ of the event's topic in that network
(its subscribers / nodes), with the run's γ: eq. 17 below the threshold, the outbreak estimator
above it. Near Γc a finite network falls short of eq. 17 (§10 item 4); the note says so.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

import numpy as np

from .. import gossip_model as model
from ..plotting import plt, save
from .base import ProtocolAnalysis

SPREAD_SHARE = 0.1
"""An event *spreads* when it reaches more than this share of its network's nodes. Above the
transition reach is bimodal: an event dies out near its publisher or reaches most of the graph
(on the ACL graph of F7, 7-9% of the events stay near their publisher)."""


class StaticGossipAnalysis(ProtocolAnalysis):
    title = "Gossip on a static graph (Ferretti)"
    wants_events = True

    def __init__(self, meta: dict, subscriptions: dict[int, list[str]]) -> None:
        super().__init__(meta, subscriptions)
        self.n = meta["nodes"]
        self.networks = meta.get("networks", 1)
        self.events: list[dict] = []

    def add_events(self, rows: list[dict]) -> None:
        self.events = rows

    def _subscribers(self) -> Counter:
        """(network, topic) -> subscribers in that network."""
        return Counter((node // self.n, t) for node, ts in self.subscriptions.items() for t in ts)

    def metrics(self, final: list[dict]) -> dict:
        if not self.events:
            return {"events": 0}
        n, gamma = self.n, self.meta.get("protocol_params", {}).get("gamma")
        subscribers = self._subscribers()
        graphs = self.meta.get("topology", [])
        degrees = [model.Degrees.from_histogram(g["degree_histogram"]) for g in graphs]
        per_network: dict[int, list[int]] = {}
        reached_subs: list[int] = []
        predicted: list[dict] = []
        memo: dict[tuple[int, str], dict] = {}
        for e in self.events:
            k = e["publisher"] // n
            per_network.setdefault(k, []).append(e["receivers"])
            source_subscribes = e["topic"] in self.subscriptions.get(e["publisher"], ())
            reached_subs.append(e["delivered"] + source_subscribes)
            if degrees and gamma is not None:
                key = (k, e["topic"])
                if key not in memo:
                    memo[key] = model.predict(degrees[k], subscribers[key] / n, gamma, n)
                predicted.append(memo[key])
        receivers = [r for rs in per_network.values() for r in rs]
        means = [statistics.fmean(per_network[k]) for k in sorted(per_network)]
        copies = sum(e["copies"] for e in self.events)
        spreading = [r for r in receivers if r > SPREAD_SHARE * n]
        out: dict = {
            "events": len(self.events), "networks": self.networks, "nodes_per_network": n,
            "receivers_mean": statistics.fmean(receivers),
            "receivers_fraction": statistics.fmean(receivers) / n,
            "receivers_mean_per_network": means,
            "receivers_sd_across_networks": statistics.stdev(means) if len(means) > 1 else 0.0,
            "events_spreading_share": len(spreading) / len(receivers),
            "receivers_mean_spreading": statistics.fmean(spreading) if spreading else None,
            "subscribers_reached_mean": statistics.fmean(reached_subs),
            "copies_per_receiver": copies / max(1, sum(r - 1 for r in receivers)),
            "duplicates_per_event": statistics.fmean(e["copies"] - (e["receivers"] - 1) for e in self.events),
            "max_hops": max(e["max_hops"] for e in self.events),
            "ttl": self.meta.get("protocol_params", {}).get("ttl"),
            "topology": [{k: v for k, v in g.items() if k != "degree_histogram"} for g in graphs],
        }
        if predicted:
            out["model"] = model_summary(predicted, out["receivers_mean"])
        return out

    def plots(self, plots: Path, metrics: dict) -> dict[str, str]:
        if not self.events:
            return {}
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
        r = np.array([e["receivers"] for e in self.events])
        left.hist(r, bins=np.unique(np.geomspace(1, max(2, r.max()) + 1, 40).astype(int)), color="tab:blue")
        left.set(xscale="log", yscale="log", xlabel="receivers per event (source included)", ylabel="events")
        means = metrics["receivers_mean_per_network"]
        right.plot(range(len(means)), means, "o", label="simulation (mean per network)")
        if "model" in metrics:
            right.axhline(metrics["model"]["receivers_mean"], color="k", ls="--",
                          label=f"model ({metrics['model']['regime']} Γc)")
        right.set(xlabel="network", ylabel="mean receivers per event")
        right.legend(fontsize=8)
        return {"receivers": save(fig, plots, "receivers.png")}

    def report_rows(self, metrics: dict) -> list[tuple[str, object]]:
        if not metrics.get("events"):
            return []
        rows: list[tuple[str, object]] = [
            ("networks × events", f"{metrics['networks']} × {metrics['events'] // max(1, metrics['networks'])}"),
            ("mean receivers per event", f"{metrics['receivers_mean']:.3f} "
                                         f"(sd across networks {metrics['receivers_sd_across_networks']:.3f})"),
            ("share of the network reached", f"{metrics['receivers_fraction']:.4f}"),
            ("mean subscribers reached", f"{metrics['subscribers_reached_mean']:.3f}"),
            ("copies per receiver", f"{metrics['copies_per_receiver']:.3f}"),
            ("max hops (ttl)", f"{metrics['max_hops']} ({metrics['ttl']})"),
        ]
        graphs = metrics["topology"]
        if graphs:
            rows.append(("graphs (mean over networks)", ", ".join(
                f"{label} {statistics.fmean(g[key] for g in graphs):.4g}" for label, key in (
                    ("mean degree", "mean_degree"), ("<k²>", "mean_degree_squared"), ("components", "components"),
                    ("giant component", "giant_component"), ("isolated", "isolated")))))
        if "model" in metrics:
            mo = metrics["model"]
            rows += [("Γ, Γc, Γ/Γc", f"{mo['Gamma']:.4f}, {mo['Gamma_c']:.4f}, {mo['Gamma_over_Gamma_c']:.3f}"),
                     ("model receivers", f"{mo['receivers_mean']:.3f} ({mo['estimate']})"),
                     ("simulation / model", f"{mo['sim_over_model']:.4f}"),
                     ("note", mo["note"])]
        return rows


def model_summary(predicted: list[dict], sim_mean: float) -> dict:
    """The per-event predictions averaged, with a word on how far to trust the comparison."""
    avg = model.average(predicted)
    mean, ratio = avg.pop("receivers"), avg["Gamma_over_Gamma_c"]
    out = {
        "estimate": {"below": "eq. 17", "above": "N x outbreak estimator (§6 item 11)"}.get(avg["regime"], "mixed"),
        "receivers_mean": mean,
        "sim_over_model": sim_mean / mean if mean else None,
        **avg,
    }
    if model.near_threshold(avg):
        out["note"] = (f"Γ is {ratio:.2f} of Γc: near the threshold a finite network runs out of fresh nodes "
                       "(finite-size depletion), so simulation falls below eq. 17, which assumes an infinite tree-like graph")
    elif avg["regime"] == "below":
        out["note"] = "below the threshold, away from Γc: eq. 17 should hold within sampling noise"
    else:
        out["note"] = "above the threshold: eq. 17 diverges; compared with N x the outbreak estimator"
    return out


ANALYSES = {"static_gossip": StaticGossipAnalysis}
