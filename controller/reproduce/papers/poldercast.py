"""PolderCast's claims (design spec poldercast.md §7): E1's ring convergence, hit ratio and
duplication, from the E1 file (quick: 1,000 nodes; paper: its 10,000)."""

from __future__ import annotations

import numpy as np

from controller.reproduce.claims import Check, Claim, Expect, Run, load

E1 = "experiments/poldercast-e1-convergence.yaml"
RUNS = {"quick": (Run(E1, ("nodes.count=1000",)),), "paper": (Run(E1),)}
OPTIONS = {"ring_selection": "random (the paper's, §5.1; the default)", "ring_failover": False, "fanout": 2}
NEAREST_FIRST = {"ring_selection nearest_first (this testbed's)": ("protocol.params.ring_selection=nearest_first",)}
"""RINGS messages nearest first: this testbed's improvement on the paper's random pick, reported
beside the ring convergence claims."""


def first_cycle_rings_complete(summaries: list[dict], incomplete_pct: float = 1.0) -> float | None:
    """The first cycle at which at most ``incomplete_pct`` % of the topic rings miss a link."""
    for r in summaries[0]["protocol_metrics"]["ring_convergence"]:
        if r["incomplete_rings_pct"] <= incomplete_pct:
            return float(r["cycle"])
    return None


def last_rounds_hit_ratio(summaries: list[dict], rounds: int = 5) -> float:
    """The hit ratio of the last ``rounds`` publication rounds (the rings complete by then)."""
    rows = [r for r in summaries[0]["load"]["timeseries"] if r["published"]][-rounds:]
    return sum(r["delivered"] for r in rows) / sum(r["expected"] for r in rows)


def zero_miss_then_complete(summaries: list[dict]) -> list[float] | None:
    """When the first publication round reached every subscriber (s), and the first cycle at
    which every ring was complete (the run's last cycle + 1 where none was): P2 holds when the
    first comes first. None where no round reached every subscriber."""
    s = summaries[0]
    zero = next((r["t_s"] for r in s["load"]["timeseries"] if r["published"] and r["hit_ratio"] == 1.0), None)
    rings = s["protocol_metrics"]["ring_convergence"]
    complete = next((r["cycle"] for r in rings if r["incomplete_rings_pct"] == 0), rings[-1]["cycle"] + 1)
    return None if zero is None else [float(zero), float(complete)]


E3 = "experiments/poldercast-e3-fanout.yaml"
FANOUTS = (2, 3, 4, 5)
SOURCES = ("both", "cyclon", "vicinity")
E3_SCALE = {"quick": ("nodes.count=1000",), "paper": ()}
E3_RUNS = {scale: tuple(Run(E3, (*sets, "sim.variants=[]", f"protocol.params.fanout={f}",
                                 f"protocol.params.shortcut_source={src}"))
                        for src in SOURCES for f in FANOUTS) for scale, sets in E3_SCALE.items()}
E3_OPTIONS = {"ring_selection": OPTIONS["ring_selection"], "fanout": FANOUTS, "shortcut_source": SOURCES}


def e3(summaries: list[dict], source: str, key: str) -> list[float]:
    """Per fanout, for shortcuts from ``source``: mean hops (``hops``) or duplication (``dup``)."""
    at = SOURCES.index(source) * len(FANOUTS)
    runs = summaries[at:at + len(FANOUTS)]
    return [s["hops"]["mean"] if key == "hops" else s["duplication_factor"] for s in runs]


def change(values: list[float]) -> float:
    return values[-1] / values[0] - 1


CHECKS = {
    "P2": Check(RUNS, zero_miss_then_complete, Expect("increasing"), OPTIONS, x=("hit ratio 1 (s)", "rings complete (cycle)"),
                x_label="E1", beside=NEAREST_FIRST,
                note="the first publication round that reached every subscriber, then the first cycle with every ring "
                     "complete (cycles are 1 s)"),
    "P6": Check(E3_RUNS, lambda s: [e3(s, "both", "hops"), e3(s, "both", "dup")],
                Expect("all", [Expect("decreasing"), Expect("increasing")]), E3_OPTIONS,
                note="PolderCast (shortcuts from both): mean hops per f = 2..5, then duplication per f"),
    "P7": Check(E3_RUNS, lambda s: [change(e3(s, "cyclon", "hops")), change(e3(s, "cyclon", "dup"))],
                Expect("all", [Expect(">=", -0.05), Expect("<=", 0.05)]), E3_OPTIONS,
                note="CYCLON-only shortcuts: relative change from f = 2 to f = 5 of mean hops (no drop: ≥ −5%), "
                     "then of duplication (no rise: ≤ +5%)",
                explained="a 20-entry random view still holds a subscriber of the topic now and then, more often the "
                          "smaller the network, and a larger f uses more of them: at 10,000 nodes hops fall from "
                          "8.88 to 6.95 and duplication rises from 1.44 to 2.08 (docs/results/poldercast.md, E3 at "
                          "10,000 nodes), far less than with VICINITY's shortcuts (6.47 to 3.52, 2.02 to 4.94): "
                          "the paper's flat curve is approached, not reached"),
    "P8": Check(E3_RUNS, lambda s: [[e3(s, src, "hops")[0] for src in ("vicinity", "both", "cyclon")],
                                    [e3(s, src, "dup")[0] for src in ("vicinity", "both", "cyclon")]],
                Expect("all", [Expect("increasing"), Expect("decreasing")]), E3_OPTIONS,
                note="at f = 2, shortcuts from VICINITY, both, CYCLON: mean hops (rising: VICINITY lowest, both "
                     "between), then duplication (falling: VICINITY most); the share of nodes with 4 or more "
                     "copies is not measured",
                explained="BOTH draws its shortcuts mostly from VICINITY's view (a random CYCLON entry seldom shares "
                          "the topic), so the two differ by 2-4% in hops and not at all in duplication, at 1,000, 1,500 "
                          "and 10,000 nodes (docs/results/poldercast.md); what made the paper's VICINITY-only faster "
                          "than BOTH is not known"),
    "P1": Check(RUNS, first_cycle_rings_complete, Expect("<=", 60), OPTIONS, beside=NEAREST_FIRST,
                note="cycle at which at most 1% of the rings miss a link",
                explained="the paper ran on crawled Twitter and Facebook data; the file's synthetic Chung-Lu "
                          "graph shares links between topics more (0.643): at 10,000 nodes 8.1% of its rings "
                          "still miss a link at cycle 60 (3.8% with this testbed's nearest-first RINGS messages), "
                          "while on a geometric graph (0.36) 99% are complete at cycle 28 (docs/results/poldercast.md, E1 at 10,000 nodes)"),
    "P10": Check(RUNS, lambda s: s[0]["duplication_factor"], Expect("<=", 2), OPTIONS,
                 note="copies received per (event, receiver), f = 2",
                 explained="the bound holds per node: each sends at most f copies. Per receiver it does not: "
                           "the n subscribers of a topic, the publisher among them, send up to f copies each "
                           "to the n - 1 others, up to f n / (n - 1) per receiver (2.14 over this run's events), "
                           "above f on small topics"),
    "P15": Check(RUNS, last_rounds_hit_ratio, Expect(">=", 1.0), OPTIONS,
                 note="hit ratio of the last 5 of 60 publication rounds, a static network",
                 explained="the claim holds once the rings are complete; where some are not yet (P1 at 10,000 "
                           "nodes on the synthetic graph) a few subscribers behind a missing link miss events"),
}
LONG = ("nodes.count=1000", "publications.rounds=120", "publications.topics_per_round=20")
NO_VICINITY = ("protocol.params.use_vicinity=false",)
P3_RUNS = {scale: (Run(E1, LONG), Run(E1, (*LONG, *NO_VICINITY))) for scale in ("quick", "paper")}


def first_cycle_at(summary: dict, incomplete_pct: float) -> float | None:
    return first_cycle_rings_complete([summary], incomplete_pct)


def slowdown(summaries: list[dict]) -> list[float | None]:
    """Without VICINITY over with it: the ratio of the cycles to 99% of rings complete, then to
    every ring complete (None where a run did not get there)."""
    out: list[float | None] = []
    for pct in (1.0, 0.0):
        with_v, without = (first_cycle_at(s, pct) for s in summaries)
        out.append(without / with_v if with_v and without else None)
    return out


CHECKS["P3"] = Check(P3_RUNS, slowdown, Expect("all", [Expect(">=", 1.0), Expect("between", (3, 6))]), OPTIONS,
                     x=("to 99% of rings", "to every ring"), x_label="cycles without VICINITY ÷ with",
                     note="E1 at 1,000 nodes for 120 cycles (20 events per round), with and without VICINITY, at both "
                          "scales: without VICINITY 10,000 nodes do not converge in a run this machine can do (37.6% "
                          "of rings incomplete at cycle 60, docs/results/poldercast.md); the paper's 3-6× is read as "
                          "the time until every ring is complete, the 99% ratio is shown beside it (judged: slower)")
FACEBOOK = ("workload.directed=false",)
E2_RUNS = {scale: (*runs, *(Run(r.file, (*r.sets, *FACEBOOK)) for r in runs)) for scale, runs in RUNS.items()}


def rings_degree_slope(summary: dict, min_nodes: int = 5) -> float:
    """Log-log least-squares slope of the mean RINGS degree against subscription size (E2's
    power-of-two bins of at least ``min_nodes`` nodes, the last snapshot; a bin whose nodes have
    no ring neighbour, those alone in their topics, has no logarithm and is left out): 1 is
    linear growth."""
    bins = [b for b in summary["protocol_metrics"]["rings_degree_by_subscriptions"]
            if b["nodes"] >= min_nodes and b["mean_rings_degree"] > 0]
    slope, _ = np.polyfit(np.log2([b["subscriptions_from"] for b in bins]),
                          np.log2([b["mean_rings_degree"] for b in bins]), 1)
    return float(slope)


SUBLINEAR = 0.9
"""Below this log-log slope RINGS degree grows sublinearly, at or above it "almost linearly"
(our reading of Fig. 7's curves)."""
SAME_GRAPH = ("Twitter's sublinear growth holds; the Facebook-like workload here is the Twitter-like synthetic graph "
              "made undirected, so it keeps the same correlation between subscriptions and grows sublinearly too, "
              "and the real ego-Facebook graph grows further sublinearly (slope 0.32 at 2,000 users, "
              "docs/results/poldercast.md): the paper's Facebook sample is not available to show the contrast")
CHECKS["P5"] = Check(E2_RUNS, lambda s: [rings_degree_slope(x) for x in s],
                     Expect("all", [Expect("<=", SUBLINEAR), Expect(">=", SUBLINEAR)]), OPTIONS,
                     x=("Twitter-like", "Facebook-like"), x_label="E2 (E1's last snapshot)",
                     note=f"log-log slope of mean RINGS degree against subscription size: Twitter-like sublinear "
                          f"(< {SUBLINEAR}), Facebook-like almost linear (≥ {SUBLINEAR}, our reading)",
                     explained=lambda ours: SAME_GRAPH if ours[0] <= SUBLINEAR else "")
E5 = "experiments/poldercast-e5-churn.yaml"
E5_RUNS = {"quick": (Run(E5, ("nodes.count=1000",)),), "paper": (Run(E5),)}
E5_PHASES = {"flash crowd": (0, 10), "steady": (10, 80), "drop": (80, 100), "after": (100, None)}
"""The E5 file's churn phases, seconds after the warm-up (its flash crowd over 10 s from 0, its
20% drop at 80 s for 20 s): the windows P13's miss ratio is pooled over."""
FAILOVER = {"ring_failover true (failure detection on the data path)": ("protocol.params.ring_failover=true",)}


def miss_by_phase(summaries: list[dict]) -> list[float | None]:
    """The miss ratio of the events published in each E5 phase (pooled over its rounds)."""
    rows = [r for r in summaries[0]["load"]["timeseries"] if r["published"]]
    out: list[float | None] = []
    for start, end in E5_PHASES.values():
        within = [r for r in rows if r["t_s"] >= start and (end is None or r["t_s"] < end)]
        expected = sum(r["expected"] for r in within)
        out.append(1 - sum(r["delivered"] for r in within) / expected if expected else None)
    return out


CHECKS["P13"] = Check(E5_RUNS, miss_by_phase,
                      Expect("all", [Expect("<=", 0.01), Expect("<=", 0.01), Expect("<=", 0.04), Expect("<=", 0.01)]),
                      OPTIONS, x=tuple(E5_PHASES), x_label="E5 phase", beside=FAILOVER,
                      note="miss ratio of the events published in each phase of the E5 file (synthetic sessions for "
                           "the Skype trace; quick: 1,000 nodes, paper: 10,000): the paper's < 1% outside the drop "
                           "and 4% in it")
NOT_TESTABLE = {
    "P9": "needs Scribe (not built yet)", "P12": "needs Scribe (not built yet)", "P14": "needs Scribe (not built yet)",
    "P16": "asymptotic statements (Table 1), not a measurement", "P17": "a statement about deployments",
}


def claims() -> list[Claim]:
    return load("poldercast", CHECKS, NOT_TESTABLE)
