"""A protocol a test registers from outside the package, built from the kit alone: flooding
over a static ring, plus a one-way heartbeat layer (so a one-way message type travels too) whose
beats are a typed message kind of the toy's own (:class:`Beat`, declared with
:func:`node.kit.messages.message`: no proto change, and the codec and conformance checks cover it).

Everything a protocol needs is here: its config, its layers and rule, the stack that combines
them and its registration. ``tests/conftest.py`` imports it, so the conformance suite checks it
like the built-in protocols; local peer processes import it through ``$OVERLAYLAB_PROTOCOLS``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from node.kit import Dissemination, Layer, ProtocolSpec, Stack, register_protocol
from node.kit.messages import MaxLen, Range, from_signal, message, to_signal
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


@message("toy-heartbeat", "beat")
class Beat:
    """A heartbeat: the sender's cycle count, whom it heard last cycle, and whether it is new."""

    sender: Descriptor
    cycle: Annotated[int, Range(0, 1 << 32)]
    heard: Annotated[tuple[int, ...], MaxLen(64)]
    phase: Literal["joining", "steady"]


class Heartbeat(Layer):
    """Each cycle, a one-way :class:`Beat` to every static neighbour; the view is who was heard."""

    name = "toy-heartbeat"

    def __init__(self, period_s: float) -> None:
        super().__init__()
        self.period_s = period_s
        self.cycle = 0

    @property
    def period(self) -> float:
        return self.period_s

    def tick(self, now: float) -> list[Action]:
        self.cycle += 1
        beat = to_signal(Beat(self.stack.me.aged(0), self.cycle, tuple(sorted(self.view))[:64],
                              "joining" if self.cycle == 1 else "steady"))
        return [Send(n, d.addr, beat) for n, d in self.stack.view(STATIC).items()]

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        if not isinstance(msg, Signal):
            raise RemoteProtocolError(f"heartbeat layer: unexpected {msg!r}")
        beat = from_signal(msg)  # RemoteProtocolError for any other kind or a malformed beat
        self.view[src] = beat.sender.aged(0)
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
