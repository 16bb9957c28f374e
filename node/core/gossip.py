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
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from .base import Protocol, register_protocol
from .cyclon import LAYER as CYCLON, Cyclon, CyclonConfig
from .types import (
    Action, Deliver, Descriptor, EventMsg, Gossip, LayerSnapshot, LocalProtocolError, Message,
    NodeId, NodeSnapshot, Published, RemoteProtocolError, Send, SetTimer, Topic,
)


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
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError("gamma must be in [0, 1]")
        if self.ttl < 1 or self.seen_capacity < 1:
            raise ValueError("ttl and seen_capacity must be at least 1")


class InterestGossip(Protocol):
    DISSEMINATION_PARAMS = frozenset({"gamma", "ttl"})

    def __init__(self, me: Descriptor, config: GossipConfig, rng: random.Random) -> None:
        super().__init__(me, config, rng)
        self.cyclon = Cyclon(me, config.cyclon, rng)
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.published = 0

    def start(self, now: float, contacts: Sequence[Descriptor]) -> list[Action]:
        self.active = True
        self.cyclon.bootstrap(list(contacts))
        return [SetTimer(CYCLON, self.cyclon.first_tick(now))]

    def on_timer(self, name: str, now: float) -> list[Action]:
        if name != CYCLON:
            raise LocalProtocolError(f"unknown timer {name!r}")
        if not self.active:
            return []
        self.cyclon.me = self.me
        return [*self.cyclon.tick(now), SetTimer(CYCLON, now + self.cyclon.period)]

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        if not self.active:
            return []
        if isinstance(msg, Gossip):
            if msg.layer != CYCLON:
                raise RemoteProtocolError(f"gossip for unknown layer {msg.layer!r}")
            self.cyclon.me = self.me
            return list(self.cyclon.on_gossip(src, msg, now))
        first = msg.event_id not in self.seen
        actions: list[Action] = [Deliver(msg, src, first, msg.topic in self.me.topics)]
        if first:
            self._remember(msg.event_id)
            if msg.hops < self.config.ttl:
                actions += self._forward(msg, exclude=src)
        return actions

    def publish(self, topic: Topic, payload: bytes, now: float) -> list[Action]:
        if not self.active:
            raise LocalProtocolError("publish on a node that has left")
        self.published += 1
        event = EventMsg(f"{self.node_id}-{self.published}", topic, payload, self.node_id, 0)
        self._remember(event.event_id)
        return [Published(event), *self._forward(event, exclude=None)]

    def _forward(self, event: EventMsg, exclude: NodeId | None) -> list[Action]:
        copy = EventMsg(event.event_id, event.topic, event.payload, event.publisher, event.hops + 1)
        gamma = self.config.gamma
        return [
            Send(d.node_id, d.addr, copy)
            for d in self.cyclon.view.values()
            if d.node_id != exclude
            and (event.topic in d.topics or gamma >= 1.0 or self.rng.random() < gamma)
        ]

    def _remember(self, event_id: str) -> None:
        self.seen[event_id] = None
        if len(self.seen) > self.config.seen_capacity:
            self.seen.popitem(last=False)

    def snapshot(self) -> NodeSnapshot:
        return NodeSnapshot(
            self.node_id, sorted(self.me.topics), [LayerSnapshot(CYCLON, list(self.cyclon.view))]
        )

    def validate(self) -> None:
        self.cyclon.validate()
        if len(self.seen) > self.config.seen_capacity:
            raise LocalProtocolError("duplicate filter over capacity")


register_protocol("gossip", InterestGossip, GossipConfig)
