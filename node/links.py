"""Link emulation rules shared by the simulator and the gRPC shell.

A rule applies to messages sent to the nodes it lists (all nodes when the list is empty); the
last matching rule wins. One-way delay is ``delay_ms`` plus jitter drawn uniformly from
[-jitter_ms, +jitter_ms] (clipped at 0); each message is lost with probability ``loss``;
``partitioned`` drops everything. The sender applies the rule at send time, so this works on any
kernel (no netem) and on any backend.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LinkRule:
    nodes: frozenset[int] = frozenset()
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0
    partitioned: bool = False

    def matches(self, dst: int) -> bool:
        return not self.nodes or dst in self.nodes


class LinkModel:
    def __init__(self, rules: list[LinkRule], rng: random.Random) -> None:
        self.rules = list(rules)
        self.rng = rng

    def sample(self, dst: int) -> float | None:
        """The one-way delay in seconds of a message to ``dst``, or None when it is dropped."""
        for rule in reversed(self.rules):
            if not rule.nodes or dst in rule.nodes:
                break
        else:
            return 0.0
        if rule.partitioned or (rule.loss > 0.0 and self.rng.random() < rule.loss):
            return None
        jitter = self.rng.uniform(-rule.jitter_ms, rule.jitter_ms) if rule.jitter_ms else 0.0
        return max(0.0, rule.delay_ms + jitter) / 1000.0
