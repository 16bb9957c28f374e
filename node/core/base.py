"""The protocol core contract and the registry of protocols by name.

A core is a state machine: the driver calls ``start``, ``on_timer``, ``on_message`` and the
application calls ``subscribe``/``unsubscribe``/``publish``; every call takes ``now`` (seconds,
from the driver's clock) and *returns* the list of actions to carry out (dask's
``handle_stimulus`` style, chosen over h11-style buffering because the simulator and the tests
then need no pull loop). A core never reads a clock, sleeps, opens a socket or touches the global
``random``: all randomness comes from the ``random.Random`` it is given, so a seed fixes a run.

Errors: a core raises :class:`RemoteProtocolError` for input a peer should never have sent
(drivers count it and drop the message) and :class:`LocalProtocolError` when it is misused.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from .types import Action, Descriptor, Message, NodeId, NodeSnapshot, Topic, LocalProtocolError


class Protocol(ABC):
    """One node's protocol stack (peer sampling + interest layer + dissemination rule)."""

    DISSEMINATION_PARAMS: frozenset[str] = frozenset()
    """Config fields read only when handling events (see ``dissemination_params``)."""

    def __init__(self, me: Descriptor, config: Any, rng: random.Random) -> None:
        self.me = me
        self.config = config
        self.rng = rng

    @property
    def node_id(self) -> NodeId:
        return self.me.node_id

    @property
    def topics(self) -> frozenset[Topic]:
        return self.me.topics

    @abstractmethod
    def start(self, now: float, contacts: Sequence[Descriptor]) -> list[Action]:
        """Join the overlay through ``contacts`` and arm the gossip timers."""

    @abstractmethod
    def on_timer(self, name: str, now: float) -> list[Action]: ...

    @abstractmethod
    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        """Handle one message from ``src``. Raises RemoteProtocolError on illegal input."""

    @abstractmethod
    def publish(self, topic: Topic, payload: bytes, now: float) -> list[Action]: ...

    def on_send_failed(self, dst: NodeId, msg: Message, now: float) -> list[Action]:
        """The transport could not hand ``msg`` to ``dst`` (peer gone). Default: nothing; the
        protocols detect failures by gossip alone unless they say otherwise."""
        return []

    def subscribe(self, topic: Topic, now: float) -> list[Action]:
        self.me = Descriptor(self.me.node_id, self.me.addr, self.me.topics | {topic}, 0, self.me.priorities)
        return []

    def unsubscribe(self, topic: Topic, now: float) -> list[Action]:
        self.me = Descriptor(self.me.node_id, self.me.addr, self.me.topics - {topic}, 0,
                             tuple(p for p in self.me.priorities if p[0] != topic))
        return []

    def leave(self, now: float) -> list[Action]:
        """Graceful leave: stop taking part. The default simply goes silent."""
        self.active = False
        return []

    active: bool = True

    @abstractmethod
    def snapshot(self) -> NodeSnapshot: ...

    @abstractmethod
    def validate(self) -> None:
        """Check the core's invariants; raise LocalProtocolError when one is broken."""


ProtocolFactory = Callable[[Descriptor, Any, random.Random], Protocol]
_protocols: dict[str, tuple[ProtocolFactory, type]] = {}


def register_protocol(name: str, factory: ProtocolFactory, config_class: type) -> None:
    _protocols[name] = (factory, config_class)


def protocol_names() -> list[str]:
    return sorted(_protocols)


def protocol_config_class(name: str) -> type:
    return _lookup(name)[1]


def dissemination_params(name: str) -> frozenset[str]:
    """Parameters that only event handling reads (``Protocol.DISSEMINATION_PARAMS``): changing
    them on a running overlay before its first event is the same as starting with them."""
    return getattr(_lookup(name)[0], "DISSEMINATION_PARAMS", frozenset())


def create_protocol(name: str, me: Descriptor, config: Any, rng: random.Random) -> Protocol:
    return _lookup(name)[0](me, config, rng)


def _lookup(name: str) -> tuple[ProtocolFactory, type]:
    try:
        return _protocols[name]
    except KeyError:
        raise LocalProtocolError(
            f"unknown protocol {name!r}; registered: {', '.join(protocol_names())}"
        ) from None
