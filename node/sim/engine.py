"""The discrete-event simulator: real protocol cores over a seeded, virtual-time network.

One heap of (time, seq, kind, data) entries; ``seq`` makes the order total, so a run is a pure
function of its seed. Messages go through the same link rules as the gRPC shell
(:mod:`node.kit.links`) and, with ``wire_codec`` on, through the real protobuf codec, which catches
codec drift and gives true byte counts. Every publish and every received copy becomes a span
record with the fields of the OTLP spans that local peers write (ARCHITECTURE.md, "Traces").
"""

from __future__ import annotations

import gc
import hashlib
import heapq
import logging
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pyarrow as pa

from node.kit.interpret import DROPPED_BY_LINK, LOST_TO_DEAD_PEER, MALFORMED, EventSpans, SpanRecord, count_sent, event_spans, interpret
from node.kit.links import LinkModel, LinkRule
from node.kit.stack import Stack
from node.kit.types import Action, Descriptor, EventMsg, NodeSnapshot, RemoteProtocolError, Send
from node.sim.accelerators import STALE, Accelerator, NoAccelerator, accelerator_for
from node.wire import codec
from node.wire.snapshots import snapshot_table

log = logging.getLogger("overlaylab.sim")

_TIMER, _MSG, _CALL = 0, 1, 2
NATIVE_QUIET_S = 2.0
"""Virtual seconds without a call that needs the Python cores for a compiled loop to take a run
over again (``Simulation._try_native``)."""


def _nothing() -> None:
    pass

SPAN_FIELDS = (
    "trace_id", "span_id", "parent_span_id", "name", "time_ns", "node", "from_node",
    "event_id", "topic", "hops", "first_copy", "subscriber",
)


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while objects are made in bulk (a network's cores, the
    hand-overs of the compiled loop): each full collection would walk every object made so far,
    about a fifth of a 10,000-node CYCLON run's time. Reference counting still frees."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class SpanColumns:
    """Span records in columns; ``flush`` hands full chunks to ``sink`` to bound memory."""

    def __init__(self, sink: Callable[[dict[str, list]], None] | None = None, chunk: int = 500_000):
        self.sink = sink
        self.chunk = chunk
        self.count = 0
        self._reset()

    def add(self, *values) -> None:
        for column, v in zip(self._lists, values):
            column.append(v)
        self.count += 1
        if self.sink is not None and len(self._lists[0]) >= self.chunk:
            self.flush()

    def flush(self) -> None:
        if self.sink is not None and self._lists[0]:
            self.sink(self.columns)
            self._reset()

    def _reset(self) -> None:
        self.columns = {f: [] for f in SPAN_FIELDS}
        self._lists = list(self.columns.values())


class Simulation:
    def __init__(
        self,
        *,
        seed: int,
        link_rules: Sequence[LinkRule] = (),
        links: LinkModel | None = None,
        wire_codec: bool = True,
        spans: SpanColumns | None = None,
        validate: bool = False,
        engine: str = "python",
        unverified_ok: bool = False,
        failure_detection: str = "oracle",
    ) -> None:
        self.now = 0.0
        self.nodes: dict[int, Stack] = {}
        self.alive: set[int] = set()
        self.links = links if links is not None else LinkModel(list(link_rules), random.Random(f"{seed}:links"))
        self.wire_codec = wire_codec
        self.spans = spans if spans is not None else SpanColumns()
        self.validate = validate
        self.stats: dict[int, Counter] = {}
        self.shared: dict = {}
        """Handed to every core this simulation builds (``create_protocol``'s ``shared``)."""
        self._seed = seed
        self.queue: list[tuple] = []
        self.seq = 0
        self.timers: dict[tuple[int, str], float] = {}
        self.span_seq = 0
        self._trace_ids: dict[str, str] = {}
        self._event_spans: dict[int, EventSpans] = {}
        self.steps = 0
        self.frozen_s = 0.0
        """Virtual time spent frozen (run_frozen); everything scheduled later moved by it."""
        if engine not in ("python", "auto", "native"):
            raise ValueError(f"engine must be python, auto or native, not {engine!r}")
        self.engine_mode = engine
        """A compiled loop (CYCLON or PolderCast, :mod:`node.sim.native`) takes the run over at its
        start: ``auto`` where it can, ``native`` the same but an error where it cannot; ``python``
        never."""
        self.unverified_ok = unverified_ok
        if failure_detection not in ("oracle", "heartbeat"):
            raise ValueError(f"failure_detection must be oracle or heartbeat, not {failure_detection!r}")
        self.failure_detection = failure_detection
        """``oracle``: a send to a dead peer goes back to the sender's ``on_send_failed``;
        ``heartbeat``: it is lost silently (only the protocol's own probes can tell)."""
        """A compiled loop may run whatever Python code it was verified against (the divergence
        check's own run: what it checks is whether the loop still matches)."""
        self.native_steps = 0
        """Steps the compiled loop ran."""
        self.native_takes = 0
        """How often a compiled loop took the run over (each after a hand-back but the first)."""
        self.native_loops: dict[str, str] = {}
        """The compiled loops that ran, each with the digest of the code it was verified against."""
        self.native_stale: str | None = None
        """Why a compiled loop that could have run did not: Python code it mirrors changed since
        it was verified (said once, as a warning; run.json records it)."""
        self._native: Accelerator | None = None
        self._native_tried = False
        self._native_retry_at = 0.0

    # --- set-up and scheduling --------------------------------------------------------------

    def add_node(self, core: Stack) -> None:
        self.sync()
        self.nodes[core.node_id] = core
        self.stats[core.node_id] = Counter()

    def start_node(self, node_id: int, contacts: Sequence[Descriptor]) -> None:
        """Start a node; ``contacts`` is handed over as it is (nodes may share one list)."""
        if self._native is not None and node_id not in self.alive and self._native.start_node(node_id, contacts):
            self.alive.add(node_id)
            return
        self.sync()
        self.alive.add(node_id)
        self._execute(node_id, self.nodes[node_id].start(self.now, contacts), None)

    def replace_node(self, core: Stack) -> None:
        """Put a fresh core in place of a (stopped) node's old one; its counters carry on."""
        self.sync()
        self.nodes[core.node_id] = core

    def stop_node(self, node_id: int, graceful: bool = False) -> None:
        """Crash (or, graceful, leave): the node stops; messages to it are lost from now on."""
        if self._native is not None and self._native.stop_node(node_id, graceful and node_id in self.alive):
            self.alive.discard(node_id)
            return
        self.sync()
        if graceful and node_id in self.alive:
            self._execute(node_id, self.nodes[node_id].leave(self.now), None)
        self.alive.discard(node_id)
        for key in [k for k in self.timers if k[0] == node_id]:
            del self.timers[key]

    def publish(self, node_id: int, topic: str, payload: bytes) -> None:
        if self._native is not None and self._native.publishes:
            if node_id in self.alive:
                self._native.publish(node_id, topic, payload)
            return
        self.sync()
        if node_id in self.alive:
            self._execute(node_id, self.nodes[node_id].publish(topic, payload, self.now), None)

    def call_at(self, at: float, fn: Callable[[], None], native_ok: bool = False) -> None:
        """Call ``fn`` at ``at``. ``native_ok``: it acts only through this simulator's methods
        (never on a core or the link model directly); each of them hands a run in a compiled
        loop back to the Python cores where it must, so the loop may carry on after it."""
        if self._native is not None:
            self._native.call_at(at, fn, native_ok)
        else:
            self._push(at, _CALL, (fn, native_ok))

    def run_until(self, t_end: float, max_steps: int = 10**9) -> None:
        """Process every entry due before ``t_end``; fail loudly past ``max_steps``."""
        if not self._native_tried:
            self._try_native()
        while True:
            while self._native is not None:
                handle = self._native.engine.run_until(t_end, max_steps)
                self._follow_native()
                if handle is None:
                    return
                fn, native_ok = self._native.calls.pop(handle)
                if not native_ok:
                    self.sync()
                fn()
                if self._native is None:
                    self._try_native(again=True)
            if not self._run_python_until(t_end, max_steps):
                return

    def _run_python_until(self, t_end: float, max_steps: int) -> bool:
        """``run_until`` in the Python cores; True where a compiled loop took the run over on
        the way (after a scheduled call)."""
        q = self.queue
        while q and q[0][0] <= t_end:
            if self.steps >= max_steps:
                raise RuntimeError(f"simulation exceeded {max_steps} steps at t={self.now:.3f}s")
            self.steps += 1
            at, _, kind, data = heapq.heappop(q)
            self.now = at
            if kind == _MSG:
                self._deliver(*data)
            elif kind == _TIMER:
                node_id, name = data
                if self.timers.get((node_id, name)) == at and node_id in self.alive:
                    del self.timers[(node_id, name)]
                    self._execute(node_id, self.nodes[node_id].on_timer(name, at), None)
                    if self.validate:
                        self.nodes[node_id].validate()
            else:
                data[0]()
                if self.engine_mode != "python" and self.now >= self._native_retry_at:
                    self._try_native(again=True)
                    if self._native is not None:
                        return True
        self.now = max(self.now, t_end)
        return False

    def run_frozen(self, fn: Callable[[], None], max_steps: int = 10**9) -> None:
        """Call ``fn`` (say, publish a round of events) on a frozen overlay: every timer and
        scheduled call is held back while the messages in flight, and those they cause, are
        delivered to completion; then virtual time has moved on and the held entries resume,
        shifted by the frozen time, so no gossip cycle is lost or squeezed."""
        if self._native is not None:
            fn()  # publications go into the compiled loop (or hand the run back first)
            if self._native is not None:
                self._native.engine.settle()
                self._follow_native()
                return
            fn = _nothing  # called already: what it sent is in the queue, and only messages
        held = [e for e in self.queue if e[2] != _MSG]
        # In place: run_until may be iterating this very list (fn runs from a scheduled call).
        self.queue[:] = [e for e in self.queue if e[2] == _MSG]
        heapq.heapify(self.queue)
        start = self.now
        fn()
        while self.queue:
            if self.steps >= max_steps:
                raise RuntimeError(f"frozen dissemination exceeded {max_steps} steps")
            self.steps += 1
            at, _, kind, data = heapq.heappop(self.queue)
            self.now = at
            self._deliver(*data)
        shift = self.now - start
        self.frozen_s += shift
        for at, seq, kind, data in held:
            if kind == _TIMER and self.timers.get(data) == at:
                self.timers[data] = at + shift
            heapq.heappush(self.queue, (at + shift, seq, kind, data))

    def settle(self) -> None:
        """``run_frozen`` with nothing to call: the exchanges in flight finish, timers held."""
        if self._native is None:
            self.run_frozen(lambda: None)
            return
        self._native.engine.settle()
        self._follow_native()

    def snapshot(self, node_id: int) -> NodeSnapshot:
        """Node ``node_id``'s views now."""
        if self._native is not None:
            return self._native.snapshot(node_id)
        return self.nodes[node_id].snapshot()

    def snapshot_table(self, nodes: list[int], t_ns: int, gossip_ns: int) -> pa.Table:
        """The snapshots of ``nodes`` (:mod:`node.wire.snapshots`), in columns built by the
        compiled loop where it runs."""
        if self._native is not None:
            table = self._native.snapshot_table(nodes, t_ns, gossip_ns)
            if table is not None:
                return table
        return snapshot_table((self.snapshot(i) for i in nodes), t_ns, gossip_ns)

    def sync(self) -> None:
        """Hand a run in the compiled loop back to the Python cores (before anything reads or
        changes them; the methods here call it themselves)."""
        if self._native is not None:
            with paused_gc():
                self._native.give_back()
            self._native = None

    def resume_native(self) -> None:
        """After a ``sync`` that only looked (the divergence check, :mod:`node.sim.check`): let a
        compiled loop take the run over again, as after a scheduled call."""
        if self._native is None and self.engine_mode != "python":
            self._try_native(again=True)

    def _follow_native(self) -> None:
        """The clocks, and the spans, after the compiled loop has run."""
        engine = self._native.engine
        self.native_steps += engine.steps - self.steps
        self.now, self.steps, self.frozen_s = engine.now, engine.steps, engine.frozen_s
        self._native.take_spans()

    def _try_native(self, again: bool = False) -> None:
        """Hand the run to a compiled loop where one can take it: at the start, and (``again``)
        after a call that needed the Python cores (a join, a crash), unless another such call is
        due within ``NATIVE_QUIET_S`` (a round trip of hand-overs takes about 4 s of wall time in
        a 10,000-node E1: under churn, taking the run after every event would cost more than it
        saves). Where none can take it, the next try is ``NATIVE_QUIET_S`` later."""
        self._native_tried = True
        if self.engine_mode == "python":
            return
        if again:
            self._native_retry_at = self.now + NATIVE_QUIET_S
            soon = self.now + NATIVE_QUIET_S
            if any(kind == _CALL and not data[1] and at < soon for at, _, kind, data in self.queue):
                return
        loop, reason = accelerator_for(self)
        if reason is not None and STALE in reason and self.native_stale is None:
            self.native_stale = reason
            log.warning("sim.engine: the Python loop runs: %s", reason)
        if loop is not None:
            self._native = loop(self)
            self.native_takes += 1
            self.native_loops[self._native.kind] = self._native.verified
            with paused_gc():
                self._native.take()
        elif self.engine_mode == "native" and not again:
            raise NoAccelerator(f"sim.engine is native, but no compiled loop can run this: {reason}")

    # --- internals --------------------------------------------------------------------------

    def _push(self, at: float, kind: int, data) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at, self.seq, kind, data))

    def _deliver(self, src: int, dst: int, msg, parent_span: str | None) -> None:
        if dst not in self.alive:
            self.stats[src][LOST_TO_DEAD_PEER] += 1
            if src in self.alive and self.failure_detection == "oracle":  # the sender's transport sees the peer gone
                self._execute(src, self.nodes[src].on_send_failed(dst, msg, self.now), parent_span)
            return
        core = self.nodes[dst]
        try:
            actions = core.on_message(src, msg, self.now)
        except RemoteProtocolError:
            self.stats[dst][MALFORMED] += 1
            return
        self._execute(dst, actions, parent_span)
        if self.validate:
            core.validate()

    def _execute(self, node_id: int, actions: list[Action], parent_span: str | None) -> None:
        core = self.nodes[node_id]
        spans = self._event_spans.get(node_id)
        if spans is None:
            spans = event_spans(core, None)
            if spans is not None:
                self._event_spans[node_id] = spans
        interpret(core, actions, self.stats[node_id], self, parent_span, spans)

    # --- ActionDriver ---------------------------------------------------------------------------

    def send(self, node: int, a: Send, span: str | None) -> None:
        msg = a.msg
        if self.wire_codec:
            msg, size = codec.roundtrip(msg, node)
        else:
            size = codec.wire_size(msg, node) if not isinstance(msg, EventMsg) or self.links.bandwidth_kbps else 0
        stats = self.stats[node]
        count_sent(stats, msg, size)
        delay = self.links.sample(node, a.dst, size, self.now)
        if delay is None:
            stats[DROPPED_BY_LINK] += 1
            return
        self._push(self.now + delay, _MSG, (node, a.dst, msg, span))

    def set_timer(self, node: int, name: str, at: float) -> None:
        self.timers[(node, name)] = at
        self._push(at, _TIMER, (node, name))

    def span(self, r: SpanRecord, parent: str | None) -> str:
        e = r.event
        self.span_seq += 1
        span_id = f"{self.span_seq:016x}"
        self.spans.add(self.trace_id(e.event_id), span_id, parent, r.name, round(self.now * 1e9), r.node, r.src,
                       e.event_id, e.topic, e.hops, r.first_copy, r.subscriber)
        return span_id

    def trace_id(self, event_id: str) -> str:
        """The trace of an event: a hash of the seed and its id."""
        trace_id = self._trace_ids.get(event_id)
        if trace_id is None:
            trace_id = hashlib.blake2b(f"{self._seed}:{event_id}".encode(), digest_size=16).hexdigest()
            self._trace_ids[event_id] = trace_id
        return trace_id
