"""DPS's claims (design spec dps.md §7): Table 1's matching, contacted and false-positive shares
on the three content workloads (quick: 1,000 nodes and 300 events; paper: 10,000 and 1,000),
generic traversal, leader-based, no failures."""

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
                          "ratio of a 100-step window, then over the events published 100 steps after the last crash")
FIG3 = "Fig. 3(c)-(g) have no experiment file yet (issue #54)"
NOT_TESTABLE = {"R14": "qualitative conclusions: the other claims' verdicts stand for them",
                "R9": FIG3, "R10": FIG3, "R11": FIG3, "R12": FIG3}


def claims() -> list[Claim]:
    return load("dps", CHECKS, NOT_TESTABLE)
