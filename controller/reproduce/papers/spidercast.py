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
NOT_TESTABLE: dict[str, str] = {}


def claims() -> list[Claim]:
    return load("spidercast", CHECKS, NOT_TESTABLE)
