"""Values that flow in and out of protocol cores.

Every message, event and action is a small frozen dataclass. Cores take them and return them;
drivers (the simulator, the gRPC shell) move them. Nothing here knows about protobuf, sockets or
clocks: ``node/transport/codec.py`` is the only place that maps these to the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NodeId = int
Topic = str


class RemoteProtocolError(Exception):
    """A peer sent something illegal. Drop it, count it, carry on."""


class LocalProtocolError(Exception):
    """The core was misused or broke an invariant: a bug, never caused by a peer."""


@dataclass(frozen=True, slots=True)
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
        return Descriptor(self.node_id, self.addr, self.topics, age, self.priorities, self.profile_bytes)


# --- messages (core <-> core, through a driver) -------------------------------------------


@dataclass(frozen=True, slots=True)
class Gossip:
    """One side of a push-pull exchange of an overlay layer."""

    layer: str
    sender: Descriptor
    entries: tuple[Descriptor, ...]
    reply: bool = False


@dataclass(frozen=True, slots=True)
class EventMsg:
    """One copy of a published event. ``hops`` counts the hops travelled on arrival."""

    event_id: str
    topic: Topic
    payload: bytes
    publisher: NodeId
    hops: int


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``msg`` to node ``dst`` at ``addr``."""

    dst: NodeId
    addr: str
    msg: Message


@dataclass(frozen=True, slots=True)
class SetTimer:
    """Call ``on_timer(name, now)`` at time ``at`` (replaces an earlier timer of that name)."""

    name: str
    at: float


@dataclass(frozen=True, slots=True)
class Deliver:
    """A copy of an event reached this node (first copy or duplicate)."""

    event: EventMsg
    src: NodeId
    first_copy: bool
    subscriber: bool


@dataclass(frozen=True, slots=True)
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
