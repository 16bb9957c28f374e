"""The network plan: per-link one-way delays, jitter, loss, bandwidth and partitions over time.

Pure functions of (experiment, seed). ``base_delay(src, dst)`` is deterministic per link: the
distribution model draws each link's delay once, from a hash of (seed, src, dst), so the
simulator and every local peer agree on it without sharing state.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from controller.experiment.datafiles import PlanError, data_lines
from controller.experiment.dynamics import ConstantDelay, DistributionDelay, GeoDelay, MatrixDelay
from controller.experiment.schema import Experiment
from node.kit.links import LinkRule


@dataclass(frozen=True)
class PartitionWindow:
    start_s: float
    """Run time (seconds from the start of the run)."""
    end_s: float
    nodes: frozenset[int]


class NetworkPlan:
    def __init__(self, exp: Experiment, n: int | None = None) -> None:
        """``n``: the nodes of the run (default ``nodes.count``; more with ``sim.networks``)."""
        self.seed = exp.seed
        net = exp.network
        self.model = net.delay
        self.rule = LinkRule(jitter_ms=net.jitter_ms, loss=net.loss)
        self.bandwidth_kbps = net.bandwidth_kbps
        n = exp.nodes.count if n is None else n
        rng = random.Random(f"{exp.seed}:network")
        self._cache: dict[tuple[int, int], float] = {}
        if isinstance(self.model, GeoDelay):
            self.positions = np.array([(rng.random(), rng.random()) for _ in range(n)])
        if isinstance(self.model, MatrixDelay):
            self.matrix = read_matrix(self.model.path)
            hosts = len(self.matrix)
            self.host = rng.sample(range(hosts), n) if n <= hosts else [rng.randrange(hosts) for _ in range(n)]
        self.partitions = []
        for k, p in enumerate(net.partitions):
            if p.nodes is not None:
                bad = [v for v in p.nodes if not 0 <= v < n]
                if bad:
                    raise PlanError(f"network.partitions.{k}.nodes: {bad} not in 0..{n - 1}")
                cut = frozenset(p.nodes)
            else:
                cut = frozenset(random.Random(f"{exp.seed}:partition:{k}").sample(range(n), max(1, round(p.fraction * n))))
            w = exp.phases.warmup_s
            self.partitions.append(PartitionWindow(w + p.start_s, w + p.end_s, cut))

    @property
    def emulated(self) -> bool:
        return not (isinstance(self.model, ConstantDelay) and self.model.ms == 0 and self.rule == LinkRule()
                    and not self.bandwidth_kbps and not self.partitions)

    def base_delay(self, src: int, dst: int) -> float:
        """The planned one-way delay of link src -> dst in ms (before jitter)."""
        m = self.model
        if isinstance(m, ConstantDelay):
            return m.ms
        if isinstance(m, GeoDelay):
            return m.base_ms + m.ms_per_unit * float(np.hypot(*(self.positions[src] - self.positions[dst])))
        if isinstance(m, MatrixDelay):
            return float(self.matrix[self.host[src], self.host[dst]]) * m.scale
        key = (src, dst)
        ms = self._cache.get(key)
        if ms is None:
            ms = self._cache[key] = draw(m, _link_uniform(self.seed, src, dst))
        return ms

    def row(self, src: int, n: int) -> list[float]:
        return [self.base_delay(src, dst) for dst in range(n)]


def _link_uniform(seed: int, src: int, dst: int) -> float:
    h = hashlib.blake2b(f"{seed}:{src}:{dst}".encode(), digest_size=8).digest()
    return (int.from_bytes(h, "big") + 0.5) / 2**64


def draw(m: DistributionDelay, u: float) -> float:
    """Inverse CDF of the per-link delay distribution at u in (0, 1)."""
    mean, std = m.mean_ms, m.std_ms
    if m.distribution == "uniform":
        half = std * math.sqrt(3)
        return max(0.0, mean - half + 2 * half * u)
    if m.distribution == "normal":
        return max(0.0, NormalDist(mean, std).inv_cdf(u)) if std else mean
    if m.distribution == "lognormal":
        sigma2 = math.log(1 + (std / mean) ** 2)
        return math.exp(NormalDist(math.log(mean) - sigma2 / 2, math.sqrt(sigma2)).inv_cdf(u))
    if m.distribution == "exponential":
        return -mean * math.log(1 - u)
    xm = mean * (m.shape - 1) / m.shape  # pareto with this mean
    return xm * (1 - u) ** (-1 / m.shape)


def read_matrix(path: str) -> np.ndarray:
    """A square matrix of non-negative delays, one row per line (King / PlanetLab format)."""
    rows = []
    for lineno, line in data_lines(path):
        try:
            rows.append([float(x) for x in line.split()])
        except ValueError:
            raise PlanError(f"{path}:{lineno}: not a row of numbers") from None
    size = len(rows)
    for k, r in enumerate(rows):
        if len(r) != size:
            raise PlanError(f"{path}: row {k + 1} has {len(r)} values; a {size}x{size} matrix needs {size}")
    m = np.array(rows)
    if size == 0 or (m < 0).any() or not np.isfinite(m).all():
        raise PlanError(f"{path}: the matrix is empty or has negative or missing values")
    return m


def link_model_for_sim(plan: NetworkPlan, seed: int):
    from node.kit.links import FixedDelay, LinkModel

    if isinstance(plan.model, ConstantDelay):
        base = FixedDelay(plan.model.ms) if plan.model.ms else None
    else:
        base = plan.base_delay
    return LinkModel([plan.rule], random.Random(f"{seed}:links"), base=base, bandwidth_kbps=plan.bandwidth_kbps)
