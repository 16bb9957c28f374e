"""Ferretti and D'Angelo's claims (design spec ferretti-gossip.md §7): simulated reach against
the analytic model (eq. 17) on Poisson graphs at several N, and reach on the ACL scale-free
graph of §V-B2."""

from __future__ import annotations

from controller.reproduce.claims import Check, Claim, Expect, Run, load

POISSON = "experiments/gossip-poisson.yaml"
ACL = "experiments/gossip-scalefree.yaml"
BELOW = ("protocol.params.gamma=0.1", "workload.sigma=0.05")  # Γ = 0.7 Γc: below the transition
N = {"quick": (1000, 10000), "paper": (1000, 10000, 100000)}
F3_RUNS = {"quick": tuple(Run(POISSON, (*BELOW, f"nodes.count={n}", "sim.networks=4", "publications.count=100"))
                          for n in N["quick"]),
           "paper": tuple(Run(POISSON, (*BELOW, f"nodes.count={n}", "sim.networks=20", "publications.count=400"))
                          for n in N["paper"])}
F7_RUNS = {"quick": (Run(ACL, ("sim.networks=1", "publications.count=100")),),
           "paper": (Run(ACL, ("sim.networks=20", "publications.count=400")),)}

ABOVE = "experiments/gossip-poisson-above.yaml"
SIGMAS, GAMMAS = (0.15, 0.2, 0.3, 0.4, 0.5, 0.6), (0.15, 0.2, 0.3, 0.4, 0.5, 0.6)
ABOVE_SCALE = {"quick": ("nodes.count=2000", "sim.networks=2", "publications.count=50"),
               "paper": ("nodes.count=10000", "sim.networks=20", "publications.count=400")}


def above_runs(points: list[tuple[float, float]]) -> dict[str, tuple[Run, ...]]:
    """Poisson λ = 5 above the transition, one run per (γ, σ)."""
    return {scale: tuple(Run(ABOVE, (*sets, f"protocol.params.gamma={g}", f"workload.sigma={s}")) for g, s in points)
            for scale, sets in ABOVE_SCALE.items()}


def reach_share(summaries: list[dict]) -> list[float]:
    """Mean receivers over the nodes of a network, per run."""
    return [s["protocol_metrics"]["receivers_fraction"] for s in summaries]


SPREAD_ONLY = ("7-9% of the events never spread beyond their publisher's neighbourhood and pull the plain mean "
               "below 2,200; over the events that spread the claim holds (about 2,295 here and in an independent "
               "implementation, a review's finding)")
CHECKS = {
    "F4": Check(above_runs([(0.1, s) for s in SIGMAS]), reach_share, Expect("increasing"), {"gamma": 0.1, "mean_degree": 5},
                x=SIGMAS, x_label="σ", note="mean share of the nodes an event reaches, per σ (γ = 0.1)"),
    "F5": Check(above_runs([(g, 0.1) for g in GAMMAS]), reach_share, Expect("increasing"), {"sigma": 0.1, "mean_degree": 5},
                x=GAMMAS, x_label="γ", note="mean share of the nodes an event reaches, per γ (σ = 0.1)"),
    "F3": Check(F3_RUNS, lambda s: [x["protocol_metrics"]["model"]["sim_over_model"] for x in s],
                {scale: Expect("==", [1.0] * len(n), tol=0.15) for scale, n in N.items()},
                {"gamma": 0.1, "sigma": 0.05, "mean_degree": 5}, x=N, x_label="N",
                note="simulated mean receivers ÷ eq. 17, per N (quick: 4 networks × 100 events each)"),
    "F7": Check(F7_RUNS, lambda s: [s[0]["protocol_metrics"]["receivers_mean"], s[0]["protocol_metrics"]["receivers_mean_spreading"]],
                Expect("all", [Expect(">=", 2200), Expect(">=", 2200)]),
                {"gamma": 0.6, "sigma": 0.1, "graph": "ACL a = 6, b = 1, N = 2,482"},
                x=("all events", "events that spread"), x_label="mean receivers",
                note="mean receivers over all events, then over the events that spread (reach more than a tenth "
                     "of the network; summary.json events_spreading_share says how many)",
                explained=lambda ours: SPREAD_ONLY if ours[1] is not None and ours[1] >= 2200 else ""),
}
NOT_TESTABLE = {
    "F1": "the analytic curves themselves (overlaylab model draws them)", "F2": "the analytic curves themselves",
    "F6": "degree histograms read off a figure", "F9": "a statement about the protocol, not measured in the paper",
}


def claims() -> list[Claim]:
    return load("ferretti", CHECKS, NOT_TESTABLE)
