"""The simulator's compiled CYCLON loop: a whole overlay of CYCLON nodes run in Rust
(``node/sim/native/``, built by ``make setup`` where cargo is present), byte-identical to the
Python cores it stands in for.

The simulator hands a run over to it at its first ``run_until`` when every node is a CYCLON
node and nothing else is going on: each node a :class:`~node.core.stack.Stack` of the
:class:`~node.core.cyclon.Cyclon` layer alone, under a rule with no event to repair (the gossip
before its first publication), and the link one rule for every destination with a constant
base delay, no bandwidth and no partition, ``sim.wire_codec`` and ``sim.check_invariants``
off. It runs there (timers, shuffles, link delays and losses, counters, settled snapshots)
until something else is asked of the simulation: a scheduled call not marked ``native_ok``
(a publication, a join, a crash, a partition) or a direct call on the simulator; then every
node's state, the queue, the clocks and the random states are written back into the Python
objects, and the run carries on in Python as if it had run there all along. The hand-over is
one way. ``Stack.now``, the time of a core's last call, is not written back (every call sets
it before use).

The Python cores are the reference: tests/unit/test_native.py runs experiments both ways on
the same seeds and compares every output file byte for byte.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from typing import TYPE_CHECKING, Any

from node.core.cyclon import LAYER, Cyclon
from node.core.gossip import InterestGossip
from node.core.stack import Stack
from node.core.types import Descriptor, Gossip, LayerSnapshot, NodeSnapshot
from node.interpret import DROPPED_BY_LINK, LOST_TO_DEAD_PEER, sent_keys
from node.links import FixedDelay
from node.transport import codec

try:
    import overlaylab_native
except ImportError:  # not built (no cargo): the Python loop runs everything
    overlaylab_native = None

if TYPE_CHECKING:
    from .engine import Simulation

_TIMER, _MSG, _CALL = 0, 1, 2
_COUNTERS = (*sent_keys(LAYER), DROPPED_BY_LINK, LOST_TO_DEAD_PEER)
"""The counters the compiled loop keeps, by the numbers it gives them."""


def available() -> bool:
    return overlaylab_native is not None


def unsupported(sim: Simulation) -> str | None:
    """Why the compiled loop cannot take ``sim`` over now, or None when it can."""
    if overlaylab_native is None:
        return "the compiled extension is not built (make setup builds it where cargo is present)"
    if not sim.nodes:
        return "the simulation has no node"
    if sim.wire_codec:
        return "sim.wire_codec is on"
    if sim.validate:
        return "sim.check_invariants is on"
    links = sim.links
    if links.partitions or links.bandwidth_kbps or any(rule.nodes for rule in links.rules):
        return "the link model has a partition, a bandwidth or a per-node rule"
    if links.base is not None and not isinstance(links.base, FixedDelay):
        return "link delays vary per link"
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
    if any(name != LAYER for _, name in sim._timers):
        return "a timer other than CYCLON's is set"
    for _, _, kind, data in sim._queue:
        if kind == _MSG and (type(data[2]) is not Gossip or data[2].layer != LAYER or data[2].recent or data[3] is not None):
            return "a message other than a CYCLON shuffle is in flight"
    return None


class NativeCyclon:
    """A simulation's CYCLON overlay in the compiled loop: ``take`` it from the Python objects,
    run it (``engine``), ``give_back``."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.calls: dict[int, tuple[Any, bool]] = {}
        self._templates: dict[tuple, int] = {}
        """Template number by profile (id, address, topics, priorities)."""
        self._descriptors: list[Descriptor] = []
        """The templates: each profile at age 0."""
        self._rng_versions: dict[int, tuple[int, Any]] = {}
        self._handles = itertools.count()

    def _tpl(self, d: Descriptor) -> int:
        key = (d.node_id, d.addr, d.topics, d.priorities)
        t = self._templates.get(key)
        if t is None:
            t = self._templates[key] = len(self._descriptors)
            self._descriptors.append(d.aged(0))
        return t

    def _entries(self, ds) -> list[tuple[int, int]]:
        return [(self._tpl(d), d.age) for d in ds]

    def take(self) -> None:
        """Move the simulation's state into a new engine. The Python cores keep their
        configs and profiles; their views, reserves, pending replies and generators are
        emptied (the engine holds them now) so that a large run does not hold both."""
        sim = self.sim
        nodes = sorted(sim.nodes)
        some = sim.nodes[nodes[0]].layers[LAYER]
        rule = sim.links.rules[-1] if sim.links.rules else None
        base = sim.links.base.ms if sim.links.base is not None else 0.0
        version, words, self._link_gauss = sim.links.rng.getstate()
        self._link_version = version
        engine = self.engine = overlaylab_native.Engine(
            max(nodes) + 1, some.config.view_size, some.config.shuffle_length, some.pending.timeout_s, some.period,
            some.config.refill, codec.layer_bytes(LAYER), (rule.delay_ms if rule else 0.0) + base,
            rule.jitter_ms if rule else 0.0, rule.loss if rule else 0.0, bool(rule and rule.partitioned), list(words))
        sent = 0  # templates handed to the engine so far
        for i in nodes:
            core = sim.nodes[i]
            layer = core.layers[LAYER]
            version, words, gauss = core.rng.getstate()
            self._rng_versions[i] = (version, gauss)
            state = (self._tpl(core.me), i in sim.alive, self._entries(layer.view.values()),
                     self._entries(layer.reserve.values()),
                     [(p, due, list(kept)) for p, (kept, due) in layer.pending._due.items()],
                     layer.pending.late, list(words), sim._timers.get((i, LAYER)))
            sent = self._add_templates(sent)
            engine.add_node(i, *state)
            layer.view, layer.reserve, layer.pending._due, core.rng = {}, {}, {}, None
        for at, seq, kind, data in sim._queue:
            if kind == _TIMER:
                engine.put_timer(at, seq, data[0])
            elif kind == _MSG:
                src, dst, msg, _ = data
                entry = (src, dst, msg.reply, self._tpl(msg.sender), self._entries(msg.entries))
                sent = self._add_templates(sent)
                engine.put_msg(at, seq, *entry)
            else:
                handle = next(self._handles)
                self.calls[handle] = data
                engine.put_call(at, seq, handle)
        sim._queue.clear()
        engine.set_clock(sim.now, sim.steps, sim._seq, sim.frozen_s)

    def _add_templates(self, sent: int) -> int:
        new = self._descriptors[sent:]
        if new:
            self.engine.add_templates([d.node_id for d in new], [codec.profile_size(d) for d in new])
        return len(self._descriptors)

    def call_at(self, at: float, fn, native_ok: bool) -> None:
        handle = next(self._handles)
        self.calls[handle] = (fn, native_ok)
        self.engine.call_at(at, handle)

    def snapshot(self, i: int) -> NodeSnapshot:
        core = self.sim.nodes[i]
        return NodeSnapshot(i, sorted(core.me.topics), [LayerSnapshot(LAYER, self.engine.view_ids(i))])

    def give_back(self) -> None:
        """Write every state back into the simulation's Python objects."""
        sim, engine, desc = self.sim, self.engine, self._descriptors
        for i, core in sim.nodes.items():
            view, reserve, pending, late, words, timer, counts = engine.take_node(i)
            layer = core.layers[LAYER]
            layer.view = {desc[t].node_id: desc[t].aged(age) for t, age in view}
            layer.reserve = {desc[t].node_id: desc[t].aged(age) for t, age in reserve}
            layer.pending._due = {p: (tuple(kept), due) for p, due, kept in pending}
            layer.pending.late = late
            version, gauss = self._rng_versions[i]
            core.rng = random.Random(0)  # its state set next
            core.rng.setstate((version, tuple(words), gauss))
            stats: Counter = sim.stats[i]
            for key, n in counts:
                stats[_COUNTERS[key]] += n
            if timer is None:
                sim._timers.pop((i, LAYER), None)
            else:
                sim._timers[(i, LAYER)] = timer
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
        heapq.heapify(queue)
        sim._queue[:] = queue
        sim.links.rng.setstate((self._link_version, tuple(engine.link_rng()), self._link_gauss))
        sim.now, sim.steps, sim._seq, sim.frozen_s = engine.now, engine.steps, engine.seq, engine.frozen_s
