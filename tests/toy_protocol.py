"""A protocol a test registers from outside the package, built from the kit alone: flooding
over a static ring, plus a one-way heartbeat layer (so a one-way message type travels too).

Everything a protocol needs is here: its config, its layers and rule, the stack that combines
them and its registration. ``tests/conftest.py`` imports it, so the conformance suite checks it
like the built-in protocols; local peer processes import it through ``$OVERLAYLAB_PROTOCOLS``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from node.kit import Dissemination, Layer, ProtocolSpec, Stack, register_protocol
from node.kit.types import Action, Descriptor, EventMsg, Message, NodeId, RemoteProtocolError, Send, Signal
from node.protocols.static_gossip.topology import LAYER as STATIC
from node.protocols.static_gossip.topology import StaticTopology

NAME = "toy-flood"


@dataclass
class ToyConfig:
    cycle_ms: float = 1000.0
    """Heartbeat period."""
    seen_capacity: int = 10_000
    """Event ids remembered for duplicate suppression."""

    __pydantic_config__ = {"extra": "forbid"}


class Heartbeat(Layer):
    """Each cycle, a one-way "beat" to every static neighbour; the view is who was heard."""

    name = "heartbeat"

    def __init__(self, period_s: float) -> None:
        super().__init__()
        self.period_s = period_s

    @property
    def period(self) -> float:
        return self.period_s

    def tick(self, now: float) -> list[Action]:
        me = self.stack.me.aged(0)
        return [Send(n, d.addr, Signal(self.name, "beat", me)) for n, d in self.stack.view(STATIC).items()]

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        if not isinstance(msg, Signal) or msg.kind != "beat" or msg.entries:
            raise RemoteProtocolError(f"heartbeat layer: unexpected {msg!r}")
        self.view[src] = msg.sender.aged(0)
        return []


class Flood(Dissemination):
    """Every first copy goes to every static neighbour but the one it came from."""

    name = "flood"

    def targets(self, event: EventMsg, sender: NodeId | None) -> list[Descriptor]:
        return [d for n, d in self.stack.view(STATIC).items() if n != sender]


def build(me: Descriptor, config: ToyConfig, rng: random.Random, shared: dict[str, Any]) -> Stack:
    return Stack(me, config, rng, [StaticTopology(), Heartbeat(config.cycle_ms / 1000.0)], Flood(),
                 seen_capacity=config.seen_capacity)


register_protocol(ProtocolSpec(NAME, ToyConfig, build, cycle_s=lambda c: c.cycle_ms / 1000.0,
                               reply_timeout_s=lambda c: c.cycle_ms / 2000.0))
