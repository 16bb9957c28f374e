"""Interest-aware gossip over a static graph: Ferretti's pub/sub on complex networks.

Theory of operation (spec: ../shared/design/protocols/ferretti-gossip.md §5, Alg. 2)

The overlay is a fixed graph (the ``static`` layer: the contacts the controller hands each node
are its neighbours, ``topology:`` in the experiment file). A node that publishes an event, or
handles its first copy, sends it to every neighbour subscribed to the event's topic and to each
other neighbour with probability ``gamma``, never back to the neighbour the copy came from.
Every receiver relays, subscribed or not; later copies are duplicates (delivered as such, never
forwarded). A copy that arrives after ``ttl`` hops is delivered, not forwarded.

Neighbours' subscriptions (``nbr_subs``, Alg. 1) come with the contacts: each descriptor carries
the neighbour's topics from the plan, which stands for the hello exchange finished before any
publication (§5.2 steps 4-5, the model's perfect neighbour knowledge). Subscriptions do not
change during a run of this protocol.

Choices not in the paper, as named parameters: ``ttl`` (255: no TTL in effect), ``seen_capacity``
(LRU duplicate filter), and ``coin``: where the γ draws come from. ``per_link`` (default): the
draw for event e on link (this node → v) is a keyed hash of (e, v) with a key from the node's
seed (BLAKE2b of the event's publisher and sequence number, then SplitMix64 over the neighbour's
id; two events of a node that restarted with a fresh core share coins), one independent uniform
per event and link as the paper asks (§10 item 11), so the set of
nodes an event reaches depends on the graph, the subscriptions and the coins only, not on the
order copies arrive in: the same in ``sim`` and on real peers, with or without injected delay.
``stream``: draws from the node's random stream in handling order (as ``gossip`` does).

Invariants: the static view never changes; the duplicate filter never exceeds ``seen_capacity``.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any, Literal

from node.kit.registry import ProtocolSpec, register_protocol
from node.kit.stack import Stack
from node.kit.types import Descriptor, EventMsg, NodeId
from node.protocols.gossip.protocol import InterestGossip, check_gossip_params
from node.protocols.static_gossip.topology import LAYER as STATIC
from node.protocols.static_gossip.topology import StaticTopology


@dataclass
class StaticGossipConfig:
    gamma: float = 0.1
    """γ: probability of forwarding to each neighbour not subscribed to the event's topic."""
    ttl: int = 255
    """Largest hop count an event is forwarded to (choice, not in paper: 255 = no TTL)."""
    seen_capacity: int = 100_000
    """Event ids remembered for duplicate suppression, LRU (choice, not in paper)."""
    coin: Literal["per_link", "stream"] = "per_link"
    """Source of the γ draws (choice, not in paper): per_link = a keyed hash of (event, neighbour),
    independent of arrival order; stream = the node's random stream in handling order."""

    __pydantic_config__ = {"extra": "forbid"}

    def __post_init__(self) -> None:
        check_gossip_params(self.gamma, self.ttl, self.seen_capacity)


class LinkCoinGossip(InterestGossip):
    """``InterestGossip`` whose γ draw for (event, neighbour) is a keyed hash (``coin: per_link``)."""

    params = frozenset({"gamma", "ttl", "coin"})

    def bind(self, stack: Stack) -> None:
        super().bind(stack)
        self.key = stack.rng.getrandbits(64).to_bytes(8, "big")

    def event_key(self, event_id: str) -> int:
        """This node's key for an event: its publisher and sequence number, not the incarnation
        or the tag (local peers draw theirs at random), so every backend draws the same coins."""
        publisher, _, seq = event_id.split("-")[:3]
        return int.from_bytes(hashlib.blake2b(f"{publisher}-{seq}".encode(), key=self.key, digest_size=8).digest(), "big")

    def targets(self, event: EventMsg, sender: NodeId | None) -> list[Descriptor]:
        config = self.stack.config
        if config.coin == "stream":
            return super().targets(event, sender)
        topic, gamma = event.topic, config.gamma
        h = self.event_key(event.event_id)
        return [
            d for d in self.stack.view(self.layer).values()
            if d.node_id != sender and (topic in d.topics or gamma >= 1.0 or coin(h, d.node_id) < gamma)
        ]


_M64 = (1 << 64) - 1


def coin(h: int, neighbour: NodeId) -> float:
    """The uniform in [0, 1) of the event keyed ``h`` on the link to ``neighbour``: SplitMix64's
    output number ``neighbour + 1`` from seed ``h``."""
    z = (h + (neighbour + 1) * 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return (z ^ (z >> 31)) / 2**64


def build(me: Descriptor, config: StaticGossipConfig, rng: random.Random, shared: dict[str, Any]) -> Stack:
    return Stack(me, config, rng, [StaticTopology()], LinkCoinGossip(STATIC), seen_capacity=config.seen_capacity)


register_protocol(ProtocolSpec(
    "static_gossip", StaticGossipConfig, build,
    cycle_s=lambda c: 1.0,  # no gossip cycle: per-cycle overhead reads per second
    reply_timeout_s=lambda c: 1.0,
    dissemination_params=LinkCoinGossip.params,
))
