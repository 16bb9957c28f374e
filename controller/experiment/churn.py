"""The churn plan: who is online when. Pure functions of (experiment, seed).

A plan is the set of nodes offline at the start plus a time-ordered list of ``join``, ``leave``
(graceful) and ``crash`` events in run time (seconds from the start of the run; the warm-up
ends at ``phases.warmup_s``). Every backend carries out the same list; the run's timeline
records what was done, and the analysis takes expected receivers from the timeline.

Models: ``none``; ``sessions`` (a ``fraction`` of the nodes alternate between sessions and
downtimes drawn from exponential, Weibull, Pareto or constant lengths; with
``arrival_rate_per_s`` they start offline and arrive as a Poisson process); ``trace`` (replay
of a file). Flash crowds, sharp drops and crash series (one uniformly chosen live node per
draw, the DPS paper's failure model) are phases on top.

Trace formats:

- ``plain``: one session per line, ``node join_s leave_s`` (``leave_s`` may be ``inf`` or
  ``-`` for never); ``#`` comments. Node labels map to 0..N-1 in order of first appearance.
  Nodes the trace never mentions stay offline (the PolderCast E5 mapping).
- ``peersim``: the STUNner smartphone trace format (``user firstOnline startDate_ms tz d1 d2
  ...``, alternating online/offline durations in ms; several lines per user). ``align:
  per_user`` starts every user's sessions at time 0 (users were measured in different weeks).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from controller.experiment.datafiles import PlanError, data_lines
from controller.experiment.dynamics import Churn, Crashes, FlashCrowd, Lengths, SharpDrop
from controller.experiment.schema import Experiment


@dataclass(frozen=True, order=True, slots=True)
class ChurnEvent:
    at_s: float
    node: int
    kind: str  # join | leave | crash


@dataclass
class ChurnPlan:
    offline_at_start: set[int]
    events: list[ChurnEvent]

    def alive_at(self, t: float, n: int) -> set[int]:
        return next(self.alive_at_each([t], n))

    def alive_at_each(self, times: Iterable[float], n: int) -> Iterator[set[int]]:
        """The nodes alive at each of ``times``, in order: one pass over the events while the
        times do not decrease (each set is the same object, updated: use it before the next)."""
        alive, k, last = set(range(n)) - self.offline_at_start, 0, -math.inf
        for t in times:
            if t < last:
                alive, k = set(range(n)) - self.offline_at_start, 0
            last = t
            while k < len(self.events) and self.events[k].at_s <= t:
                e = self.events[k]
                (alive.add if e.kind == "join" else alive.discard)(e.node)
                k += 1
            yield alive

    @property
    def churning(self) -> set[int]:
        return self.offline_at_start | {e.node for e in self.events}


def draw_length(d: Lengths, rng: random.Random) -> float:
    if d.distribution == "constant":
        return d.mean_s
    if d.distribution == "exponential":
        return rng.expovariate(1 / d.mean_s)
    if d.distribution == "weibull":
        scale = d.mean_s / math.gamma(1 + 1 / d.shape)
        return rng.weibullvariate(scale, d.shape)
    xm = d.mean_s * (d.shape - 1) / d.shape
    return xm * rng.paretovariate(d.shape)


def render(exp: Experiment, end_s: float) -> ChurnPlan:
    c = exp.churn
    n = exp.nodes.count
    rng = random.Random(f"{exp.seed}:churn")
    down = "crash" if c.leave == "crash" else "leave"
    warm = exp.phases.warmup_s
    if c.model == "none":
        plan = ChurnPlan(set(), [])
    elif c.model == "sessions":
        plan = _sessions(c, n, warm + c.start_s, end_s, down, rng)
    else:
        plan = _trace(c, n, warm, end_s, down)
    for phase in c.phases:
        _apply_phase(plan, phase, n, warm, down, rng)
    plan.events.sort()
    return plan


def _sessions(c: Churn, n: int, start: float, end: float, down: str, rng: random.Random) -> ChurnPlan:
    churners = sorted(rng.sample(range(n), round(c.fraction * n)))
    offline, events = set(), []
    arrival = start
    for node in churners:
        if c.arrival_rate_per_s > 0:
            offline.add(node)
            arrival += rng.expovariate(c.arrival_rate_per_s)
            t, up = arrival, False
        else:
            t, up = start + draw_length(c.session, rng), True
        while t < end:
            events.append(ChurnEvent(t, node, down if up else "join"))
            up = not up
            t += draw_length(c.session if up else c.downtime, rng)
    return ChurnPlan(offline, events)


def _trace(c: Churn, n: int, warm: float, end: float, down: str) -> ChurnPlan:
    sessions = read_peersim(c.path, c.align == "per_user") if c.format == "peersim" else read_plain(c.path)
    labels = list(sessions)
    if len(labels) > n:
        labels = labels[:n]
    events = []
    for node, label in enumerate(labels):
        for join, leave in sessions[label]:
            join = join / c.time_scale - c.offset_s
            leave = leave / c.time_scale - c.offset_s
            if leave <= 0 or join >= end:
                continue
            events.append(ChurnEvent(max(0.0, join), node, "join"))
            if leave < end:
                events.append(ChurnEvent(leave, node, down))
    return ChurnPlan(set(range(n)), events)


def read_plain(path: str) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for lineno, parts in _lines(path):
        if len(parts) != 3:
            raise PlanError(f"churn.path: {path}:{lineno}: expected 'node join_s leave_s' ({len(parts)} fields)")
        try:
            join = float(parts[1])
            leave = math.inf if parts[2] in ("-", "inf") else float(parts[2])
        except ValueError:
            raise PlanError(f"{path}:{lineno}: join and leave must be numbers (seconds)") from None
        if join < 0 or leave < join:
            raise PlanError(f"{path}:{lineno}: need 0 <= join_s <= leave_s")
        out.setdefault(parts[0], []).append((join, leave))
    return out


def read_peersim(path: str, per_user: bool = False) -> dict[str, list[tuple[float, float]]]:
    """Sessions in seconds from the trace's first record (or, ``per_user``, from each user's
    own first record, which stacks users measured in different weeks on one time axis)."""
    out: dict[str, list[tuple[float, float]]] = {}
    t0 = None
    first: dict[str, int] = {}
    for lineno, parts in _lines(path):
        try:
            user, first_online, start_ms = parts[0], int(parts[1]), int(parts[2])
            durations = [int(x) for x in parts[4:]]
        except (IndexError, ValueError):
            raise PlanError(f"{path}:{lineno}: expected 'user firstOnline startDate_ms tz d1 d2 ...'") from None
        t0 = start_ms if t0 is None else min(t0, start_ms)
        first[user] = min(first.get(user, start_ms), start_ms)
        t, online = start_ms, first_online == 1
        for d in durations:
            if online:
                out.setdefault(user, []).append((t, t + d))
            t += d
            online = not online
    base = (lambda u: first[u]) if per_user else (lambda u: t0)
    return {u: [((a - base(u)) / 1000, (b - base(u)) / 1000) for a, b in _merge(sorted(s))] for u, s in out.items()}


def _merge(sessions: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sessions:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _lines(path: str):
    for lineno, line in data_lines(path):
        yield lineno, line.split()


def _apply_phase(plan: ChurnPlan, phase, n: int, warm: float, down: str, rng: random.Random) -> None:
    at = warm + phase.at_s
    if isinstance(phase, FlashCrowd):
        stable = sorted(set(range(n)) - plan.churning)
        if phase.nodes > len(stable):
            raise PlanError(f"churn.phases: a flash crowd of {phase.nodes} nodes, but only {len(stable)} are not churning")
        for node in rng.sample(stable, phase.nodes):
            plan.offline_at_start.add(node)
            plan.events.append(ChurnEvent(at + rng.uniform(0, phase.over_s), node, "join"))
        return
    if isinstance(phase, Crashes):
        plan.events.sort()
        spare, crashed = set(phase.spare), []
        draws = math.ceil((phase.until_s - phase.at_s) / phase.every_s - 1e-9)
        for k in range(draws):
            t = at + k * phase.every_s
            if rng.random() < phase.probability:
                alive = sorted(plan.alive_at(t, n) - spare - set(crashed))
                if alive:
                    crashed.append(rng.choice(alive))
                    plan.events.append(ChurnEvent(t, crashed[-1], down))
        return
    assert isinstance(phase, SharpDrop)
    plan.events.sort()
    alive = sorted(plan.alive_at(at, n))
    victims = set(rng.sample(alive, round(phase.fraction * len(alive))))
    # The victims' own later churn is replaced by the drop (and the return, if any).
    plan.events = [e for e in plan.events if not (e.node in victims and e.at_s >= at)]
    for node in sorted(victims):
        plan.events.append(ChurnEvent(at, node, down))
        if phase.return_after_s is not None:
            plan.events.append(ChurnEvent(at + phase.return_after_s, node, "join"))
