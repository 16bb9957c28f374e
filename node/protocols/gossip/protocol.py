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
effectively none), ``seen_capacity`` (how many event ids the duplicate filter remembers, LRU),
and the shuffle repair (``repair_window_ms``, ``repair_after_ms``, ``repair_ids``).

Shuffle repair (anti-entropy on the shuffles). The paper floods a static graph; here CYCLON
moves links while a flood runs. A shuffle can hand a node's last links from nodes that have not
relayed an event yet to nodes that already have, and the flood never reaches it; this happens
when floods are slow against the shuffle period (seconds on a loaded machine). So every CYCLON
message lists the events its sender relayed over the last ``repair_window_ms`` (the
``repair_ids`` most recent), and its receiver sends the sender those of its own list, relayed
at least ``repair_after_ms`` ago, that the sender's list lacks (by the same interest and γ rule).
A node the flood missed still shuffles with its own neighbours, so it gets the event within a
cycle or two of ``repair_after_ms``. ``repair_window_ms: 0`` turns the repair off.

Invariants: the CYCLON invariants, and the duplicate filter never exceeds ``seen_capacity``.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from node.kit.registry import ProtocolSpec, register_protocol
from node.kit.stack import Dissemination, Stack
from node.kit.types import Action, Descriptor, EventMsg, NodeId, Topic
from node.protocols.cyclon.layer import LAYER as CYCLON
from node.protocols.cyclon.layer import Cyclon, CyclonConfig


@dataclass
class GossipConfig:
    gamma: float = 1.0
    """γ: probability of forwarding to each neighbour not subscribed to the topic (1 floods)."""
    ttl: int = 255
    """Largest hop count an event is forwarded to (choice, not in paper: 255 = no TTL)."""
    seen_capacity: int = 100_000
    """Event ids remembered for duplicate suppression, LRU (choice, not in paper)."""
    repair_window_ms: float = 10_000.0
    """Shuffle repair: how long a relayed event stays in the digest (choice, not in paper;
    0 turns the repair off). Longer than a flood takes."""
    repair_after_ms: float = 3000.0
    """Shuffle repair: how long a node has relayed an event before it sends it to a partner that
    lacks it (choice, not in paper). Longer than most floods take, or partners still awaiting
    their flood copy get a second one."""
    repair_ids: int = 64
    """Shuffle repair: most event ids in one digest (choice, not in paper)."""
    cyclon: CyclonConfig = field(default_factory=CyclonConfig)
    """The CYCLON peer-sampling layer the gossip runs over."""

    __pydantic_config__ = {"extra": "forbid"}

    def __post_init__(self) -> None:
        check_gossip_params(self.gamma, self.ttl, self.seen_capacity)
        if self.repair_window_ms < 0 or self.repair_ids < 1:
            raise ValueError("repair_window_ms must be >= 0 and repair_ids >= 1")
        if self.repair_window_ms and not 0 <= self.repair_after_ms <= self.repair_window_ms:
            raise ValueError("repair_after_ms must be in [0, repair_window_ms]")


def check_gossip_params(gamma: float, ttl: int, seen_capacity: int) -> None:
    """The bounds of the parameters every interest-aware gossip config has."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError("gamma must be in [0, 1]")
    if ttl < 1 or seen_capacity < 1:
        raise ValueError("ttl and seen_capacity must be at least 1")


class InterestGossip(Dissemination):
    """Forward to interested neighbours of ``layer``, to the others with probability γ; with
    ``repair``, the shuffle repair over ``layer`` (the config's ``repair_window_ms``)."""

    name = "interest_gossip"
    params = frozenset({"gamma", "ttl", "repair_window_ms", "repair_after_ms", "repair_ids"})

    def __init__(self, layer: str, repair: bool = False) -> None:
        self.layer = layer
        self.repairs = repair
        self.recent: OrderedDict[str, tuple[EventMsg, float]] = OrderedDict()
        """The events this node published or relayed over the repair window, with when."""
        self.repaired = 0

    def relays(self, event: EventMsg) -> bool:
        ttl: int = self.stack.config.ttl
        return event.hops < ttl

    def _wants(self, d: Descriptor, topic: Topic) -> bool:
        gamma = self.stack.config.gamma
        return topic in d.topics or gamma >= 1.0 or self.stack.rng.random() < gamma

    def targets(self, event: EventMsg, sender: NodeId | None) -> list[Descriptor]:
        if self.repair_layer is not None:
            self.recent[event.event_id] = (event, self.stack.now)
        topic = event.topic
        return [d for d in self.stack.view(self.layer).values() if d.node_id != sender and self._wants(d, topic)]

    # --- shuffle repair -----------------------------------------------------------------------

    @property
    def repair_layer(self) -> str | None:
        return self.layer if self.repairs and self.stack.config.repair_window_ms > 0 else None

    @property
    def repair_events(self) -> int:
        ids: int = self.stack.config.repair_ids
        return ids

    def _window(self, now: float) -> list[tuple[EventMsg, float]]:
        """The events of the repair window, the ``repair_ids`` most recent, oldest first."""
        config = self.stack.config
        horizon = now - config.repair_window_ms / 1000.0
        recent = self.recent
        while recent and next(iter(recent.values()))[1] < horizon:
            recent.popitem(last=False)
        newest = list(islice(reversed(recent.values()), config.repair_ids))
        newest.reverse()
        return newest

    def exchange_digest(self, now: float) -> tuple[str, ...]:
        if not self.recent:  # no event yet: every shuffle of a run without events
            return ()
        return tuple(e.event_id for e, _ in self._window(now))

    def exchange_repair(self, partner: Descriptor, recent: tuple[str, ...], now: float) -> list[Action]:
        if not self.recent:
            return []
        settled = now - self.stack.config.repair_after_ms / 1000.0
        known = set(recent)
        missing = [e for e, t in self._window(now)
                   if t <= settled and e.event_id not in known and e.publisher != partner.node_id
                   and self._wants(partner, e.topic)]
        self.repaired += len(missing)
        return [a for e in missing for a in self.stack.send_copies(e, (partner,))]

    def counters(self) -> dict[str, int]:
        return {"repaired": self.repaired} if self.repaired else {}  # like the drivers' counters: none at 0


def build(me: Descriptor, config: GossipConfig, rng: random.Random, shared: dict[str, Any]) -> Stack:
    return Stack(me, config, rng, [Cyclon(config.cyclon)], InterestGossip(CYCLON, repair=True),
                 seen_capacity=config.seen_capacity)


register_protocol(ProtocolSpec(
    "gossip", GossipConfig, build,
    cycle_s=lambda c: c.cyclon.cycle_ms / 1000.0,
    reply_timeout_s=lambda c: c.cyclon.timeout_ms / 1000.0,
    dissemination_params=InterestGossip.params,
))
