"""Link emulation shared by the simulator and the gRPC shell.

The sender applies it at send time, so it works on any kernel (no netem) and on any backend.
A message from ``src`` to ``dst`` of ``size`` bytes sent at ``now``:

- is dropped if ``src`` and ``dst`` are on different sides of an active partition (a node set
  cut off from the rest), or if the last rule matching ``dst`` says ``partitioned``, or with the
  rule's ``loss`` probability;
- otherwise takes ``base(src, dst)`` (the network plan's per-link one-way delay) + the rule's
  ``delay_ms`` + jitter uniform in [-jitter_ms, +jitter_ms] (clipped at 0), plus, with a
  bandwidth, the time to serialise it behind the sender's earlier messages
  (``size * 8 / bandwidth_kbps`` ms each, first come first served).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

MAX_DELAY_MS = 3_600_000.0
"""Longest delay, jitter or base delay a link may be given (an hour), wherever it is set: the
experiment file, a Control call (``SetLinkRules``), a dynamics scenario."""
BANDWIDTH_KBPS = (1.0, 1e9)
"""A link's bandwidth, when it has one: from 1 kbps to 1 Tbps."""


@dataclass(frozen=True, slots=True)
class LinkRule:
    nodes: frozenset[int] = frozenset()
    """Destinations the rule applies to (empty: all)."""
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0
    partitioned: bool = False

    def matches(self, dst: int) -> bool:
        return not self.nodes or dst in self.nodes


NO_RULE = LinkRule()


@dataclass(frozen=True, slots=True)
class FixedDelay:
    """A base delay that is the same on every link (a ``LinkModel``'s ``base``)."""

    ms: float

    def __call__(self, src: int, dst: int) -> float:
        return self.ms


class LinkModel:
    def __init__(self, rules: list[LinkRule], rng: random.Random,
                 base: Callable[[int, int], float] | None = None,
                 bandwidth_kbps: float | None = None) -> None:
        self.rules = list(rules)
        self.rng = rng
        self.base = base
        self.bandwidth_kbps = bandwidth_kbps
        self.partitions: list[frozenset[int]] = []
        self._busy_until: dict[int, float] = {}

    def rule_for(self, dst: int) -> LinkRule:
        for rule in reversed(self.rules):
            if rule.matches(dst):
                return rule
        return NO_RULE

    def sample(self, src: int, dst: int, size: int = 0, now: float = 0.0) -> float | None:
        """Seconds until the message arrives, or None when it is lost."""
        for cut in self.partitions:
            if (src in cut) != (dst in cut):
                return None
        rule = self.rule_for(dst)
        if rule.partitioned or (rule.loss > 0.0 and self.rng.random() < rule.loss):
            return None
        ms = rule.delay_ms + (self.base(src, dst) if self.base is not None else 0.0)
        if rule.jitter_ms:
            ms += self.rng.uniform(-rule.jitter_ms, rule.jitter_ms)
        delay = max(0.0, ms) / 1000.0
        if self.bandwidth_kbps and size:
            start = max(now, self._busy_until.get(src, 0.0))
            done = start + size * 8 / (self.bandwidth_kbps * 1000.0)
            self._busy_until[src] = done
            delay += done - now
        return delay


def latest_arrival_s(model: LinkModel, src: int, dst: int) -> float:
    """The longest a message sent now from ``src`` to ``dst`` can take under ``model``'s rules
    (delay + base + jitter, in seconds; serialisation behind a bandwidth aside): a message held
    under earlier rules is released no later than this when the rules change."""
    rule = model.rule_for(dst)
    return (rule.delay_ms + rule.jitter_ms + (model.base(src, dst) if model.base is not None else 0.0)) / 1000.0
