"""SpiderCast's claims (design spec spidercast.md §7): the degree table and topic connectivity
of E-deg (RSS popularity, 100 topics, 10 subscriptions per node)."""

from __future__ import annotations

import statistics

from controller.reproduce.claims import Check, Claim, Expect, Run, load

DEG = "experiments/spidercast-degree.yaml"
PAPER_N = (1000, 2000, 4000, 6000, 8000, 10000)
DEGREE_PAPER = (10.81, 10.11, 9.53, 9.24, 9.08, 8.95)
RUNS_1K = {"quick": (Run(DEG),), "paper": tuple(Run(DEG, (f"nodes.count={n}",)) for n in PAPER_N)}
OPTIONS = {"kg": 3, "kr": 0, "popularity": "rss"}


def degrees(summaries: list[dict]) -> list[float]:
    return [s["protocol_metrics"]["degree"]["mean"] for s in summaries]


CHECKS = {
    "C1": Check(RUNS_1K, degrees, {"quick": Expect("==", DEGREE_PAPER[:1], tol=0.06),
                                   "paper": Expect("==", DEGREE_PAPER, tol=0.06, shape="decreasing")},
                OPTIONS, x={"quick": PAPER_N[:1], "paper": PAPER_N}, x_label="N",
                note="mean degree per N (quick: N = 1,000 only)"),
    "C2": Check(RUNS_1K, lambda s: sum(x["protocol_metrics"]["partitioned_topics"] for x in s),
                Expect("<=", 0), OPTIONS, note="topics whose subscribers' overlay is partitioned, over the runs"),
}
POP = "experiments/spidercast-popularity-sweep.yaml"
POPULARITY = {"uniform": (), "rss": (), "zipf(1)": ("workload.alpha=1.0",), "nyse": ()}
POP_N = {"quick": (1000,), "paper": (1000, 10000)}


def popularity_runs(names: tuple[str, ...]) -> dict[str, tuple[Run, ...]]:
    """(3,0) on each named popularity distribution, at each N of the scale (E2)."""
    return {scale: tuple(Run(POP, (f"workload.popularity={name.split('(')[0]}", *POPULARITY[name], f"nodes.count={n}"))
                         for name in names for n in ns) for scale, ns in POP_N.items()}


def ringpt_excess(summaries: list[dict]) -> list[float]:
    """RingPT's mean degree over SpiderCast's, less one, per run."""
    return [s["protocol_metrics"]["ringpt_degree_mean"] / s["protocol_metrics"]["degree"]["mean"] - 1 for s in summaries]


CHECKS["C3"] = Check(RUNS_1K, ringpt_excess, Expect("between", (0.51, 0.82), abs_tol=0.05), OPTIONS,
                     x={"quick": PAPER_N[:1], "paper": PAPER_N}, x_label="N",
                     note="RingPT's mean degree (a ring per topic over the same subscriptions) over SpiderCast's, less "
                          "one, per N; the paper: 0.51 at small N to 0.82 at 10K",
                     explained="RingPT is flat in N (15.8, the paper's derived 16.3) and SpiderCast falls with N, so the "
                               "excess grows with N as the paper says (0.39 at 1K to 0.68 at 10K, "
                               "docs/results/spidercast.md); it stays lower because this SpiderCast's degree is about 5% "
                               "above the paper's at every N (C1)")
CHECKS["C6"] = Check(popularity_runs(("uniform", "rss", "nyse")),
                     lambda s: sum(x["protocol_metrics"]["partitioned_topics"] for x in s), Expect("<=", 0), OPTIONS,
                     note="partitioned topics over the runs: uniform, RSS and NYSE popularity, (3,0)")
CHECKS["C7"] = Check(popularity_runs(tuple(POPULARITY)), degrees, Expect("<=", 12), OPTIONS,
                     x={scale: [f"{name} N={n}" for name in POPULARITY for n in ns] for scale, ns in POP_N.items()},
                     x_label="popularity", note="mean degree per distribution and N, (3,0); every one below 12")
CHECKS["C8"] = Check(popularity_runs(tuple(POPULARITY)),
                     lambda s: [x["protocol_metrics"]["max_topic_diameter"] for x in s],
                     {"quick": Expect("==", [6, 6, 7, 8], abs_tol=1),
                      "paper": Expect("==", [6, 6, 6, 6, 7, 7, 8, 8], abs_tol=1)}, OPTIONS,
                     x={scale: [f"{name} N={n}" for name in POPULARITY for n in ns] for scale, ns in POP_N.items()},
                     x_label="popularity",
                     note="the largest topic diameter (hops inside a topic's overlay) per distribution and N; the "
                          "paper gives one per distribution over N = 1K-10K")
ZIPF2 = "experiments/spidercast-zipf2.yaml"
ZIPF2_K = {"(3,0)": ("protocol.params.kr=0",), "(3,1)": (), "(4,0)": ("protocol.params.kr=0", "protocol.params.kg=4")}
ZIPF2_RUNS = {"quick": tuple(Run(ZIPF2, sets) for sets in ZIPF2_K.values()),
              "paper": tuple(Run(ZIPF2, sets) for sets in ZIPF2_K.values())}


def zipf2(summaries: list[dict]) -> list[float]:
    """Zipf α = 2: mean degree under (3,0) and (3,1), then (4,0)'s partitioned topics."""
    k30, k31, k40 = (s["protocol_metrics"] for s in summaries)
    return [k30["degree"]["mean"], k31["degree"]["mean"], k40["partitioned_topics"]]


ZIPF2_CONNECTED = ("the degrees are the paper's; (4,0) connects every topic here, as (3,0) does at 6,000 and 10,000 "
                   "nodes where the paper has 15 and 14 partitioned (C4): the spec's own simulation found the same "
                   "and reads the paper's partitions as an unstated implementation detail (spidercast.md, "
                   "sanity results)")
ZIPF2_DEGREES = [Expect("==", 7, tol=0.2), Expect("==", 13, tol=0.2)]
CHECKS["C5"] = Check(ZIPF2_RUNS, zipf2, Expect("all", [*ZIPF2_DEGREES, Expect(">=", 1)]),
                     {**OPTIONS, "popularity": "zipf α = 2", "kg, kr": tuple(ZIPF2_K)},
                     x=("degree (3,0)", "degree (3,1)", "partitioned topics (4,0)"), x_label="Zipf α = 2, 1,000 nodes",
                     note="mean degree with (3,0) (paper ~7) and (3,1) (~13), then the topics (4,0) leaves "
                          "partitioned (the paper: some); 1,000 nodes at both scales, as the paper's Fig. 6(b)",
                     explained=lambda ours: ZIPF2_CONNECTED if all(e.verdict(v) != "not reproduced"
                                                                   for e, v in zip(ZIPF2_DEGREES, ours)) else "")
VIEWS = {"quick": (4000,), "paper": (4000, 8000)}
VIEW_PCT = {"quick": (5, 100), "paper": (5, 20, 100)}
"""E7's N and membership views (% of the nodes; 100: full membership). Quick runs the paper's
smaller N at the smallest view only: 5% of 1,000 nodes (50 contacts) leaves rare topics without a
known subscriber, a different setting from the paper's 200."""


def view_runs(scale: str) -> tuple[Run, ...]:
    """E7: (3,0) with a static partial membership of p% of the nodes (100%: full membership)."""
    return tuple(Run(DEG, (f"nodes.count={n}",) + (() if p == 100 else
                           ("nodes.contacts=random", f"nodes.bootstrap_contacts={n * p // 100}")))
                 for n in VIEWS[scale] for p in VIEW_PCT[scale])


def view_effect(summaries: list[dict]) -> list[float]:
    """Partitioned topics over the runs, then the largest rise of the mean degree at a partial
    view over the full view's, per N (relative)."""
    per_n: dict[int, list[dict]] = {}
    for s in summaries:  # in view_runs' order: per N, the full view last
        per_n.setdefault(s["nodes"], []).append(s)
    rise = max(run["protocol_metrics"]["degree"]["mean"] / runs[-1]["protocol_metrics"]["degree"]["mean"] - 1
               for runs in per_n.values() for run in runs)
    return [sum(s["protocol_metrics"]["partitioned_topics"] for s in summaries), rise]


PARTIAL_VIEW = ("every topic stays connected, the claim's first half; the degree rises more than 'a small effect' "
                "with the view (the spec's own simulation: +39% at 5% of 4,000 nodes): a node that knows few of a "
                "topic's subscribers links to those it knows, and the paper does not say how its membership view was "
                "drawn or refreshed (spidercast.md, sanity results)")
CHECKS["C14"] = Check({scale: view_runs(scale) for scale in VIEWS}, view_effect,
                      Expect("all", [Expect("<=", 0), Expect("<=", 0.15)]), {**OPTIONS, "membership": "static, p%"},
                      x=("partitioned topics", "degree rise at 5-20% views"), x_label="E7",
                      note="membership views of 5% and 100% of 4,000 nodes (paper: 5, 20 and 100% of 4,000 and 8,000): "
                           "partitioned topics over all runs, then the largest relative "
                           "rise of the mean degree over the full view's ('small': at most 15%, our reading)",
                      explained=lambda ours: PARTIAL_VIEW if ours[0] == 0 else "")
CHURN = "experiments/spidercast-churn.yaml"
LAMBDAS = (100, 300)
CHURN_RUNS = {"quick": tuple(Run(CHURN, (f"churn.session.mean_s={lam}", f"churn.downtime.mean_s={lam // 4}"))
                             for lam in LAMBDAS),
              "paper": tuple(Run(CHURN, (f"churn.session.mean_s={lam}", f"churn.downtime.mean_s={lam // 4}", *n))
                             for n in ((), ("nodes.count=2500",)) for lam in LAMBDAS)}


def churn_snapshots(summaries: list[dict]) -> list[float]:
    """Partitioned topics summed over every snapshot of every run, then the largest relative
    difference of the runs' mean degree (over their snapshots) between the λ values per N."""
    means = [statistics.fmean(x["degree_mean"] for x in s["protocol_metrics"]["snapshots"]) for s in summaries]
    pairs = [means[i:i + len(LAMBDAS)] for i in range(0, len(means), len(LAMBDAS))]
    return [sum(x["partitioned_topics"] for s in summaries for x in s["protocol_metrics"]["snapshots"]),
            max(max(p) / min(p) - 1 for p in pairs)]


CHURN_OPTIONS = {**OPTIONS, "membership": "full", "leave": "graceful", "rejoin": "fresh (own interest)"}
CHECKS["C15"] = Check(CHURN_RUNS, churn_snapshots, Expect("all", [Expect("<=", 0), Expect("<=", 0.1)]), CHURN_OPTIONS,
                      x=("partitioned topics, all snapshots", "degree difference between λ"), x_label="E8",
                      note=f"exponential sessions of mean λ = {' and '.join(map(str, LAMBDAS))} s, downtime λ/4 "
                           "(quick: 1,250 nodes; paper: 1,250 and 2,500): partitioned topics summed over the snapshots, "
                           "then the relative difference of the mean degree between the λ values ('does not depend': "
                           "within 10%, our reading)")
CONTROL = ("fewer than the paper's: the paper does not say which messages it counts (here SpiderCast's own, "
           "heartbeats apart), and a rejoin here keeps its own interest where the paper draws a new one "
           "(experiments/spidercast-churn.yaml)")
CHECKS["C16"] = Check(CHURN_RUNS, lambda s: [x["protocol_metrics"]["control_per_join_leave"] for x in s[::len(LAMBDAS)]],
                      {"quick": Expect("==", [38], tol=0.25), "paper": Expect("==", [38, 34], tol=0.25)}, CHURN_OPTIONS,
                      x={"quick": ("≈1,000 online",), "paper": ("≈1,000 online", "≈2,000 online")},
                      x_label="E8, λ = 100 s",
                      note="SpiderCast control messages (connects, disconnects and their replies; heartbeats apart) "
                           "per join or leave, the initial joins counted, λ = 100 s",
                      explained=lambda ours: CONTROL if max(ours) < 34 else "")
NOT_TESTABLE: dict[str, str] = {}


def claims() -> list[Claim]:
    return load("spidercast", CHECKS, NOT_TESTABLE)
