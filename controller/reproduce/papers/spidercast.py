"""SpiderCast's claims (design spec spidercast.md §7): the degree table and topic connectivity
of E-deg (RSS popularity, 100 topics, 10 subscriptions per node)."""

from __future__ import annotations

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
NOT_TESTABLE: dict[str, str] = {}


def claims() -> list[Claim]:
    return load("spidercast", CHECKS, NOT_TESTABLE)
