"""Ferretti's analytic model of interest-aware gossip on a configuration-model graph
(ferretti-gossip.md §6), evaluated on a degree distribution: the realised one of a run's graphs
(``topology`` in ``run.json``) or a nominal one (Poisson, power law).

- ``mean_receivers``: eq. 17, ⟨r⟩ = 1 + Γ⟨k⟩² / ((1+Γ)⟨k⟩ − Γ⟨k²⟩), source included; finite
  only below the threshold.
- ``critical``: Γc = ⟨k⟩ / (⟨k²⟩ − ⟨k⟩).
- ``subscribers_paper`` (σ⟨r⟩, biased low) and ``subscribers_corrected`` (σ + (σ/Γ)(⟨r⟩ − 1)).
- ``outbreak``: the above-threshold estimator of §6 item 11 (ours, not the paper's): the chance
  an event takes off and the share of subscribers and non-subscribers it then reaches.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class Degrees:
    """A degree distribution: ``p[k]`` = P(degree = k)."""

    p: np.ndarray

    @classmethod
    def from_histogram(cls, histogram: dict) -> Degrees:
        """From {degree: node count} (keys may be strings, as in ``run.json``)."""
        counts = {int(k): int(v) for k, v in histogram.items()}
        p = np.zeros(max(counts) + 1)
        for k, c in counts.items():
            p[k] = c
        return cls(p / p.sum())

    @classmethod
    def poisson(cls, lam: float, k_max: int | None = None) -> Degrees:
        k_max = k_max or int(lam + 20 * math.sqrt(lam) + 20)
        k = np.arange(k_max + 1)
        logp = k * math.log(lam) - lam - np.array([math.lgamma(x + 1) for x in k])
        p = np.exp(logp)
        return cls(p / p.sum())

    @classmethod
    def power_law(cls, exponent: float, k_min: int = 1, k_max: int = 1_000_000) -> Degrees:
        """p_k ∝ k^-exponent on [k_min, k_max] (the spec's Fig. 2 law: 3.3, k_min 1)."""
        k = np.arange(k_max + 1, dtype=float)
        p = np.zeros(k_max + 1)
        p[k_min:] = k[k_min:] ** -exponent
        return cls(p / p.sum())

    @property
    def k1(self) -> float:
        return float(np.dot(np.arange(len(self.p)), self.p))

    @property
    def k2(self) -> float:
        k = np.arange(len(self.p), dtype=float)
        return float(np.dot(k * k, self.p))

    @cached_property
    def q(self) -> np.ndarray:
        """Excess-degree distribution: q_k = (k+1) p_{k+1} / ⟨k⟩."""
        return np.arange(1, len(self.p)) * self.p[1:] / self.k1

    def g0(self, x: float) -> float:
        return float(np.polynomial.polynomial.polyval(x, self.p))

    def g1(self, x: float) -> float:
        """The excess-degree generating function (of ``q``)."""
        return float(np.polynomial.polynomial.polyval(x, self.q))


def link_probability(sigma: float, gamma: float) -> float:
    """Γ = σ + (1 − σ)γ: the chance a link carries the event."""
    return sigma + (1 - sigma) * gamma


def critical(d: Degrees) -> float:
    """Γc = ⟨k⟩ / (⟨k²⟩ − ⟨k⟩) (inf when no giant outbreak can happen)."""
    excess = d.k2 - d.k1
    return d.k1 / excess if excess > 0 else math.inf


def mean_receivers(d: Degrees, big_gamma: float) -> float:
    """Eq. 17 (source, relays and subscribers); inf at or above Γc."""
    k1, k2 = d.k1, d.k2
    denominator = (1 + big_gamma) * k1 - big_gamma * k2
    return 1 + big_gamma * k1 * k1 / denominator if denominator > 0 else math.inf


def subscribers_paper(sigma: float, receivers: float) -> float:
    """⟨s⟩ = σ⟨r⟩, the paper's (biased low, §10 item 1)."""
    return sigma * receivers


def subscribers_corrected(sigma: float, big_gamma: float, receivers: float) -> float:
    """⟨s⟩corr = σ + (σ/Γ)(⟨r⟩ − 1): a node reached over a link subscribes with probability σ/Γ."""
    return sigma + (sigma / big_gamma) * (receivers - 1) if big_gamma > 0 else sigma


def _smallest_root(f, tol: float = 1e-13, limit: int = 1_000_000) -> float:
    """The smallest fixed point in [0, 1] of an increasing f (iteration from 0 climbs to it)."""
    x = 0.0
    for _ in range(limit):
        y = f(x)
        if abs(y - x) < tol:
            return y
        x = y
    return x


@dataclass(frozen=True)
class Outbreak:
    p_big: float
    """Probability that an event from a random source takes off."""
    s_sub: float
    """Share of subscribers reached by an event that takes off."""
    s_non: float
    """Share of non-subscribers reached by an event that takes off."""
    sigma: float

    @property
    def fraction(self) -> float:
        """Expected receivers / N (small outbreaks add O(1) receivers, left out)."""
        return self.p_big * (self.sigma * self.s_sub + (1 - self.sigma) * self.s_non)

    @property
    def hit_ratio(self) -> float:
        return self.p_big * self.s_sub


def outbreak(d: Degrees, sigma: float, gamma: float) -> Outbreak:
    """§6 item 11: u = 1 − Γ + Γ·G1(u), P_big = 1 − G0(u); v = σ·G1(v) + (1 − σ)·G1(1 − γ(1 − v)),
    S_sub = 1 − G0(v), S_non = 1 − G0(1 − γ(1 − v))."""
    big = link_probability(sigma, gamma)
    u = _smallest_root(lambda x: 1 - big + big * d.g1(x))
    v = _smallest_root(lambda x: sigma * d.g1(x) + (1 - sigma) * d.g1(1 - gamma * (1 - x)))
    return Outbreak(1 - d.g0(u), 1 - d.g0(v), 1 - d.g0(1 - gamma * (1 - v)), sigma)


NEAR_THRESHOLD = 0.85
"""Γ/Γc above which finite-size depletion is expected to pull a simulation below eq. 17
(ferretti-gossip.md §10 item 4)."""


def predict(d: Degrees, sigma: float, gamma: float, nodes: int) -> dict:
    """What the model says of one setting: Γ, Γc, and the expected receivers — eq. 17 below the
    threshold, N x the outbreak estimator above it (``regime`` says which)."""
    big, crit = link_probability(sigma, gamma), critical(d)
    below = big < crit
    r = mean_receivers(d, big) if below else math.inf
    est = outbreak(d, sigma, gamma)
    return {
        "sigma": sigma, "gamma": gamma, "Gamma": big, "Gamma_c": crit, "Gamma_over_Gamma_c": big / crit,
        "regime": "below" if below else "above",
        "receivers": r if below else nodes * est.fraction,
        "eq17_receivers": r if below else None,
        "subscribers_paper": subscribers_paper(sigma, r) if below else None,
        "subscribers_corrected": subscribers_corrected(sigma, big, r) if below else None,
        "outbreak_fraction": est.fraction, "outbreak_hit_ratio": est.hit_ratio, "outbreak_p_big": est.p_big,
    }


def average(predictions: list[dict]) -> dict:
    """Several settings' predictions (networks, topics, events) as one: the means of Γ, Γc,
    Γ/Γc and receivers (``receivers``), the regime (``mixed`` if they differ) and the subscriber
    estimates of those below the threshold."""
    regimes = {p["regime"] for p in predictions}
    out = {
        "regime": regimes.pop() if len(regimes) == 1 else "mixed",
        "receivers": statistics.fmean(p["receivers"] for p in predictions),
        "Gamma": statistics.fmean(p["Gamma"] for p in predictions),
        "Gamma_c": statistics.fmean(p["Gamma_c"] for p in predictions),
        "Gamma_over_Gamma_c": statistics.fmean(p["Gamma_over_Gamma_c"] for p in predictions),
    }
    below = [p for p in predictions if p["regime"] == "below"]
    if below:
        out["subscribers_corrected"] = statistics.fmean(p["subscribers_corrected"] for p in below)
        out["subscribers_paper"] = statistics.fmean(p["subscribers_paper"] for p in below)
    return out


def near_threshold(prediction: dict) -> bool:
    """Below Γc but close enough that a finite network falls short of eq. 17."""
    return prediction["regime"] == "below" and prediction["Gamma_over_Gamma_c"] > NEAR_THRESHOLD
