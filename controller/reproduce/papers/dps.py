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
INSTANT = ("the paper detects failures by heartbeats every 10 to 25 steps; here the simulator reports a send to a "
           "dead node at once and the copy is re-sent, so no crash costs a delivery and the delivered ratio cannot be "
           "set beside the paper's (issue #54: heartbeat-only failure detection)")
FIG3 = "Fig. 3(c)-(g) have no experiment file yet (issue #54)"
NOT_TESTABLE = {"R14": "qualitative conclusions: the other claims' verdicts stand for them",
                "R6": INSTANT, "R7": INSTANT, "R8": INSTANT,
                "R9": FIG3, "R10": FIG3, "R11": FIG3, "R12": FIG3}


def claims() -> list[Claim]:
    return load("dps", CHECKS, NOT_TESTABLE)
