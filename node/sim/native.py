"""The simulator's compiled loops: a whole overlay of CYCLON nodes, or of PolderCast nodes (CYCLON,
VICINITY and RINGS), run in Rust (``node/sim/native/``, built by ``make setup`` where cargo is
present), byte-identical to the Python cores they stand in for.

The simulator hands a run over to one at its first ``run_until`` when every node is a node of
its kind and nothing else is going on:

- CYCLON (:class:`NativeCyclon`): each node a :class:`~node.kit.stack.Stack` of the
  :class:`~node.protocols.cyclon.layer.Cyclon` layer alone, under a rule with no event to repair (the gossip
  before its first publication);
- PolderCast (:class:`NativePolderCast`): each node the stack ``poldercast.build`` makes, with
  one config for all, and no event in flight;

and, for both, the link one rule for every destination with a constant base delay, no bandwidth
and no partition, ``sim.wire_codec`` and ``sim.check_invariants`` off. It runs there (timers,
exchanges, link delays and losses, counters, settled snapshots, joins, leaves and crashes; in
the PolderCast loop publications too) until something else is asked of the simulation: a
scheduled call not marked ``native_ok`` (a partition; in the CYCLON loop a publication) or a
direct call on the simulator (a fresh core replacing a node's); then every node's state
(through ``Stack.export_state``/``import_state``), the queue, the clocks and the random states
are written back into the Python objects, and the run carries on in Python as if it had run
there all along, until the simulator hands it over again. ``Stack.now``, the time of a core's
last call, is not written back (every call sets it before use). Configs cross into the loops
as options by name.

The Python cores are the reference: tests/unit/test_native.py runs experiments both ways on
the same seeds and compares every output file byte for byte.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import os
import random
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from node.kit.interpret import DROPPED_BY_LINK, DUPLICATES, EVENTS_PUBLISHED, EVENTS_RECEIVED, EVENTS_SENT, LOST_TO_DEAD_PEER, sent_keys
from node.kit.links import FixedDelay
from node.kit.stack import LayerState, Stack, StackState
from node.kit.types import Descriptor, EventMsg, Gossip, LayerSnapshot, NodeSnapshot
from node.protocols.cyclon.layer import LAYER, Cyclon, CyclonState
from node.protocols.gossip.protocol import InterestGossip
from node.protocols.poldercast.ringcast import SHORTCUT_LAYERS, RingCast
from node.protocols.poldercast.rings import LAYER as RINGS
from node.protocols.poldercast.rings import Rings, RingsState
from node.protocols.poldercast.vicinity import LAYER as VICINITY
from node.protocols.poldercast.vicinity import Vicinity
from node.sim import mirror
from node.sim.accelerators import STALE
from node.wire import codec
from node.wire.snapshots import columns_table

try:
    import overlaylab_native
except ImportError:  # not built (no cargo): the Python loop runs everything
    overlaylab_native = None

if TYPE_CHECKING:
    from node.sim.engine import Simulation

_TIMER, _MSG, _CALL = 0, 1, 2
_COUNTERS = (*sent_keys(LAYER), DROPPED_BY_LINK, LOST_TO_DEAD_PEER)
"""The counters the compiled CYCLON loop keeps, by the numbers it gives them."""
POLDERCAST_LAYERS = (LAYER, VICINITY, RINGS)
"""The PolderCast loop's layers, by the numbers it gives them (and the stack's view order)."""
_POLDERCAST_COUNTERS = (*(k for name in POLDERCAST_LAYERS for k in sent_keys(name)), DROPPED_BY_LINK, LOST_TO_DEAD_PEER,
                        EVENTS_PUBLISHED, EVENTS_RECEIVED, DUPLICATES, EVENTS_SENT)


def available() -> bool:
    return overlaylab_native is not None


def loop_for(sim: Simulation) -> tuple[type[NativeCyclon] | type[NativePolderCast] | None, str | None]:
    """The compiled loop that can take ``sim`` over now, or None and why none can."""
    reason = _unsupported_simulation(sim)
    if reason is not None:
        return None, reason
    first = sim.nodes[min(sim.nodes)]
    layers = list(first.layers) if type(first) is Stack else []
    if layers == [LAYER]:
        loop: type[NativeCyclon] | type[NativePolderCast] = NativeCyclon
        reason = _unsupported_cyclon(sim)
    elif sorted(layers) == sorted(POLDERCAST_LAYERS):
        loop = NativePolderCast
        reason = _unsupported_poldercast(sim)
    else:
        return None, f"node {first.node_id} is neither a CYCLON nor a PolderCast node"
    if reason is None and not sim.unverified_ok:
        reason = unverified(loop.kind)
    return (loop, None) if reason is None else (None, reason)


def verified_digest(kind: str) -> str:
    """The fingerprint of the Python code the ``kind`` loop was verified against, in one digest
    (of what the extension embeds; run.json records it)."""
    against = json.loads(overlaylab_native.verified()).get(kind, {})
    return hashlib.sha256(json.dumps(against, sort_keys=True).encode()).hexdigest()[:16]


def unverified(kind: str) -> str | None:
    """Why the ``kind`` loop may not stand in for the running Python code: code it mirrors that
    changed since it was verified (node/sim/mirror.py); None where it may."""
    if os.environ.get(mirror.UNVERIFIED_ENV) == "1":
        return None
    changed = mirror.changed(kind, overlaylab_native.verified())
    if not changed:
        return None
    return (f"the compiled {kind} loop {STALE}: {', '.join(changed)} changed since (after changing it, "
            "`make native-verify`; docs/architecture.md)")


def _unsupported_simulation(sim: Simulation) -> str | None:
    """What neither loop can run, whatever the nodes."""
    if overlaylab_native is None:
        return "the compiled extension is not built (make setup builds it where cargo is present)"
    if not sim.nodes:
        return "the simulation has no node"
    if sim.wire_codec:
        return "sim.wire_codec is on"
    if sim.validate:
        return "sim.check_invariants is on"
    if sim.failure_detection != "oracle":
        return f"sim.failure_detection is {sim.failure_detection} (the loops were verified with oracle detection)"
    links = sim.links
    if links.partitions or links.bandwidth_kbps or any(rule.nodes for rule in links.rules):
        return "the link model has a partition, a bandwidth or a per-node rule"
    if links.base is not None and not isinstance(links.base, FixedDelay):
        return "link delays vary per link"
    return None


def _unsupported_cyclon(sim: Simulation) -> str | None:
    first = None
    for i, core in sim.nodes.items():
        if type(core) is not Stack or list(core.layers) != [LAYER] or type(core.layers[LAYER]) is not Cyclon:
            return f"node {i} is not a CYCLON node"
        rule = core.rule
        if rule.repair_layer is not None and not (type(rule) is InterestGossip and not rule.recent):
            return f"node {i}'s dissemination has events to repair"
        if i in sim.alive and not core.active:
            return f"node {i} has left"
        layer = core.layers[LAYER]
        config = (layer.config.view_size, layer.config.shuffle_length, layer.pending.timeout_s, layer.period,
                  layer.config.refill, layer.max_entries)
        if first is None:
            first = config
        elif config != first:
            return "the nodes' CYCLON configs differ"
    if any(name != LAYER for _, name in sim.timers):
        return "a timer other than CYCLON's is set"
    for _, _, kind, data in sim.queue:
        if kind == _MSG and (type(data[2]) is not Gossip or data[2].layer != LAYER or data[2].recent or data[3] is not None):
            return "a message other than a CYCLON shuffle is in flight"
    return None


class _Loop:
    """What both loops share: the calls scheduled while the engine runs, the link's and the
    nodes' random states, and the clocks (the interface: :class:`node.sim.accelerators.Accelerator`)."""

    engine: Any
    kind: str
    publishes = False

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.verified = verified_digest(self.kind)
        """The digest of the code this loop was verified against (``verified_digest``)."""
        self.calls: dict[int, tuple[Any, bool]] = {}
        self.rng_versions: dict[int, tuple[int, Any]] = {}
        self.handles = itertools.count()

    def publish(self, i: int, topic: str, payload: bytes) -> None:
        raise NotImplementedError("publications are run by the Python cores")


    def snapshot_table(self, nodes: list[int], t_ns: int, gossip_ns: int) -> pa.Table | None:
        """The snapshot's columns from the loop itself (None: the simulator builds them)."""
        return None

    def take_spans(self) -> None:
        """Move the spans the loop recorded into the simulation's (none by default)."""

    def link(self) -> tuple[dict[str, Any], list[int]]:
        """The link's options by name (``delay_ms`` with the constant base folded in,
        ``jitter_ms``, ``loss``, ``partitioned``) and its random state's words."""
        sim = self.sim
        rule = sim.links.rules[-1] if sim.links.rules else None
        base = sim.links.base.ms if sim.links.base is not None else 0.0
        self.link_version, words, self.link_gauss = sim.links.rng.getstate()
        link = {"delay_ms": (rule.delay_ms if rule else 0.0) + base, "jitter_ms": rule.jitter_ms if rule else 0.0,
                "loss": rule.loss if rule else 0.0, "partitioned": bool(rule and rule.partitioned)}
        return link, list(words)

    def rng_words(self, i: int) -> list[int]:
        version, words, gauss = self.sim.nodes[i].rng.getstate()
        self.rng_versions[i] = (version, gauss)
        return list(words)

    def rng(self, i: int, words: list[int]) -> random.Random:
        version, gauss = self.rng_versions[i]
        rng = random.Random(0)  # its state set next
        rng.setstate((version, tuple(words), gauss))
        return rng

    def put_call(self, at: float, seq: int, call: tuple[Any, bool]) -> None:
        handle = next(self.handles)
        self.calls[handle] = call
        self.engine.put_call(at, seq, handle)

    def call_at(self, at: float, fn, native_ok: bool) -> None:
        handle = next(self.handles)
        self.calls[handle] = (fn, native_ok)
        self.engine.call_at(at, handle)

    def set_timer(self, i: int, name: str, at: float | None) -> None:
        if at is None:
            self.sim.timers.pop((i, name), None)
        else:
            self.sim.timers[(i, name)] = at

    def give_back_clocks(self, queue: list[tuple]) -> None:
        sim, engine = self.sim, self.engine
        heapq.heapify(queue)
        sim.queue[:] = queue
        sim.links.rng.setstate((self.link_version, tuple(engine.link_rng()), self.link_gauss))
        sim.now, sim.steps, sim.seq, sim.frozen_s = engine.now, engine.steps, engine.seq, engine.frozen_s


def stop_in_loop(loop: _Loop, i: int, graceful: bool) -> bool:
    """``Simulation.stop_node`` in a loop: ``Stack.leave`` (verified to send nothing) on a
    graceful leave, then the node stops."""
    if graceful:
        sent = loop.sim.nodes[i].leave(loop.sim.now)
        assert not sent, "Stack.leave sent something: the loop was verified against one that does not"
    loop.engine.stop_node(i)
    return True


class NativeCyclon(_Loop):
    """A simulation's CYCLON overlay in the compiled loop: ``take`` it from the Python objects,
    run it (``engine``), ``give_back``."""

    kind = "cyclon"

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self.templates: dict[tuple, int] = {}
        """Template number by profile (id, address, topics, priorities)."""
        self.descriptors: list[Descriptor] = []
        """The templates: each profile at age 0."""
        self.handed_templates = 0
        """How many of them the engine holds."""

    def tpl(self, d: Descriptor) -> int:
        key = (d.node_id, d.addr, d.topics, d.priorities)
        t = self.templates.get(key)
        if t is None:
            t = self.templates[key] = len(self.descriptors)
            self.descriptors.append(d.aged(0))
        return t

    def entries(self, ds) -> list[tuple[int, int]]:
        return [(self.tpl(d), d.age) for d in ds]

    def take(self) -> None:
        """Move the simulation's state into a new engine. The Python cores keep their
        configs and profiles; their views, reserves, pending replies and generators are
        emptied (the engine holds them now) so that a large run does not hold both."""
        sim = self.sim
        nodes = sorted(sim.nodes)
        some = sim.nodes[nodes[0]].layers[LAYER]
        link, words = self.link()
        options = {"view_size": some.config.view_size, "shuffle_length": some.config.shuffle_length,
                   "timeout_s": some.pending.timeout_s, "period_s": some.period, "refill": some.config.refill,
                   "layer_bytes": codec.layer_bytes(LAYER)}
        engine = self.engine = overlaylab_native.Engine(max(nodes) + 1, options, link, words)
        for i in nodes:
            core = sim.nodes[i]
            layer = core.layers[LAYER]
            cyclon = layer.export_state()
            assert isinstance(cyclon, CyclonState)
            state = (self.tpl(core.me), i in sim.alive, self.entries(cyclon.view.values()),
                     self.entries(cyclon.reserve.values()),
                     [(p, due, list(kept)) for p, kept, due in cyclon.pending], cyclon.late,
                     self.rng_words(i), sim.timers.get((i, LAYER)))
            self.add_templates()
            engine.add_node(i, *state)
            layer.import_state(CyclonState())
            core.rng = None
        for at, seq, kind, data in sim.queue:
            if kind == _TIMER:
                engine.put_timer(at, seq, data[0])
            elif kind == _MSG:
                src, dst, msg, _ = data
                entry = (src, dst, msg.reply, self.tpl(msg.sender), self.entries(msg.entries))
                self.add_templates()
                engine.put_msg(at, seq, *entry)
            else:
                self.put_call(at, seq, data)
        sim.queue.clear()
        engine.set_clock(sim.now, sim.steps, sim.seq, sim.frozen_s)

    def add_templates(self) -> None:
        """Hand the engine the templates made since the last call."""
        new = self.descriptors[self.handed_templates:]
        if new:
            self.engine.add_templates([d.node_id for d in new], [codec.profile_size(d) for d in new])
            self.handed_templates = len(self.descriptors)

    def start_node(self, i: int, contacts) -> bool:
        """``Simulation.start_node`` in the loop (``Stack.start``): a first join or a rejoin
        with ``resume``."""
        templates = [self.tpl(d) for d in contacts]
        self.add_templates()
        self.engine.start_node(i, templates)
        self.sim.nodes[i].active = True
        return True

    def stop_node(self, i: int, graceful: bool) -> bool:
        return stop_in_loop(self, i, graceful)

    def snapshot(self, i: int) -> NodeSnapshot:
        core = self.sim.nodes[i]
        return NodeSnapshot(i, sorted(core.me.topics), [LayerSnapshot(LAYER, self.engine.view_ids(i))])

    def give_back(self) -> None:
        """Write every state back into the simulation's Python objects."""
        sim, engine, desc = self.sim, self.engine, self.descriptors
        for i, core in sim.nodes.items():
            view, reserve, pending, late, words, timer, counts = engine.take_node(i)
            core.layers[LAYER].import_state(CyclonState(
                {desc[t].node_id: desc[t].aged(age) for t, age in view}, [(p, tuple(kept), due) for p, due, kept in pending],
                late, {desc[t].node_id: desc[t].aged(age) for t, age in reserve}))
            core.rng = self.rng(i, words)
            stats: Counter = sim.stats[i]
            for key, n in counts:
                stats[_COUNTERS[key]] += n
            self.set_timer(i, LAYER, timer)
        queue = []
        for at, seq, kind, data in engine.queue():
            if kind == _TIMER:
                data = (data, LAYER)
            elif kind == _MSG:
                src, dst, reply, sender, entries = data
                data = (src, dst, Gossip(LAYER, desc[sender], tuple(desc[t].aged(age) for t, age in entries), reply), None)
            else:
                data = self.calls[data]
            queue.append((at, seq, kind, data))
        self.give_back_clocks(queue)


def _unsupported_poldercast(sim: Simulation) -> str | None:
    first = None
    nodes = sim.nodes
    foreign = _foreign_profiles(nodes)
    for i, core in nodes.items():
        layers = core.layers
        if type(core) is not Stack or core.view_order != list(POLDERCAST_LAYERS) or type(core.rule) is not RingCast \
                or [type(layers[name]) for name in POLDERCAST_LAYERS] != [Cyclon, Vicinity, Rings]:
            return f"node {i} is not a PolderCast node"
        if i in sim.alive and not core.active:
            return f"node {i} has left"
        cyclon, vicinity, rings = (layers[name] for name in POLDERCAST_LAYERS)
        if list(rings.succ) != list(rings.pred):
            return f"node {i}'s RINGS sides list their topics in different orders"
        config = (cyclon.config.view_size, cyclon.config.shuffle_length, cyclon.pending.timeout_s, cyclon.period,
                  cyclon.config.refill, cyclon.max_entries, vicinity.view_size, vicinity.gossip_size,
                  vicinity.max_entries, vicinity.period, vicinity.pending.timeout_s, vicinity.priority_mode,
                  vicinity.sampling, rings.ring_size, rings.gossip_size, rings.max_entries, rings.period,
                  rings.pending.timeout_s, rings.removal, rings.overlay, rings.sampling, rings.selection,
                  core.config.fanout, core.config.shortcut_source, core.config.ring_failover, core.seen.capacity)
        if first is None:
            first = config
        elif config != first:
            return "the nodes' PolderCast configs differ"
        if list(layers) != [LAYER, RINGS, VICINITY]:
            return f"node {i}'s layers draw their first ticks in another order than PolderCast's"
        if (vicinity.sampling, rings.overlay, rings.sampling) != (LAYER, VICINITY, LAYER):
            return "the layers take partners from other layers than PolderCast's"
        for d in (*cyclon.view.values(), *cyclon.reserve.values(), *vicinity.view.values(), *rings.view.values()):
            if (reason := foreign(d)) is not None:
                return reason
    if any(name not in POLDERCAST_LAYERS for _, name in sim.timers):
        return "a timer other than the PolderCast layers' is set"
    for _, _, kind, data in sim.queue:
        if kind != _MSG:
            continue
        msg = data[2]
        if type(msg) is not Gossip or msg.layer not in POLDERCAST_LAYERS or msg.recent or data[3] is not None:
            return "a message other than a PolderCast layer's exchange is in flight"
        for d in (msg.sender, *msg.entries):
            if (reason := foreign(d)) is not None:
                return reason
    return None


def _foreign_profiles(nodes: dict[int, Stack]) -> Callable[[Descriptor], str | None]:
    """Why the PolderCast loop cannot hold a descriptor (it holds a node's topics and address
    once, and profiles as their priorities); each profile checked once (copies share parts)."""
    checked: set[tuple[int, int, int]] = set()
    keep: list[Descriptor] = []  # the checked parts stay alive, so their ids are not reused

    def foreign(d: Descriptor) -> str | None:
        key = (d.node_id, id(d.topics), id(d.priorities))
        if key in checked:
            return None
        core = nodes.get(d.node_id)
        if core is None:
            return f"a descriptor names node {d.node_id}, which the simulation does not hold"
        me = core.me
        if d.addr != me.addr or (d.topics is not me.topics and d.topics != me.topics):
            return f"a descriptor of node {d.node_id} carries other topics than the node's own"
        if any(t not in me.topics for t, _ in d.priorities):
            return f"a descriptor of node {d.node_id} gives a priority to a topic the node does not subscribe"
        checked.add(key)
        keep.append(d)
        return None

    return foreign


class NativePolderCast(_Loop):
    kind = "poldercast"
    publishes = True
    """A simulation's PolderCast overlay in the compiled loop: ``take`` it from the Python
    objects, run it (``engine``), ``give_back``. Topics are numbered, the most subscribed first;
    profiles are handed over as their priorities, numbered."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self.topics: list = []
        self.handed: dict[tuple[int, int], tuple[int, Any]] = {}
        """Profile number by (node, id of its priorities), holding the priorities."""
        self.foreign = _foreign_profiles(sim.nodes)
        """Why the loop cannot hold a descriptor (a joining node's contacts are checked)."""
        self.events: list[EventMsg | None] = []
        """By event number: the event published in the loop (None: one handed in, in a
        duplicate filter); ``event_ids`` holds every id."""
        self.event_ids: list[str] = []

    def profile(self, d: Descriptor) -> int:
        key = (d.node_id, id(d.priorities))
        hit = self.handed.get(key)
        if hit is None:
            number = self.number
            hit = self.handed[key] = (self.engine.add_profile(d.node_id, [(number[t], p) for t, p in d.priorities]),
                                       d.priorities)
        return hit[0]

    def entries(self, ds) -> list[tuple[int, int]]:
        return [(self.profile(d), d.age) for d in ds]

    def take(self) -> None:
        """Move the simulation's state into a new engine. The Python cores keep their configs
        and profiles; their views, ring slots, pending replies and generators are emptied (the
        engine holds them now) so that a large run does not hold both."""
        sim = self.sim
        nodes = sorted(sim.nodes)
        some = sim.nodes[nodes[0]]
        cyclon, vicinity, rings = layers = tuple(some.layers[name] for name in POLDERCAST_LAYERS)
        # topics numbered the most subscribed first (the loop's bitset tests stay in few words)
        subscribers = Counter(t for core in sim.nodes.values() for t in core.me.topics)
        self.topics = sorted(subscribers, key=lambda t: (-subscribers[t], t))
        number = self.number = {t: k for k, t in enumerate(self.topics)}
        by_name = {t: k for k, t in enumerate(sorted(subscribers))}
        link, words = self.link()
        options = {
            "cyclon.view_size": cyclon.config.view_size, "cyclon.shuffle_length": cyclon.config.shuffle_length,
            "cyclon.refill": cyclon.config.refill, "vicinity_view": vicinity.view_size,
            "vicinity_gossip": vicinity.gossip_size, "ring_size": rings.ring_size, "ring_gossip": rings.gossip_size,
            "periods_s": [layer.period for layer in layers], "timeouts_s": [layer.pending.timeout_s for layer in layers],
            "layer_bytes": [codec.layer_bytes(name) for name in POLDERCAST_LAYERS],
            "priority_mode": vicinity.priority_mode, "ring_removal": rings.removal, "ring_selection": rings.selection,
            "fanout": some.config.fanout, "shortcut_layers": list(SHORTCUT_LAYERS[some.config.shortcut_source]),
            "seen_capacity": some.seen.capacity, "ring_failover": some.config.ring_failover}
        engine = self.engine = overlaylab_native.PolderEngine(
            max(nodes) + 1, len(self.topics), options, link, words, [codec.priority_topic_bytes(t) for t in self.topics],
            [by_name[t] for t in self.topics])
        states = {i: sim.nodes[i].export_state() for i in nodes}
        seen: dict[str, int] = {}
        for state in states.values():
            seen.update((e, len(seen)) for e in state.seen if e not in seen)
        self.event_ids = list(seen)
        self.events = [None] * len(seen)
        engine.add_events([0] * len(seen))  # their topics are never read: none is in flight
        for i in nodes:
            me = sim.nodes[i].me
            engine.set_topics(i, sorted(number[t] for t in me.topics), rings.ids[i],
                              codec.profile_size(Descriptor(i, me.addr, me.topics)))
        for i in nodes:
            core, state = sim.nodes[i], states[i]
            cyclon, vicinity, rings = (state.layers[name] for name in POLDERCAST_LAYERS)
            assert isinstance(cyclon, CyclonState) and isinstance(rings, RingsState)
            mine = state.me.topics
            engine.add_node(
                i, self.profile(state.me), i in sim.alive, self.rng_words(i),
                [sim.timers.get((i, name)) for name in POLDERCAST_LAYERS], [cyclon.late, vicinity.late, rings.late],
                (self.entries(cyclon.view.values()), self.entries(cyclon.reserve.values()),
                 [(p, due, list(kept)) for p, kept, due in cyclon.pending]),
                (self.entries(vicinity.view.values()), [(p, due) for p, _, due in vicinity.pending]),
                (self.entries(rings.view.values()),
                 [(number[t], succ, rings.pred[t]) for t, succ in rings.succ.items()],
                 [number[t] for t in rings.holes if t in mine], [(number[t], p) for t, p in rings.prio.items()],
                 list(rings.considered), [(p, due, bool(kept)) for p, kept, due in rings.pending]),
                ([seen[e] for e in state.seen], state.published))
            core.import_state(StackState(state.me, [], state.published,
                                         {LAYER: CyclonState(), VICINITY: LayerState(), RINGS: RingsState()}))
            core.rng = None
        for at, seq, kind, data in sim.queue:
            if kind == _TIMER:
                engine.put_timer(at, seq, data[0], POLDERCAST_LAYERS.index(data[1]))
            elif kind == _MSG:
                src, dst, msg, _ = data
                engine.put_msg(at, seq, src, dst, POLDERCAST_LAYERS.index(msg.layer), msg.reply,
                               (self.profile(msg.sender), msg.sender.age), self.entries(msg.entries))
            else:
                self.put_call(at, seq, data)
        sim.queue.clear()
        self.handed.clear()
        engine.forget_handed_in()
        engine.set_clock(sim.now, sim.steps, sim.seq, sim.frozen_s, sim.span_seq)

    def publish(self, i: int, topic: str, payload: bytes) -> None:
        """``Simulation.publish`` on an alive node, in the loop."""
        core = self.sim.nodes[i]
        core.rule.check_publish(topic)  # the loop's profiles are the cores' (topics never change)
        number, published = self.engine.publish(i, self.number[topic])
        event_id = f"{i}-{core.incarnation}-{published}"
        assert number == len(self.events)
        self.events.append(EventMsg(event_id, topic, payload, i, 0))
        self.event_ids.append(event_id)

    def start_node(self, i: int, contacts) -> bool:
        """``Simulation.start_node`` in the loop (``Stack.start``): a first join or a rejoin
        with ``resume``; False (the run is handed back) where a contact's descriptor is not one
        the loop can hold."""
        for d in contacts:
            if self.foreign(d) is not None:
                return False
        number = self.number
        self.engine.start_node(i, [(d.node_id, [(number[t], p) for t, p in d.priorities]) for d in contacts])
        self.sim.nodes[i].active = True
        return True

    def stop_node(self, i: int, graceful: bool) -> bool:
        return stop_in_loop(self, i, graceful)

    def take_spans(self) -> None:
        """The span records of the loop's events, into the simulation's spans."""
        sim, events = self.sim, self.events
        add = sim.spans.add
        for seq, parent, publish, at, node, src, number, hops, first, subscriber in self.engine.take_spans():
            e = events[number]
            assert e is not None
            add(sim.trace_id(e.event_id), f"{seq:016x}", f"{parent:016x}" if parent else None,
                "publish" if publish else "receive", round(at * 1e9), node, src - 1 if src else None,
                e.event_id, e.topic, hops, first, subscriber)
        sim.span_seq = self.engine.span_seq

    def snapshot_table(self, nodes: list[int], t_ns: int, gossip_ns: int) -> pa.Table:
        """The snapshot rows of ``nodes``, in columns built by the loop."""
        return columns_table([*POLDERCAST_LAYERS, f"{RINGS}.succ", f"{RINGS}.pred"], self.topics,
                             self.engine.snapshot_columns(nodes), t_ns, gossip_ns)

    def snapshot(self, i: int) -> NodeSnapshot:
        core, topics = self.sim.nodes[i], self.topics
        cyclon, vicinity, rings, succ, pred = self.engine.snapshot(i)
        return NodeSnapshot(i, sorted(core.me.topics), [
            LayerSnapshot(LAYER, cyclon), LayerSnapshot(VICINITY, vicinity), LayerSnapshot(RINGS, rings),
            LayerSnapshot(f"{RINGS}.succ", [], {topics[t]: ids for t, ids in succ}),
            LayerSnapshot(f"{RINGS}.pred", [], {topics[t]: ids for t, ids in pred})])

    def give_back(self) -> None:
        """Write every state back into the simulation's Python objects."""
        self.take_spans()
        sim, engine, topics = self.sim, self.engine, self.topics
        profiles: list[Descriptor] = []
        parts = {i: (core.me.addr, core.me.topics) for i, core in sim.nodes.items()}

        def described(h: int, age: int) -> Descriptor:
            if h >= len(profiles):  # profiles the engine named since the last look
                for node, prio in engine.profiles(len(profiles)):
                    addr, mine = parts[node]
                    profiles.append(Descriptor(node, addr, mine, 0, tuple((topics[t], p) for t, p in prio)))
            return profiles[h].aged(age)

        def view(entries: list[tuple[int, int]]) -> dict:
            return {(d := described(h, age)).node_id: d for h, age in entries}

        for i, core in sim.nodes.items():
            me, words, timers, late, cyclon_state, vicinity_state, rings_state, (seen, published), counts = \
                engine.take_node(i)
            ring_view, slots, holes, prio, considered, pending = rings_state
            core.import_state(StackState(described(me, 0), [self.event_ids[e] for e in seen], published, {
                LAYER: CyclonState(view(cyclon_state[0]), [(p, tuple(kept), due) for p, due, kept in cyclon_state[2]],
                                   late[0], view(cyclon_state[1])),
                VICINITY: LayerState(view(vicinity_state[0]), [(p, (), due) for p, due in vicinity_state[1]], late[1]),
                RINGS: RingsState(view(ring_view), [(p, kept, due) for p, due, kept in pending], late[2],
                                  {topics[t]: succ for t, succ, _ in slots}, {topics[t]: pred for t, _, pred in slots},
                                  {topics[t] for t in holes}, {topics[t]: p for t, p in prio},
                                  {x: parts[x][1] for x in considered})}))
            for name, at in zip(POLDERCAST_LAYERS, timers, strict=True):
                self.set_timer(i, name, at)
            core.rng = self.rng(i, words)
            stats: Counter = sim.stats[i]
            for key, n in counts:
                stats[_POLDERCAST_COUNTERS[key]] += n
        queue = []
        for at, seq, kind, data in engine.queue():
            if kind == _TIMER:
                data = (data[0], POLDERCAST_LAYERS[data[1]])
            elif kind == _MSG and data[2] == len(POLDERCAST_LAYERS):  # an event copy
                src, dst, _, number, hops, span = data
                e = self.events[number]
                assert e is not None
                copy = EventMsg(e.event_id, e.topic, e.payload, e.publisher, hops)
                data = (src, dst, copy, f"{span:016x}" if span else None)
            elif kind == _MSG:
                src, dst, layer, reply, sender, entries = data
                msg = Gossip(POLDERCAST_LAYERS[layer], described(*sender),
                             tuple(described(h, age) for h, age in entries), reply)
                data = (src, dst, msg, None)
            else:
                data = self.calls[data]
            queue.append((at, seq, kind, data))
        self.give_back_clocks(queue)
