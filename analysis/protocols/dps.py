"""DPS (dps.md §6.4): the Table 1 shares, messages per node per event and the root's load.

Per event (``metrics/events.parquet``): matching M(e) = its expected receivers (subscribers whose
subscription the event matches, alive over its window, the publisher left out); contacted C(e) =
nodes other than the publisher that received a copy (``receivers`` − 1); false positives
= |C(e) \\ M(e)| = contacted − delivered (``delivered`` counts M(e) ∩ C(e)). Shares are of the
run's nodes, averaged over events, in % (the paper's Table 1: false positives = contacted −
matching when every match is delivered). On the topic mapping the false positives are the
relay load of the root and of the traversal (spec §5.1: none is a subscriber that fails to match).

Per node (``stats.jsonl``, whole run): messages sent = event copies + DPS control messages,
divided by the events published: the mean and the max over nodes (spec Fig. 3c/d, over the run
instead of 100-step windows). The root: the nodes that lead a root group (``dps.roots_led``),
their share of the events they received and of all event copies, set beside the busiest node.
"""

from __future__ import annotations

import statistics

from . import ProtocolAnalysis, register_analysis


class DpsAnalysis(ProtocolAnalysis):
    title = "DPS"
    wants_events = True

    def __init__(self, meta: dict, subscriptions: dict[int, list[str]]) -> None:
        super().__init__(meta, subscriptions)
        self.n = meta["nodes"]
        self.events: list[dict] = []
        self.stats: list[dict] = []

    def add_events(self, rows: list[dict]) -> None:
        self.events = rows

    def add_stats(self, rows: list[dict]) -> None:
        self.stats = rows

    def metrics(self, final: list[dict]) -> dict:
        if not self.events:
            return {"events": 0}
        n, events = self.n, self.events
        matching = [100 * e["expected"] / n for e in events]
        contacted = [100 * (e["receivers"] - 1) / n for e in events]
        false_pos = [100 * (e["receivers"] - 1 - e["delivered"]) / n for e in events]
        out: dict = {
            "events": len(events),
            "matching_pct": statistics.fmean(matching),
            "contacted_pct": statistics.fmean(contacted),
            "false_positive_pct": statistics.fmean(false_pos),
            "reduction_vs_broadcast_pct": 100 - statistics.fmean(contacted),
        }
        if self.stats:
            c = {r["node"]: r.get("counters", {}) for r in self.stats}
            sent = {k: v.get("events_sent", 0) + v.get("msgs_sent.dps", 0) for k, v in c.items()}
            per_event = sorted(s / len(events) for s in sent.values())
            received = {k: v.get("events_received", 0) for k, v in c.items()}
            copies = sum(received.values()) or 1
            roots = sorted(k for k, v in c.items() if v.get("dps.roots_led", 0))
            busiest = max(received, key=lambda k: (received[k], -k))
            out.update({
                "messages_per_node_per_event": {"mean": statistics.fmean(per_event), "median": statistics.median(per_event),
                                                "max": per_event[-1]},
                "trees": sum(v.get("dps.roots_led", 0) for v in c.values()),
                "groups": sum(v.get("dps.groups_led", 0) - v.get("dps.roots_led", 0) for v in c.values()),
                "subscription_retries": sum(v.get("dps.retries", 0) for v in c.values()),
                "root_load": {
                    "root_leaders": roots,
                    "events_received_share": [received[k] / len(events) for k in roots],
                    "copies_share": [received[k] / copies for k in roots],
                    "busiest_node": busiest,
                    "busiest_events_received_share": received[busiest] / len(events),
                },
            })
        return out

    def report_rows(self, metrics: dict) -> list[tuple[str, object]]:
        if not metrics.get("events"):
            return []
        rows: list[tuple[str, object]] = [
            ("matching / contacted / false positives (% of nodes)",
             f"{metrics['matching_pct']:.2f} / {metrics['contacted_pct']:.2f} / {metrics['false_positive_pct']:.2f}"),
            ("reduction of visited nodes against broadcast", f"{metrics['reduction_vs_broadcast_pct']:.2f}%"),
        ]
        if "root_load" in metrics:
            m, r = metrics["messages_per_node_per_event"], metrics["root_load"]
            rows += [
                ("trees, groups (subscription retries)", f"{metrics['trees']}, {metrics['groups']} ({metrics['subscription_retries']})"),
                ("messages per node per event: mean / median / max", f"{m['mean']:.3f} / {m['median']:.3f} / {m['max']:.3f}"),
                ("root leaders: share of events received, of all copies",
                 ", ".join(f"node {k}: {a:.2f}, {b:.3f}" for k, a, b in zip(r["root_leaders"], r["events_received_share"], r["copies_share"]))),
                ("busiest node (share of events received)", f"node {r['busiest_node']} ({r['busiest_events_received_share']:.2f})"),
            ]
        return rows


register_analysis("dps", DpsAnalysis)
