"""DPS (dps.md §6.4): the Table 1 shares, messages per node per event and the root's load.

Per event (``metrics/events.parquet``): matching M(e) = its expected receivers (subscribers whose
subscription the event matches, alive over its window, the publisher left out); contacted C(e) =
nodes other than the publisher that received a copy (``receivers`` − 1); false positives
= |C(e) \\ M(e)| = contacted − delivered (``delivered`` counts M(e) ∩ C(e)). Shares are of the
nodes alive at the publication (the timeline's crashes and leaves; nodes that start offline are
not subtracted), averaged over events, in % (the paper's Table 1: false positives = contacted −
matching when every match is delivered).

Under crashes (spec Fig. 3(a), 3(b)): the delivered ratio (the hit ratio, Σ delivered / Σ
expected) per window of 100 steps by publication time, its lowest window, and over the events
published 100 steps or more after the last crash (back to 1 after a burst, the paper says); the
self-healing counters summed over the nodes. On the topic mapping the false positives are the
relay load of the root and of the traversal (spec §5.1: none is a subscriber that fails to match).

Per node (``stats.parquet``, whole run): messages sent = event copies + DPS control messages,
and messages received = event copies (duplicates too) + DPS control messages, each divided by
the events published: the mean, median and max over nodes (spec Fig. 3(c)-(g), over the run
instead of 100-step windows). The root: the nodes that lead a root group (``dps.roots_led``),
their share of the events they received and of all event copies, set beside the busiest node.
"""

from __future__ import annotations

import statistics

from .base import ProtocolAnalysis


class DpsAnalysis(ProtocolAnalysis):
    title = "DPS"
    wants_events = True

    def __init__(self, meta: dict, subscriptions: dict[int, list[str]]) -> None:
        super().__init__(meta, subscriptions)
        self.n = meta["nodes"]
        self.events: list[dict] = []
        self.stats: list[dict] = []
        self.downs: list[tuple[int, int]] = []
        """(t_ns, +1 a node went down, -1 one came back), in time order."""

    def add_timeline(self, rows: list[dict]) -> None:
        self.downs = sorted((r["t_ns"], 1 if r["kind"] in ("crash", "leave") else -1)
                            for r in rows if r.get("kind") in ("crash", "leave", "join") and not r.get("initial"))

    def add_events(self, rows: list[dict]) -> None:
        self.events = rows

    def add_stats(self, rows: list[dict]) -> None:
        self.stats = rows

    def metrics(self, final: list[dict]) -> dict:
        if not self.events:
            return {"events": 0}
        events = sorted(self.events, key=lambda e: e["t0_ns"])
        alive, k, down = [], 0, 0
        for e in events:
            while k < len(self.downs) and self.downs[k][0] <= e["t0_ns"]:
                down += self.downs[k][1]
                k += 1
            alive.append(self.n - max(down, 0))
        matching = [100 * e["expected"] / n for e, n in zip(events, alive)]
        contacted = [100 * (e["receivers"] - 1) / n for e, n in zip(events, alive)]
        false_pos = [100 * (e["receivers"] - 1 - e["delivered"]) / n for e, n in zip(events, alive)]
        out: dict = {
            "events": len(events),
            "matching_pct": statistics.fmean(matching),
            "contacted_pct": statistics.fmean(contacted),
            "false_positive_pct": statistics.fmean(false_pos),
            "reduction_vs_broadcast_pct": 100 - statistics.fmean(contacted),
        }
        if any(s > 0 for _, s in self.downs):
            out.update(self._under_crashes(events))
        if self.stats:
            c = {r["node"]: r.get("counters", {}) for r in self.stats}
            sent = {k: v.get("events_sent", 0) + v.get("msgs_sent.dps", 0) for k, v in c.items()}
            per_event = sorted(s / len(events) for s in sent.values())
            received = {k: v.get("events_received", 0) for k, v in c.items()}
            incoming = sorted((received[k] + v.get("dps.received", 0)) / len(events) for k, v in c.items())
            copies = sum(received.values()) or 1
            roots = sorted(k for k, v in c.items() if v.get("dps.roots_led", 0))
            busiest = max(received, key=lambda k: (received[k], -k))
            out.update({
                "messages_per_node_per_event": {"mean": statistics.fmean(per_event), "median": statistics.median(per_event),
                                                "max": per_event[-1]},
                "received_per_node_per_event": {"mean": statistics.fmean(incoming), "median": statistics.median(incoming),
                                                 "max": incoming[-1]},
                "trees": sum(v.get("dps.roots_led", 0) for v in c.values()),
                "groups": sum(v.get("dps.groups_led", 0) - v.get("dps.roots_led", 0) for v in c.values()),
                "subscription_retries": sum(v.get("dps.retries", 0) for v in c.values()),
                "healing": {k: sum(v.get(f"dps.{k}", 0) for v in c.values())
                            for k in ("suspected", "takeovers", "promoted", "reattached", "adopted", "resubscribed", "repaired")},
                "root_load": {
                    "root_leaders": roots,
                    "events_received_share": [received[k] / len(events) for k in roots],
                    "copies_share": [received[k] / copies for k in roots],
                    "busiest_node": busiest,
                    "busiest_events_received_share": received[busiest] / len(events),
                },
            })
        return out

    def _under_crashes(self, events: list[dict]) -> dict:
        window = 100 * self.meta.get("cycle_s", 0.2) * 1e9
        start = events[0]["t0_ns"]
        per: dict[int, list[int]] = {}
        for e in events:
            w = per.setdefault(int((e["t0_ns"] - start) // window), [0, 0])
            w[0] += e["delivered"]
            w[1] += e["expected"]
        by_window = [{"t_s": round(k * window / 1e9, 3), "delivered_ratio": d / x if x else None}
                     for k, (d, x) in sorted(per.items())]
        last = max(t for t, s in self.downs if s > 0)
        after = [e for e in events if e["t0_ns"] >= last + window]
        expected_after = sum(e["expected"] for e in after)
        return {
            "delivered_by_window": by_window,
            "delivered_lowest_window": min(w["delivered_ratio"] for w in by_window if w["delivered_ratio"] is not None),
            "delivered_after_crashes": sum(e["delivered"] for e in after) / expected_after if expected_after else None,
            "events_after_crashes": len(after),
        }

    def report_rows(self, metrics: dict) -> list[tuple[str, object]]:
        if not metrics.get("events"):
            return []
        rows: list[tuple[str, object]] = [
            ("matching / contacted / false positives (% of nodes)",
             f"{metrics['matching_pct']:.2f} / {metrics['contacted_pct']:.2f} / {metrics['false_positive_pct']:.2f}"),
            ("reduction of visited nodes against broadcast", f"{metrics['reduction_vs_broadcast_pct']:.2f}%"),
        ]
        if "delivered_by_window" in metrics:
            after = metrics["delivered_after_crashes"]
            rows += [("delivered ratio: lowest 100-step window, after the crashes",
                      f"{metrics['delivered_lowest_window']:.4f}, " + (f"{after:.4f}" if after is not None else "no event after"))]
        if "healing" in metrics:
            rows.append(("self-healing: " + ", ".join(metrics["healing"]), ", ".join(str(v) for v in metrics["healing"].values())))
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


ANALYSES = {"dps": DpsAnalysis}
