"""Values that flow in and out of protocol cores.

Every message, event and action is a small value dataclass (:func:`value`: immutable to the
type checker). Cores take them and return them; drivers (the simulator, the gRPC shell) move
them. Nothing here knows about protobuf, sockets or clocks: ``node/wire/codec.py`` is the
only place that maps these to the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value(cls: type[_T]) -> type[_T]:
    """A value type: a slotted dataclass, immutable by the type checker (mypy --strict over the
    cores) rather than at run time. A frozen dataclass's ``__init__`` costs about 4x a plain
    one's, and one is made per message, action and aged descriptor (the simulator's and the
    peers' hottest paths). The hash is the frozen one's (over the compared fields), so sets and
    dicts of values hash and order as before."""
    return dataclass(slots=True, unsafe_hash=True)(cls)

NodeId = int
Topic = str


class RemoteProtocolError(Exception):
    """A peer sent something illegal. Drop it, count it, carry on."""


class LocalProtocolError(Exception):
    """The core was misused or broke an invariant: a bug, never caused by a peer."""


@value
class Descriptor:
    """A node as others see it: id, address, subscriptions and the entry's gossip age."""

    node_id: NodeId
    addr: str
    topics: frozenset[Topic] = frozenset()
    age: int = 0
    priorities: tuple[tuple[Topic, int], ...] = ()
    """Topic priorities where the protocol has them (PolderCast); topics left out have 0."""
    profile_bytes: int = field(default=0, compare=False, repr=False)
    """The encoded size of the profile (all but the age), 0 until the codec first measures it;
    aged copies inherit it (drivers count the bytes of every message they send)."""

    def aged(self, age: int) -> Descriptor:
        """This descriptor at ``age`` (itself when it is that age already: a value, and the
        codec's measure of its profile stays with it)."""
        if age == self.age:
            return self
        return Descriptor(self.node_id, self.addr, self.topics, age, self.priorities, self.profile_bytes)


# --- messages (core <-> core, through a driver) -------------------------------------------


@value
class Gossip:
    """One side of a push-pull exchange of an overlay layer."""

    layer: str
    sender: Descriptor
    entries: tuple[Descriptor, ...]
    reply: bool = False
    recent: tuple[str, ...] = ()
    """Ids of the events the sender relayed most recently, where the dissemination rule asks for
    them (:meth:`~node.kit.stack.Dissemination.exchange_digest`)."""


@value
class EventMsg:
    """One copy of a published event. ``hops`` counts the hops travelled on arrival."""

    event_id: str
    topic: Topic
    payload: bytes
    publisher: NodeId
    hops: int


@value
class Signal:
    """A one-way message of an overlay layer: link requests and answers, heartbeats, random
    walks. ``kind`` says which; ``entries``, ``topics`` and ``values`` carry what it needs."""

    layer: str
    kind: str
    sender: Descriptor
    entries: tuple[Descriptor, ...] = ()
    topics: tuple[Topic, ...] = ()
    values: tuple[int, ...] = ()


Message = Gossip | EventMsg | Signal


# --- actions (core -> driver) ---------------------------------------------------------------


@value
class Send:
    """Send ``msg`` to node ``dst`` at ``addr``."""

    dst: NodeId
    addr: str
    msg: Message


@value
class SetTimer:
    """Call ``on_timer(name, now)`` at time ``at`` (replaces an earlier timer of that name)."""

    name: str
    at: float


@value
class Deliver:
    """A copy of an event reached this node (first copy or duplicate)."""

    event: EventMsg
    src: NodeId
    first_copy: bool
    subscriber: bool


@value
class Published:
    """The application published ``event`` at this node (hop 0)."""

    event: EventMsg


Action = Send | SetTimer | Deliver | Published


@dataclass(slots=True)
class LayerSnapshot:
    """A layer's links: neighbours, and per-topic neighbours where the layer has them."""

    layer: str
    neighbours: list[NodeId]
    per_topic: dict[Topic, list[NodeId]] = field(default_factory=dict)


@dataclass(slots=True)
class NodeSnapshot:
    node_id: NodeId
    topics: list[Topic]
    layers: list[LayerSnapshot]
