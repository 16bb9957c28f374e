"""DPS's claims (design spec dps.md §7): Table 1's matching, contacted and false-positive shares
on the three content workloads (quick: 1,000 nodes and 300 events; paper: 10,000 and 1,000),
generic traversal, leader-based, no failures (R1-R5); the delivered ratio under steady crashes and
a burst, with heartbeat failure detection (Fig. 3(a)/(b), R6-R8); messages per node per event as
the system and the subscriptions grow (Fig. 3(c)-(g), R9-R12)."""

from __future__ import annotations

from controller.reproduce.claims import Check, Claim, Expect, Run, load

TABLE1 = "experiments/dps-table1.yaml"
OPTIONS = {"traversal": "generic", "comm": "leader", "join_attr_policy": "random (the paper: arbitrary)",
           "failure detection": "none needed (no failures)",
           "tree location": "a seed node's directory (the paper: random walks; not built)"}


def runs(workload: str) -> dict[str, tuple[Run, ...]]:
    quick = ("nodes.count=1000", "publications.count=300", f"workload.name={workload}")
    return {"quick": (Run(TABLE1, quick),), "paper": (Run(TABLE1, (f"workload.name={workload}",)),)}


def shares(summaries: list[dict]) -> list[float]:
    m = summaries[0]["protocol_metrics"]
    return [m["matching_pct"], m["contacted_pct"], m["false_positive_pct"]]


SHARES = {"x": ("matching", "contacted", "false positives"), "x_label": "% of the nodes"}
FLOOR = ("the workload as Table 1 describes it puts a floor of about 24.3% under the share any DPS overlay "
         "contacts (the join attribute drawn at random, attributes independent), above the paper's 13.56; "
         "docs/results/dps.md works it out and tests/unit/test_content_workloads.py pins it")
CHECKS = {
    "R1": Check(runs("stock"), shares, Expect("==", [2.37, 13.56, 11.19], abs_tol=5.0), OPTIONS,
                note="matching / contacted / false positives, % of the nodes alive", **SHARES, explained=FLOOR),
    "R2": Check(runs("game"), shares, Expect("==", [25.13, 54.74, 29.61], abs_tol=5.0), OPTIONS,
                note="matching / contacted / false positives, % of the nodes alive", **SHARES,
                explained="matching agrees within a point; ours contacts about 49.7%, the floor any DPS overlay "
                          "must contact on this workload (49.71, docs/results/dps.md): the paper's overlay "
                          "contacted about 5 points more than it had to, so ours is up to 5 points lower"),
    "R3": Check(runs("alert"), shares, Expect("==", [0.42, 17.15, 16.73], abs_tol=5.0), OPTIONS,
                note="matching / contacted / false positives, % of the nodes alive", **SHARES),
}
WORKLOADS = ("stock", "game", "alert")
ALL = {scale: tuple(r for w in WORKLOADS for r in runs(w)[scale]) for scale in ("quick", "paper")}
CHECKS["R4"] = Check(ALL, lambda s: min(100 - x["protocol_metrics"]["contacted_pct"] for x in s), Expect(">=", 45),
                     OPTIONS, note="the least reduction of visited nodes against a broadcast (100 − contacted %) over "
                                   "the three workloads; the paper's: 86.44, 45.26, 82.85")
CHECKS["R5"] = Check(ALL, lambda s: max(x["protocol_metrics"]["false_positive_pct"] for x in s), Expect("<=", 30),
                     OPTIONS, note="the largest false-positive share (% of the nodes) over the three workloads")
CRASHES, BURST = "experiments/dps-crashes.yaml", "experiments/dps-burst.yaml"
VARIANTS = (("leader", "root"), ("leader", "generic"), ("epidemic", "root"), ("epidemic", "generic"))
P = {"quick": (0.25,), "paper": (0.01, 0.05, 0.1, 0.25)}
"""Fig. 3(a)'s crash probabilities per step (0.25: a quarter of the nodes left at the end)."""


def crash_runs(variants=VARIANTS) -> dict[str, tuple[Run, ...]]:
    """Every variant at every p of the scale (p fastest), on the 1,000 nodes of the paper's E2."""
    return {scale: tuple(Run(CRASHES, (f"protocol.params.comm={c}", f"protocol.params.traversal={t}",
                                       f"churn.phases.0.probability={p}")) for c, t in variants for p in ps)
            for scale, ps in P.items()}


def lowest_per_variant(variants: int):
    """The lowest delivered ratio (hit ratio: Σ delivered / Σ expected) of each of ``variants``
    over its crash probabilities (the summaries in ``crash_runs`` order)."""
    def lowest(s: list[dict]) -> list[float]:
        n = len(s) // variants
        return [min(x["hit_ratio"] for x in s[k:k + n]) for k in range(0, len(s), n)]
    return lowest


HEARTBEAT = {"failure detection": "heartbeat: sends to the dead lost silently, probes every 10-25 steps, "
                                  "suspected after 1 unanswered round (probe_misses)",
             "tree location": OPTIONS["tree location"], "step": "5 ms links, 200 ms steps (several hops per step)"}
ORACLE = {"oracle detection": ("sim.failure_detection=oracle",)}
LABELS = tuple(f"{c}/{t}" for c, t in VARIANTS)
CHECKS["R6"] = Check(crash_runs(), lowest_per_variant(4), Expect(">=", 0.80), HEARTBEAT,
                     x=LABELS, x_label="lowest delivered ratio", beside=ORACLE,
                     note="delivered ratio of each variant (comm/traversal), its lowest over the crash probabilities run "
                          "(quick: p = 0.25; paper: 0.01, 0.05, 0.1, 0.25)")
CHECKS["R7"] = Check(crash_runs(VARIANTS[2:]), lowest_per_variant(2), Expect(">=", 0.97), HEARTBEAT,
                     x=LABELS[2:], x_label="lowest delivered ratio", beside=ORACLE,
                     note="epidemic, k = 2 (fanout): delivered ratio of each traversal, its lowest over the crash "
                          "probabilities run")
CHECKS["R8"] = Check({"quick": (Run(BURST),), "paper": (Run(BURST),)},
                     lambda s: [s[0]["protocol_metrics"]["delivered_lowest_window"],
                                s[0]["protocol_metrics"]["delivered_after_crashes"]],
                     Expect("all", [Expect(">=", 0.95), Expect(">=", 0.99)]), HEARTBEAT,
                     x=("lowest 100-step window", "after the burst"), x_label="delivered ratio", beside=ORACLE,
                     note="generic traversal, leader-based; 500 crashes in steps 1,000-2,000: the lowest delivered "
                          "ratio of a 100-step window, then over the events published 100 steps after the last crash",
                     explained="a window holds 10 events, so one event lost whole (400 to 500 subscribers) takes it to "
                               "about 0.82; in the quick run (seed 1) two events were lost whole because every path up "
                               "from the publisher's groups ran through a leader that had crashed 0.8 to 3.2 s before, "
                               "which no probe round (every 2 to 5 s) had found yet; every other window is above 0.92")

# Fig. 3(c)-(g): messages per node per event, the median and the max node, over whole runs (the
# paper: 100-step windows of one run that grows). Trends as ratios of the largest setting's value
# to the smallest's: "flat" within a factor 1.5 either way, "grows" by at least 1.2 (choices).
FLAT, GROWS = Expect("between", (0.67, 1.5)), Expect(">=", 1.2)
SIZES = {"quick": (250, 500, 1000), "paper": (1000, 1500, 2000, 2500)}
SUBS = {"quick": (1, 3, 6), "paper": (1, 4, 10)}
LOAD_VARIANTS = (("leader", "root"), ("epidemic", "root"), ("leader", "generic"))
LOAD_OPTIONS = {"counting": "whole runs, joins included (the paper: 100-step windows of one growing run)",
                "failure detection": "none needed (no failures)", "tree location": OPTIONS["tree location"]}


def scale_runs() -> dict[str, tuple[Run, ...]]:
    """E4: root traversal, leader-based then epidemic, at each size (size fastest)."""
    return {scale: tuple(Run("experiments/dps-scale.yaml", (f"protocol.params.comm={c}", f"nodes.count={n}",
                                                            *(("publications.count=100",) if scale == "quick" else ())))
                         for c in ("leader", "epidemic") for n in ns)
            for scale, ns in SIZES.items()}


def load_runs() -> dict[str, tuple[Run, ...]]:
    """E5 and E6: each of ``LOAD_VARIANTS`` at each subscription count (count fastest)."""
    quick = ("nodes.count=300", "publications.count=100")
    return {scale: tuple(Run("experiments/dps-load.yaml", (f"protocol.params.comm={c}", f"protocol.params.traversal={t}",
                                                           f"workload.subscriptions.min={k}", f"workload.subscriptions.max={k}",
                                                           *(quick if scale == "quick" else ())))
                         for c, t in LOAD_VARIANTS for k in ks)
            for scale, ks in SUBS.items()}


def series(s: list[dict], variant: int, variants: int, metric: str, stat: str) -> list[float]:
    """``stat`` (median, max) of ``metric`` per node per event for one variant, over its settings."""
    n = len(s) // variants
    return [x["protocol_metrics"][metric][stat] for x in s[variant * n:(variant + 1) * n]]


def growth(values: list[float]) -> float:
    return values[-1] / values[0] if values[0] else float("inf")


SENT, RECEIVED = "messages_per_node_per_event", "received_per_node_per_event"
CHECKS["R9"] = Check(scale_runs(),
                     lambda s: [growth(series(s, 1, 2, SENT, "median")), growth(series(s, 1, 2, SENT, "max")),
                                growth(series(s, 0, 2, SENT, "median")), growth(series(s, 0, 2, SENT, "max"))],
                     Expect("all", [FLAT, FLAT, FLAT, GROWS]), LOAD_OPTIONS,
                     x=("epidemic median", "epidemic max", "leader median", "leader max"),
                     x_label="sent per event: largest N ÷ smallest",
                     note="root traversal; messages sent per node per event (event copies and control), median and max "
                          "node, at the largest size over the smallest (quick: 250 to 1,000 nodes, paper: 1,000 to 2,500); "
                          "flat: within a factor 1.5, grows: by 1.2 or more")
CHECKS["R10"] = Check(load_runs(),
                      lambda s: [min(e / max(le, 1e-9) for e, le in zip(series(s, 1, 3, RECEIVED, "median"),
                                                                     series(s, 0, 3, RECEIVED, "median"))),
                                 growth(series(s, 0, 3, RECEIVED, "median"))],
                      Expect("all", [Expect(">=", 1.0), FLAT]), LOAD_OPTIONS,
                      x=("epidemic ÷ leader median, least", "leader median growth"), x_label="received per event",
                      note="root traversal; messages received per node per event (event copies, duplicates too, and "
                           "control): the median node's under epidemic over leader-based at each subscription count (the "
                           "least), and leader-based's at the most subscriptions over the fewest (flat: within 1.5)")
CHECKS["R11"] = Check(load_runs(),
                      lambda s: [growth(series(s, 0, 3, SENT, "max")), series(s, 0, 3, SENT, "median")[-1],
                                 series(s, 1, 3, SENT, "max")[-1] / series(s, 0, 3, SENT, "max")[-1]],
                      Expect("all", [GROWS, Expect("<=", 0.1), Expect("<=", 0.5)]), LOAD_OPTIONS,
                      x=("leader max growth", "leader median", "epidemic max ÷ leader max"), x_label="sent per event",
                      note="root traversal; messages sent per node per event: leader-based's max node at the most "
                           "subscriptions over the fewest (grows: 1.2 or more), its median node at the most (the paper: 0; "
                           "here at most 0.1 per event, the subscription's own messages spread over the run), and "
                           "epidemic's max over leader-based's at the most subscriptions (the paper: under half)")
CHECKS["R12"] = Check(load_runs(),
                      lambda s: [growth(series(s, 0, 3, RECEIVED, "max")), growth(series(s, 2, 3, RECEIVED, "max")),
                                 series(s, 0, 3, SENT, "max")[-1] / series(s, 2, 3, SENT, "max")[-1]],
                      Expect("all", [GROWS, FLAT, FLAT]), LOAD_OPTIONS,
                      x=("root max received growth", "generic max received growth", "root ÷ generic max sent"),
                      x_label="per event",
                      note="leader-based; messages received per node per event, the max node (root traversal: the owner), "
                           "at the most subscriptions over the fewest (grows: 1.2 or more; generic: flat, within 1.5), and "
                           "the max node's sent, root over generic, at the most subscriptions (the paper: nearly the same)")
NOT_TESTABLE = {"R14": "qualitative conclusions: the other claims' verdicts stand for them"}


def claims() -> list[Claim]:
    return load("dps", CHECKS, NOT_TESTABLE)
