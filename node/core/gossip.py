"""Interest-aware gossip over the CYCLON view: the baseline dissemination protocol.

Theory of operation (spec: ../shared/design/protocols/ferretti-gossip.md §1, Alg. 2, run over
a CYCLON overlay instead of a static graph)

A node that publishes an event, or receives its first copy, sends it to every CYCLON neighbour
whose profile subscribes to the event's topic, and to each other neighbour independently with
probability ``gamma``; never back to the node it came from. Every receiver relays, subscribed
or not. ``gamma = 1`` floods the overlay. Copies of an event already seen are delivered as
duplicates (counted, never forwarded). Neighbours' subscriptions come from the profiles that
CYCLON entries carry, so they can lag a subscription change by a few cycles.

Choices not in the paper, as named parameters: ``ttl`` (the paper assumes no TTL; 255 is
effectively none), ``seen_capacity`` (how many event ids the duplicate filter remembers, LRU).

Invariants: the CYCLON invariants, and the duplicate filter never exceeds ``seen_capacity``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from .cyclon import LAYER as CYCLON
from .cyclon import Cyclon, CyclonConfig
from .registry import ProtocolSpec, register_protocol
from .stack import Dissemination, Stack
from .types import Descriptor, EventMsg, NodeId


@dataclass
class GossipConfig:
    gamma: float = 1.0
    """γ: probability of forwarding to each neighbour not subscribed to the topic (1 floods)."""
    ttl: int = 255
    """Largest hop count an event is forwarded to (choice, not in paper: 255 = no TTL)."""
    seen_capacity: int = 100_000
    """Event ids remembered for duplicate suppression, LRU (choice, not in paper)."""
    cyclon: CyclonConfig = field(default_factory=CyclonConfig)
    """The CYCLON peer-sampling layer the gossip runs over."""

    __pydantic_config__ = {"extra": "forbid"}

    def __post_init__(self) -> None:
        check_gossip_params(self.gamma, self.ttl, self.seen_capacity)


def check_gossip_params(gamma: float, ttl: int, seen_capacity: int) -> None:
    """The bounds of the parameters every interest-aware gossip config has."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError("gamma must be in [0, 1]")
    if ttl < 1 or seen_capacity < 1:
        raise ValueError("ttl and seen_capacity must be at least 1")


class InterestGossip(Dissemination):
    """Forward to interested neighbours of ``layer``, to the others with probability γ."""

    name = "interest_gossip"
    params = frozenset({"gamma", "ttl"})

    def __init__(self, layer: str) -> None:
        self.layer = layer

    def relays(self, event: EventMsg) -> bool:
        ttl: int = self.stack.config.ttl
        return event.hops < ttl

    def targets(self, event: EventMsg, sender: NodeId | None) -> list[Descriptor]:
        stack, topic = self.stack, event.topic
        gamma, rng = stack.config.gamma, stack.rng
        return [
            d for d in stack.view(self.layer).values()
            if d.node_id != sender and (topic in d.topics or gamma >= 1.0 or rng.random() < gamma)
        ]


def build(me: Descriptor, config: GossipConfig, rng: random.Random, shared: dict[str, Any]) -> Stack:
    return Stack(me, config, rng, [Cyclon(config.cyclon)], InterestGossip(CYCLON),
                 seen_capacity=config.seen_capacity)


register_protocol(ProtocolSpec(
    "gossip", GossipConfig, build,
    cycle_s=lambda c: c.cyclon.cycle_ms / 1000.0,
    reply_timeout_s=lambda c: c.cyclon.timeout_ms / 1000.0,
    dissemination_params=InterestGossip.params,
))
