"""The protocol kit: a node is a :class:`Stack` of layers plus one dissemination rule.

A core is a state machine: the driver calls ``start``, ``on_timer``, ``on_message`` and
``on_send_failed``; the application calls ``subscribe``/``unsubscribe``/``publish``; every call
takes ``now`` (seconds, from the driver's clock) and *returns* the list of actions to carry out
(dask's ``handle_stimulus`` style: the simulator and the tests need no pull loop). A core never
reads a clock, sleeps, opens a socket or touches the global ``random``: all randomness comes
from the ``random.Random`` it is given, so a seed fixes a run.

Layers (:class:`Layer`: peer sampling, overlays) keep links; each periodic layer has its own
timer, named after the layer, with a random first phase in [0, period) so that nodes stay
unsynchronised. Messages of a layer (:class:`~node.kit.types.Gossip`,
:class:`~node.kit.types.Signal`) are routed to it by their ``layer`` field. The rule
(:class:`Dissemination`) picks where an event goes. The stack owns what they share: the node's
profile ``me``, the timers, the duplicate filter, the event ids and delivery (a ``Deliver``
action for every copy, first or not; the rule is asked to forward first copies only).

Errors: a core raises :class:`RemoteProtocolError` for input a peer should never have sent
(drivers count it and drop the message) and :class:`LocalProtocolError` when it is misused.
"""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from node.kit.types import (
    Action,
    Deliver,
    Descriptor,
    EventMsg,
    Gossip,
    LayerSnapshot,
    LocalProtocolError,
    Message,
    NodeId,
    NodeSnapshot,
    Published,
    RemoteProtocolError,
    Send,
    SetTimer,
    Topic,
)
from node.kit.views import DuplicateFilter, PendingReplies, View, youngest

UNORDERED = MappingProxyType({"unordered": True})
"""A state field's metadata: a mapping whose order nothing reads (compared as sorted)."""


@dataclass
class LayerState:
    """A layer's state, declared: what a compiled loop takes over and gives back
    (:mod:`node.sim.native`) and what the divergence check compares (:mod:`node.sim.check`).
    A layer with more state extends it (``CyclonState``, ``RingsState``); caches are not state.
    Containers keep their order (a view's order is the order its entries are drawn in) unless
    the field is marked :data:`UNORDERED`."""

    view: View = field(default_factory=dict)
    pending: list[tuple[NodeId, Any, float]] = field(default_factory=list)
    """The replies awaited, (partner, kept, deadline) (:meth:`PendingReplies.entries`)."""
    late: int = 0
    """Replies dropped as late or unasked."""


@dataclass
class StackState:
    """A node's state but its generator (``Stack.rng``), declared as :class:`LayerState` is."""

    me: Descriptor
    seen: list[str]
    """The duplicate filter's event ids, the least recent first."""
    published: int
    layers: dict[str, LayerState]


class _Part:
    """A layer or the rule of a stack: bound to it once, when the stack is built."""

    name: str = ""
    stack: Stack

    def bind(self, stack: Stack) -> None:
        self.stack = stack


class Layer(_Part):
    """One layer of links (peer sampling or an overlay). ``name`` is its timer's name and the
    ``layer`` field of its messages; ``view`` holds its neighbours' descriptors."""

    def __init__(self) -> None:
        self.view: View = {}

    @property
    def period(self) -> float | None:
        """Seconds between ticks; None: the layer has no timer."""
        return None

    @property
    def late_replies(self) -> int:
        """Replies dropped because they came after their deadline or nobody awaited them."""
        return 0

    def bootstrap(self, contacts: Sequence[Descriptor]) -> None:
        """The contacts the node joins with (default: ignored)."""

    def first_tick(self, now: float, rng: random.Random) -> float:
        """When the first tick of a node that starts at ``now`` is due: by default at a random
        phase in [now, now + period), so that nodes stay unsynchronised."""
        period = self.period
        assert period is not None
        return now + rng.uniform(0.0, period)

    def tick(self, now: float) -> list[Action]:
        """One active cycle (called every ``period``)."""
        return []

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        """A message of this layer from ``src``. Raises RemoteProtocolError on illegal input."""
        raise RemoteProtocolError(f"layer {self.name!r} takes no messages")

    def on_send_failed(self, dst: NodeId, msg: Message, now: float) -> list[Action]:
        """The transport could not hand a message of this layer to ``dst``. Default: nothing."""
        return []

    def counters(self) -> dict[str, int]:
        """The layer's own counters, reported as ``<layer>.<name>`` with the peer's stats."""
        return {}

    def subscribed(self, topics: list[Topic]) -> None:
        """The node subscribed to ``topics`` (its profile already says so); one call for all the
        topics of a join, so that a layer can keep a join linear in its topics."""

    def unsubscribed(self, topic: Topic) -> None:
        """The node unsubscribed from ``topic`` (its profile already says so)."""

    def snapshot(self) -> list[LayerSnapshot]:
        return [LayerSnapshot(self.name, list(self.view))]

    def export_state(self) -> LayerState:
        """The layer's state (its own containers, not copies)."""
        return LayerState(self.view)

    def import_state(self, state: LayerState) -> None:
        """Take ``state`` (as :meth:`export_state` gives it) as the layer's state."""
        self.view = state.view

    def validate(self) -> None:
        """Check the layer's invariants; raise LocalProtocolError when one is broken."""
        me = self.stack.node_id
        if me in self.view:
            raise LocalProtocolError(f"node {me} has itself in its {self.name} view")
        if any(d.node_id != nid or d.age < 0 for nid, d in self.view.items()):
            raise LocalProtocolError(f"{self.name} view entry with a negative age or a wrong key")


class ExchangeLayer(Layer, ABC):
    """A push-pull gossip layer: each cycle a request to one partner, who answers with a reply.

    Subclasses pick the partner and the entries in ``exchange`` (each tick, once the requests past
    their deadline are handed to ``on_timeout``) and send them with ``request``;
    ``on_request`` merges a partner's request and returns the entries of the reply;
    ``on_reply`` merges a reply (one that comes after ``timeout_s``, or unasked, is dropped and
    counted in ``pending.late``). Messages with more than ``max_entries`` entries are refused."""

    def __init__(self, *, max_entries: int, timeout_s: float) -> None:
        super().__init__()
        self.max_entries = max_entries
        self.pending: PendingReplies[Any] = PendingReplies(timeout_s)

    @property
    def late_replies(self) -> int:
        return self.pending.late

    def export_state(self) -> LayerState:
        return LayerState(self.view, self.pending.entries(), self.pending.late)

    def import_state(self, state: LayerState) -> None:
        self.view = state.view
        self.pending.restore(state.pending, state.late)

    def tick(self, now: float) -> list[Action]:
        for partner, kept in self.pending.prune(now):
            self.on_timeout(partner, kept, now)
        return self.exchange(now)

    def on_timeout(self, partner: NodeId, kept: Any, now: float) -> None:
        """No reply from ``partner`` by its deadline (seen at the next tick). Default: nothing."""

    @abstractmethod
    def exchange(self, now: float) -> list[Action]:
        """One active cycle: age the view, pick a partner, return the ``request`` (or nothing)."""

    def request(self, partner: Descriptor, entries: Sequence[Descriptor], now: float, kept: Any = ()) -> Send:
        """The request to ``partner``; ``kept`` comes back to ``on_reply`` with its reply."""
        self.pending.expect(partner.node_id, now, kept)
        return Send(partner.node_id, partner.addr, self._message(entries, False, now))

    def _message(self, entries: Sequence[Descriptor], reply: bool, now: float) -> Gossip:
        rule = self.stack.rule
        recent = rule.exchange_digest(now) if rule.repair_layer == self.name else ()
        return Gossip(self.name, self.stack.me.aged(0), tuple(entries), reply, recent)

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        if not isinstance(msg, Gossip):
            raise RemoteProtocolError(f"{self.name} takes gossip exchanges, not {type(msg).__name__}")
        if len(msg.entries) > self.max_entries:
            raise RemoteProtocolError(f"{self.name} message with {len(msg.entries)} entries (limit {self.max_entries})")
        out: list[Action] = []
        if msg.reply:
            kept = self.pending.take(src, now)
            if kept is not None:
                self.on_reply(msg, kept, now)
        else:
            entries = self.on_request(src, msg, now)
            out.append(Send(src, msg.sender.addr, self._message(entries, True, now)))
        rule = self.stack.rule
        if rule.repair_layer == self.name:
            out += rule.exchange_repair(msg.sender, msg.recent, now)
        return out

    @abstractmethod
    def on_request(self, src: NodeId, msg: Gossip, now: float) -> Sequence[Descriptor]: ...

    @abstractmethod
    def on_reply(self, msg: Gossip, kept: Any, now: float) -> None: ...


class Dissemination(_Part, ABC):
    """Where an event goes: asked once per event at the publisher and at each first copy.

    A rule may repair what a flood missed: when ``repair_layer`` names an exchange layer, that
    layer's messages carry the rule's ``exchange_digest`` of recent events, and each message
    received is handed to ``exchange_repair`` with its sender and digest (anti-entropy on the
    shuffles: :class:`~node.protocols.gossip.protocol.InterestGossip`)."""

    params: frozenset[str] = frozenset()
    """Config fields only this rule reads: changing them on a running overlay before its first
    event is the same as starting with them (``sim.variants``)."""

    @property
    def repair_layer(self) -> str | None:
        """The exchange layer whose messages carry this rule's digest (None: no repair)."""
        return None

    @property
    def repair_events(self) -> int:
        """How many of the node's latest events a repair may send copies of."""
        return 0

    @property
    def later_events(self) -> int:
        """How many of the node's latest events this rule may send copies of outside their own
        handling (a repair; an event held or buffered, or sent again after a failed send): such
        a copy leaves under the node's own span of the event (``node.kit.interpret``)."""
        return self.repair_events if self.repair_layer is not None else 0

    def exchange_digest(self, now: float) -> tuple[str, ...]:
        """The ids of recent events, for a message of ``repair_layer``."""
        return ()

    def exchange_repair(self, partner: Descriptor, recent: tuple[str, ...], now: float) -> list[Action]:
        """A message of ``repair_layer`` from ``partner``, whose digest was ``recent``: the
        copies it should get."""
        return []

    def counters(self) -> dict[str, int]:
        """The rule's own counters, reported as ``<rule>.<name>`` with the peer's stats."""
        return {}

    def check_publish(self, topic: Topic) -> None:
        """Raise LocalProtocolError if this node may not publish on ``topic``."""

    def subscribes(self, event: EventMsg) -> bool:
        """Whether this node subscribes to what ``event`` carries (default: to its topic)."""
        return event.topic in self.stack.me.topics

    def relays(self, event: EventMsg) -> bool:
        """Whether a first copy received is forwarded at all."""
        return True

    @abstractmethod
    def targets(self, event: EventMsg, sender: NodeId | None) -> list[Descriptor]:
        """The neighbours to send ``event`` to; ``sender`` is None at the publisher."""

    def on_send_failed(self, dst: NodeId, event: EventMsg, now: float) -> list[Action]:
        """An event copy could not be handed to ``dst``. Default: nothing."""
        return []

    def duplicate_targets(self, event: EventMsg, sender: NodeId) -> list[Descriptor]:
        """Where a later copy of an event goes (rumour mongering with loss of interest).
        Default: nowhere, only first copies are forwarded."""
        return []

    def validate(self) -> None:
        """Check the rule's invariants."""


class Stack:
    """One node's protocol: named layers plus a dissemination rule.

    Args:
        me: the node's profile (id, address, subscriptions).
        config: the protocol's config (the registered config class).
        rng: the node's only source of randomness.
        layers: in the order their first tick phases are drawn; a protocol lists optional layers
            last so that leaving one out keeps the other layers' draws.
        rule: the dissemination rule.
        seen_capacity: event ids the duplicate filter remembers.
        view_order: layer names in the order their views are merged by ``union`` (an earlier
            view's copy wins a tie of ages) and listed in snapshots (default: ``layers``).
    """

    def __init__(self, me: Descriptor, config: Any, rng: random.Random, layers: Sequence[Layer],
                 rule: Dissemination, *, seen_capacity: int = 100_000,
                 view_order: Sequence[str] | None = None) -> None:
        self.me = me
        self.config = config
        self.rng = rng
        self.layers = {layer.name: layer for layer in layers}
        if len(self.layers) != len(layers):
            raise LocalProtocolError(f"two layers share a name: {[layer.name for layer in layers]}")
        self.rule = rule
        self.seen = DuplicateFilter(seen_capacity)
        self.incarnation = "0"
        """Part of every event id this node publishes (``node-incarnation-seq``, then ``-tag`` with
        an ``id_key``): the driver gives a node that starts over with a fresh core a new one, so
        no two events share an id."""
        self.id_key: bytes | None = None
        """Set by the real transports: every event id this node publishes then ends with a hash of
        the rest of the id keyed by this secret, so that an id seen tells nothing of the next
        (another peer cannot send a copy ahead of an event under its id). None on ``sim``."""
        self.published = 0
        self.active = True
        self.now = 0.0
        """The driver's clock at the call being handled (for rules, which ``targets`` gives none)."""
        self.view_order = list(view_order or self.layers)
        if sorted(self.view_order) != sorted(self.layers):
            raise LocalProtocolError(f"view_order {self.view_order} does not name the layers {list(self.layers)}")
        for layer in layers:
            layer.bind(self)
        rule.bind(self)

    @property
    def node_id(self) -> NodeId:
        return self.me.node_id

    @property
    def topics(self) -> frozenset[Topic]:
        return self.me.topics

    def view(self, layer: str) -> View:
        """The view of ``layer``; empty if the stack has no such layer."""
        found = self.layers.get(layer)
        return found.view if found is not None else {}

    def union(self, without: str | None = None) -> View:
        """Every layer's view (but ``without``'s) merged, one entry per id: the youngest copy."""
        views = [self.layers[name].view for name in self.view_order if name != without]
        return youngest(*views) if views else {}

    # --- driver calls -------------------------------------------------------------------------

    def start(self, now: float, contacts: Sequence[Descriptor]) -> list[Action]:
        """Join the overlay through ``contacts`` and arm every periodic layer's timer."""
        self.now = now
        self.active = True
        timers: list[Action] = []
        for layer in self.layers.values():
            layer.bootstrap(contacts)
            if layer.period is not None:
                timers.append(SetTimer(layer.name, layer.first_tick(now, self.rng)))
        return timers

    def on_timer(self, name: str, now: float) -> list[Action]:
        self.now = now
        layer = self.layers.get(name)
        if layer is None or layer.period is None:
            raise LocalProtocolError(f"unknown timer {name!r}")
        if not self.active:
            return []
        return [*layer.tick(now), SetTimer(name, now + layer.period)]

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        """Handle one message from ``src``. Raises RemoteProtocolError on illegal input."""
        self.now = now
        if not self.active:
            return []
        if isinstance(msg, EventMsg):
            return self._on_event(src, msg)
        layer = self.layers.get(msg.layer)
        if layer is None:
            raise RemoteProtocolError(f"message for unknown layer {msg.layer!r}")
        return layer.on_message(src, msg, now)

    def on_send_failed(self, dst: NodeId, msg: Message, now: float) -> list[Action]:
        """The transport could not hand ``msg`` to ``dst`` (peer gone)."""
        self.now = now
        if not self.active:
            return []
        if isinstance(msg, EventMsg):
            return self.rule.on_send_failed(dst, msg, now)
        layer = self.layers.get(msg.layer)
        return layer.on_send_failed(dst, msg, now) if layer is not None else []

    def leave(self, now: float) -> list[Action]:
        """Graceful leave: stop taking part (the stack goes silent)."""
        self.active = False
        return []

    # --- application calls --------------------------------------------------------------------

    def subscribe(self, topic: Topic, now: float) -> list[Action]:
        return self.subscribe_all([topic], now)

    def subscribe_all(self, topics: Iterable[Topic], now: float) -> list[Action]:
        """Subscribe to every topic of ``topics`` at once (a join): the profile is rebuilt once,
        so the cost is linear in the number of topics."""
        new = list(dict.fromkeys(t for t in topics if t not in self.me.topics))
        if new:
            self.me = Descriptor(self.me.node_id, self.me.addr, self.me.topics.union(new), 0, self.me.priorities)
            for layer in self.layers.values():
                layer.subscribed(new)
        return []

    def unsubscribe(self, topic: Topic, now: float) -> list[Action]:
        self.me = Descriptor(self.me.node_id, self.me.addr, self.me.topics - {topic}, 0,
                             tuple(p for p in self.me.priorities if p[0] != topic))
        for layer in self.layers.values():
            layer.unsubscribed(topic)
        return []

    def publish(self, topic: Topic, payload: bytes, now: float) -> list[Action]:
        self.now = now
        if not self.active:
            raise LocalProtocolError("publish on a node that has left")
        self.rule.check_publish(topic)
        self.published += 1
        event_id = f"{self.node_id}-{self.incarnation}-{self.published}"
        if self.id_key is not None:
            event_id += "-" + hashlib.blake2b(event_id.encode(), key=self.id_key, digest_size=8).hexdigest()
        event = EventMsg(event_id, topic, payload, self.node_id, 0)
        self.seen.add(event.event_id)
        return [Published(event), *self._forward(event, None)]

    # --- events -------------------------------------------------------------------------------

    def _on_event(self, src: NodeId, msg: EventMsg) -> list[Action]:
        first = msg.event_id not in self.seen
        actions: list[Action] = [Deliver(msg, src, first, self.rule.subscribes(msg))]
        if first:
            self.seen.add(msg.event_id)
            if self.rule.relays(msg):
                actions += self._forward(msg, src)
        else:
            actions += self.send_copies(msg, self.rule.duplicate_targets(msg, src))
        return actions

    def _forward(self, event: EventMsg, sender: NodeId | None) -> list[Action]:
        return self.send_copies(event, self.rule.targets(event, sender))

    def send_copies(self, event: EventMsg, targets: Iterable[Descriptor]) -> list[Action]:
        """``event`` passed on to ``targets``: one copy, one hop further."""
        copy = EventMsg(event.event_id, event.topic, event.payload, event.publisher, event.hops + 1)
        return [Send(d.node_id, d.addr, copy) for d in targets]

    # --- introspection ------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """The core's own counters, reported with the peer's stats (``replies_late``: an overlay
        whose replies come too late, on a loaded machine, stops improving its views)."""
        out = {"replies_late": sum(layer.late_replies for layer in self.layers.values())}
        for layer in self.layers.values():
            out.update((f"{layer.name}.{k}", v) for k, v in layer.counters().items())
        out.update((f"{self.rule.name}.{k}", v) for k, v in self.rule.counters().items())
        return out

    def snapshot(self) -> NodeSnapshot:
        return NodeSnapshot(self.node_id, sorted(self.me.topics),
                            [s for name in self.view_order for s in self.layers[name].snapshot()])

    def export_state(self) -> StackState:
        """The node's state but its generator, each layer's by ``Layer.export_state``."""
        return StackState(self.me, self.seen.ids(), self.published,
                          {name: layer.export_state() for name, layer in self.layers.items()})

    def import_state(self, state: StackState) -> None:
        """Take ``state`` (as :meth:`export_state` gives it); the layers named in it only."""
        self.me, self.published = state.me, state.published
        self.seen.restore(state.seen)
        for name, layer_state in state.layers.items():
            self.layers[name].import_state(layer_state)

    def validate(self) -> None:
        """Check every layer's and the rule's invariants; raise LocalProtocolError if broken."""
        for layer in self.layers.values():
            layer.validate()
        self.rule.validate()
        if len(self.seen) > self.seen.capacity:
            raise LocalProtocolError("duplicate filter over capacity")
