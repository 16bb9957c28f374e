"""StaN's claims (design spec stan.md §7): the synthetic grid of Fig. 6 (100 nodes, 16 topics,
8 rounds), repeated over seeds (quick: 5; paper: 20, as the paper averages 5 to 10 runs)."""

from __future__ import annotations

import statistics

import numpy as np

from controller.reproduce.claims import Check, Claim, Expect, Run, load, mean_sd

GRID = "experiments/stan-synthetic.yaml"
RUNS = {"quick": (Run(GRID, seeds=tuple(range(1, 6))),), "paper": (Run(GRID, seeds=tuple(range(1, 21))),)}
OPTIONS = {"ttl": 5, "rounds": 8, "weight": "SHA-1 of p|q"}


def per_seed(summaries: list[dict], key: str) -> list:
    return [s["protocol_metrics"][key] for s in summaries]


def not_connected(summaries: list[dict]) -> list[int]:
    """Over the seeds: final topic overlays not weakly connected, then not strongly connected."""
    return [sum(m["final"] for m in per_seed(summaries, key))
            for key in ("overlays_disconnected", "overlays_not_strongly_connected")]


ORPHANS = ("the paper's criterion (one component of the undirected overlay) holds in every overlay of every seed; "
           "with directed links some end not strongly connected, as when a member ends with no one linking to it "
           "(Alg. 2's walks collect visited nodes and their views only, so it is never collected again) and misses "
           "that topic's events: hit ratio below 1 in those seeds. With snoop: true no overlay lost strong connectivity in the seeds tried "
           "(docs/results/stan.md)")


CHECKS = {
    "S1": Check(RUNS, lambda s: all(per_seed(s, "lvs_constant")), Expect("true"), OPTIONS,
                note="LVS unchanged on every node, every seed"),
    "S2": Check(RUNS, lambda s: mean_sd(per_seed(s, "pvs_reduction")), Expect("==", 0.4, tol=0.25), OPTIONS,
                note="1 − FPVS/IPVS over the seeds (paper: 25 → about 15, −40%); the fall is the claim, our "
                     "start and end values differ from the paper's (about 27 → 19 on the same grid)"),
    "S9": Check(RUNS, not_connected, Expect("all", [Expect("<=", 0), Expect("<=", 0)]), OPTIONS,
                x=("weakly", "strongly"), x_label="overlays not connected, all seeds",
                note="topic overlays (directed graphs of the final views) not weakly connected, then not strongly "
                     "connected, summed over the seeds",
                explained=lambda ours: ORPHANS if ours[0] == 0 else ""),
}
UNIVERSES = "experiments/stan-universes.yaml"
SIZES = {"livejournal": (10000, {25: 1105, 50: 2004, 100: 2898, 200: 3474, 400: 4173, 800: 4936}),
         "wikipedia": (6000, {2: 3147, 4: 3568, 8: 4116, 16: 5153, 32: 5604, 64: 5781})}
"""Table 1's universes (𝓛1-𝓛8, 𝓦1-𝓦8) as the file's sweep builds them: seeds → nodes."""
UNIVERSE_SEEDS = {"quick": {"livejournal": (25, 200, 800), "wikipedia": (2, 16, 64)},
                  "paper": {flavour: tuple(nodes) for flavour, (_, nodes) in SIZES.items()}}


def universe_runs(scale: str) -> tuple[Run, ...]:
    return tuple(Run(UNIVERSES, (f"workload.flavour={flavour}", f"workload.population={SIZES[flavour][0]}",
                                 f"workload.seeds={k}", f"nodes.count={SIZES[flavour][1][k]}"))
                 for flavour, ks in UNIVERSE_SEEDS[scale].items() for k in ks)


UNIVERSE_RUNS = {scale: universe_runs(scale) for scale in UNIVERSE_SEEDS}


def by_flavour(summaries: list[dict]) -> dict[str, list[dict]]:
    """The universe runs' summaries, per flavour, smallest universe first."""
    n = len(summaries) // 2
    return {"livejournal": summaries[:n], "wikipedia": summaries[n:]}


def share_improved(summaries: list[dict]) -> list[float]:
    """In the largest universe of each flavour: the share of nodes whose final PVS is below their initial."""
    return [statistics.fmean(p["fpvs"] < p["ipvs"] for p in runs[-1]["protocol_metrics"]["per_node"])
            for runs in by_flavour(summaries).values()]


def slope_ratio(summaries: list[dict]) -> list[float]:
    """Per flavour: how many times faster mean PVS grows with the universe's topics without StaN
    (initial) than with it (final), least-squares slopes over the universes."""
    out = []
    for runs in by_flavour(summaries).values():
        topics = [s["topics"] for s in runs]
        ipvs = np.polyfit(topics, [s["protocol_metrics"]["ipvs_mean"] for s in runs], 1)[0]
        fpvs = np.polyfit(topics, [s["protocol_metrics"]["fpvs_mean"] for s in runs], 1)[0]
        out.append(float(ipvs / fpvs))
    return out


CHECKS["S5"] = Check(UNIVERSE_RUNS, share_improved, Expect(">=", 0.5), OPTIONS, x=("𝓛 (largest)", "𝓦 (largest)"),
                     x_label="universe", note="share of the nodes that end with a smaller PVS than they started "
                                               "with, in the largest universe of each flavour run (paper: 𝓛8, 𝓦8)")
CHECKS["S8"] = Check(UNIVERSE_RUNS, slope_ratio, Expect("==", [2.0, 2.0], tol=0.3), OPTIONS, x=("𝓛", "𝓦"),
                     x_label="universes", note="initial PVS slope ÷ final PVS slope against the universe's topic count "
                                                "(quick: the smallest, a middle and the largest universe of each flavour)")


def improved_by(summaries: list[dict], fall: float = 0.4) -> list[float]:
    """In the largest universe of each flavour (𝓛, then 𝓦): the share of nodes whose PVS fell by
    more than ``fall`` (Fig. 7)."""
    return [statistics.fmean(p["fpvs"] < (1 - fall) * p["ipvs"] for p in runs[-1]["protocol_metrics"]["per_node"])
            for runs in by_flavour(summaries).values()]


LESS_CORRELATED = ("Wikipedia gains more than LiveJournal, as the paper says; the majority is not reached: StaN ends "
                   "within 2.5% of the omniscient PVS in these universes (docs/results/stan.md), so what bounds the "
                   "gain is the generated populations, whose subscriptions are less correlated than the paper's "
                   "real dumps (not available offline)")
CHECKS["S6"] = Check(UNIVERSE_RUNS, lambda s: [improved_by(s)[1], improved_by(s)],
                     Expect("all", [Expect(">=", 0.5), Expect("increasing")]), OPTIONS,
                     x=("𝓦 share", "𝓛 then 𝓦"), x_label="largest universe",
                     note="share of the nodes whose PVS fell by more than 40%, in the largest 𝓦 universe (the "
                          "paper: a majority), then 𝓛's and 𝓦's (the paper: 𝓦 more)",
                     explained=lambda ours: LESS_CORRELATED if ours[1][1] > ours[1][0] else "")
NOT_TESTABLE = {
    "S3": "needs a Splay/PlanetLab deployment to compare with", "S4": "needs a Splay/PlanetLab deployment",
    "S12": "a heat map read off a figure", "S13": "distribution shapes read off figures",
}


def claims() -> list[Claim]:
    return load("stan", CHECKS, NOT_TESTABLE)
