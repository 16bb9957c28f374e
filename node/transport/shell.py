"""The gRPC shell: drives one protocol core with real gRPC, real time and OpenTelemetry.

Small and boring on purpose: decode, feed the core, carry out its actions, arm one timer per
name. The Peer service and the Control service listen on ports of their own (Control on
loopback unless a controller in another pod must reach it; in stream mode the Peer service is
the process's, :mod:`node.transport.host`); with the run's credentials both
take mutual TLS only and each method only from the roles ``security.py`` allows (else
PERMISSION_DENIED, counted in ``unauthorized``). Messages of both services arrive as raw bytes
(the handlers do their own decoding), so a malformed or oversized message is rejected with
INVALID_ARGUMENT, counted in ``malformed`` and logged (rate-limited); it never reaches the core,
and never stops the peer.

Every peer message type is served and sent through the codec's registry
(``codec.WIRE_TYPES``): a request/reply type maps onto one unary call (the initiator's ``Send``
of a request becomes the call; the partner feeds the request to its core, and the reply
``Send`` it returns becomes the call's response); a one-way type is a call answered with an
empty Ack. With ``transport.mode: stream`` (:mod:`node.transport.streams`) every message travels
one way instead, coalesced into the frames of one long-lived stream per link, with bounded
queues whose overflow the core sees as failed sends; the peers of a process then share one Peer
server, one address and the links (:mod:`node.transport.host`). Event copies carry the sender's span
context. Actions are carried out by :func:`node.kit.interpret.interpret`, the simulator's
interpreter too. Link emulation
(:mod:`node.kit.links`) delays or drops each message at send time.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import pickle
import random
import secrets
import time
from collections import Counter
from pathlib import Path

import grpc

from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc, peer_pb2
from node.kit import create_protocol, protocol_spec
from node.kit.interpret import DROPPED_BY_LINK, SEND_FAILED, EventSpans, SpanRecord, count_sent, event_spans, interpret
from node.kit.links import LinkModel, LinkRule, latest_arrival_s
from node.kit.rejoin import core_seed
from node.kit.stack import Stack
from node.kit.types import Action, Descriptor, EventMsg, Gossip, LocalProtocolError, Published, RemoteProtocolError, Send, Signal
from node.transport.channels import Channels
from node.transport.entries import Entries
from node.transport.host import SERVICE, PeerHost, Refusals, answer_ping, listen, unix_address
from node.transport.security import CALLER_KEY, CALLER_TOKEN_ENV, CHANGES_PLAN, PEER_SERVICE, Credentials, aio_channel, control_roles
from node.transport.settings import TransportSettings
from node.transport.streams import Queued
from node.transport.telemetry import FLUSH_S, PeerTelemetry, context_bytes, remote_parent
from node.wire import codec

log = logging.getLogger("overlaylab.peer")

CONTROL_SERVICE = "overlaylab.v1.Control"


class PeerShell(control_pb2_grpc.ControlServicer):
    def __init__(self, node_id: int, protocol: str, params, seed: int, run_id: str,
                 trace_dir: Path | None, host: str = "127.0.0.1", state_path: Path | None = None, *,
                 advertise: str | None = None, otlp_endpoint: str | None = None,
                 refuse_before_join: bool = False, shared: dict | None = None,
                 control_host: str = "127.0.0.1", credentials: Credentials | None = None,
                 transport: TransportSettings | None = None, peer_host: PeerHost | None = None,
                 incarnation: int = 0, socket_dir: str | None = None, run_nodes: int | None = None) -> None:
        self.node_id = node_id
        self.protocol_name = protocol
        self.params = params
        self.seed = seed
        self.incarnation = incarnation
        """Which life of the node this peer starts (:mod:`node.kit.rejoin`): its core's seed."""
        self.host = host
        self.advertise = advertise or host
        """The host name other peers reach this one by (a pod's DNS name where ``host`` is 0.0.0.0)."""
        self.control_host = control_host
        """Where the Control service listens: its own listener, loopback unless a controller in
        another pod must reach it."""
        self.credentials = credentials
        """The run's peer certificate: mutual TLS on both listeners and every channel (None: plaintext)."""
        self.socket_dir = socket_dir
        """Listen on Unix sockets in this folder, not on TCP (``PeerConfig.socket_dir``)."""
        self.caller_token = os.environ.get(CALLER_TOKEN_ENV)
        """The run's caller token (security.CALLER_TOKEN_ENV), if the controller gave one."""
        self.entries = Entries(socket_dir, run_nodes)
        """The addresses and node ids this peer accepts from other peers."""
        self.transport = transport or TransportSettings()
        self.peer_host = peer_host or PeerHost(self.transport, credentials, host, self.advertise, socket_dir)
        """What this peer shares with the other peers of its process (one of its own if none)."""
        self.refuse_before_join = refuse_before_join
        """Answer peer traffic with UNAVAILABLE until ``Join``: a pod that Kubernetes restarts at
        once is still down for the plan until the controller joins it again."""
        self.joined = False
        self.telemetry = PeerTelemetry(run_id, node_id, protocol, trace_dir, otlp_endpoint, self.peer_host.spans)
        self.stats: Counter[str] = Counter()
        self.event_spans: EventSpans | None = None
        """The spans a later copy of an event leaves under (``node.kit.interpret.event_spans``)."""
        self.refusals = Refusals(self.stats, credentials)
        self.links = LinkModel([], random.Random(f"{seed}:links:{node_id}"))
        self.core: Stack | None = None
        self.shared = {} if shared is None else shared
        """Handed to the core (``create_protocol``); the peers of one process share it."""
        self.reply_timeout_s = protocol_spec(protocol).reply_timeout_s(params)
        self.channels_follow_links = protocol_spec(protocol).channels_follow_links
        self.server: grpc.aio.Server | None = None
        self.control_server: grpc.aio.Server | None = None
        self.control_port = 0
        self.control_addr = ""
        self.channels = Channels(credentials, self._spawn, self.transport.connect_timeout_ms)
        self._calls: dict[tuple[str, str], grpc.aio.UnaryUnaryMultiCallable] = {}
        self._in_flight: Counter[str] = Counter()  # calls under way per address
        self._reply_to: int | None = None  # while _execute runs: the node whose call is being served
        self._reply = None  # ... and the reply to it, which travels as the call's response
        self._links: tuple = ()  # ... and the span contexts a publish span links to
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task] = set()
        self._held: dict[asyncio.Future, tuple[asyncio.TimerHandle, int]] = {}
        """unary: messages waiting out their emulated delay -> their timer and destination."""
        self.addr = ""
        self.state_path = state_path
        """If set, the core is checkpointed there every timer tick and restored at start."""

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self, port: int = 0, control_port: int = 0) -> int:
        """Start both listeners (port 0: any free one; Unix sockets with ``socket_dir``); returns
        the Peer service's port. The addresses are ``addr`` and ``control_addr``."""
        control = {m: grpc.unary_unary_rpc_method_handler(self._control_handler(m, getattr(self, m)))
                   for m in codec.CONTROL_REQUESTS}
        shared_port = await self.peer_host.add(self, port)
        if self.peer_host.streams:  # the process's one Peer server
            port, self.addr = shared_port, self.peer_host.addr
        else:
            handlers = {w.rpc: grpc.unary_unary_rpc_method_handler(self._handler(w)) for w in codec.WIRE_TYPES}
            handlers["Ping"] = grpc.unary_unary_rpc_method_handler(self._rpc_ping)
            self.server, port = listen(SERVICE, handlers, self._address("peer", self.host, port), self.credentials)
            await self.server.start()
            self.addr = self._address("peer", self.advertise, port)
        self.control_server, self.control_port = listen(
            CONTROL_SERVICE, control, self._address("control", self.control_host, control_port), self.credentials)
        await self.control_server.start()
        self.control_addr = self._address("control", self.control_host, self.control_port)
        if self.state_path is not None and self.state_path.exists():
            self.core = pickle.loads(self.state_path.read_bytes())
            self.core.me = Descriptor(self.node_id, self.addr, self.core.me.topics, 0, self.core.me.priorities)
            # the saved counter may predate events published since: a new tag and key, so that
            # none of their ids comes back
            self.core.incarnation, self.core.id_key = secrets.token_hex(4), secrets.token_bytes(16)
            self.stats["restored_state"] += 1
        else:
            self._new_life(self.incarnation)
        return port

    def _address(self, service: str, host: str, port: int) -> str:
        return unix_address(self.socket_dir, f"{service}-{self.node_id}") if self.socket_dir else f"{host}:{port}"

    def _new_life(self, incarnation: int) -> None:
        """A new core for the node's ``incarnation``-th life: its own seed (the rejoin rule), a
        random tag in its event ids, so that a peer that restarts without the controller's
        knowing (no new life number) never repeats them either, and a secret key that makes each
        id unpredictable from the last (``Stack.id_key``)."""
        self.incarnation = incarnation
        rng = random.Random(core_seed(self.seed, self.node_id, incarnation))
        self.core = create_protocol(self.protocol_name, Descriptor(self.node_id, self.addr), self.params, rng,
                                    self.shared, secrets.token_hex(4))
        self.core.id_key = secrets.token_bytes(16)

    def checkpoint(self) -> None:
        if self.state_path is not None:
            tmp = self.state_path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self.core))
            os.replace(tmp, self.state_path)

    async def stop(self) -> None:
        for h in self._timers.values():
            h.cancel()
        for t in list(self._tasks):
            t.cancel()
        await self.peer_host.remove(self)
        for server in (self.server, self.control_server):
            if server is not None:
                await server.stop(grace=0.5)
        await self.channels.close()
        self.telemetry.shutdown()

    @property
    def accepting(self) -> bool:
        """Whether peer traffic is taken (see ``refuse_before_join``)."""
        return self.joined or not self.refuse_before_join

    # --- driving the core -------------------------------------------------------------------

    @property
    def now(self) -> float:
        return time.monotonic()  # the loop's clock (BaseEventLoop.time) without asyncio.get_running_loop (PeerHost)

    def _execute(self, actions: list[Action], parent=None, reply_to: int | None = None, links=()):
        """Carry out ``actions``; returns the reply addressed to ``reply_to``, if any (it travels
        as the response of the call being served). ``links``: span contexts the publish span
        links to (the load generator's request)."""
        self._reply_to, self._reply, self._links = reply_to, None, links
        self.event_spans = event_spans(self.core, self.event_spans)
        interpret(self.core, actions, self.stats, self, parent, self.event_spans)
        reply, self._reply_to, self._reply, self._links = self._reply, None, None, ()
        return reply

    # --- ActionDriver (node.kit.interpret) ----------------------------------------------------------

    def send(self, node: int, a: Send, span) -> None:
        if self._reply_to is not None and a.dst == self._reply_to and codec.is_reply(a.msg):
            self._reply = a.msg
        elif self.transport.mode == "stream":
            self.peer_host.send(self, a, span)
        else:
            self._spawn(self._send(a, span))

    def set_timer(self, node: int, name: str, at: float) -> None:
        old = self._timers.pop(name, None)
        if old is not None:
            old.cancel()
        self._timers[name] = asyncio.get_running_loop().call_at(at, self._on_timer, name)

    def span(self, r: SpanRecord, parent):
        return self.telemetry.span(r.name, parent, span_attributes(r), links=self._links if r.name == "publish" else ())

    def _on_timer(self, name: str) -> None:
        self._timers.pop(name, None)
        self._execute(self.core.on_timer(name, self.now))
        if self.channels_follow_links:
            if self.transport.mode == "stream":
                self.peer_host.close_unlinked(self.now)
            else:
                self._close_unlinked_channels()
        self.checkpoint()

    def _close_unlinked_channels(self) -> None:
        """Close the idle channels to peers that are no longer the core's neighbours."""
        linked = {d.addr for d in self.core.union().values()}
        for addr in [a for a in self.channels.open if a not in linked and not self._in_flight[a]]:
            self._forget_channel(addr)
            self.stats["channels_closed"] += 1

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _forget_channel(self, addr: str) -> None:
        """Drop the channel to ``addr`` and its calls (the next use opens a new one)."""
        self.channels.forget(addr)
        for key in [k for k in self._calls if k[0] == addr]:
            del self._calls[key]

    def _call(self, addr: str, rpc: str) -> grpc.aio.UnaryUnaryMultiCallable:
        """The raw-bytes call of ``rpc`` on the peer at ``addr``."""
        call = self._calls.get((addr, rpc))
        if call is None:
            call = self._calls[(addr, rpc)] = self.channels.get(addr).unary_unary(f"/{SERVICE}/{rpc}")
        return call

    def emulate(self, msg, dst: int, size: int) -> float | None:
        """Count ``msg`` as sent and sample its link: seconds until it arrives, or None when the
        link emulation loses it (counted). An event's bytes are counted only with a bandwidth
        (the unary path does not encode a copy just to measure it; streams count the same way)."""
        count_sent(self.stats, msg, size if not isinstance(msg, EventMsg) or self.links.bandwidth_kbps else 0)
        delay = self.links.sample(self.node_id, dst, size, self.now)
        if delay is None:
            self.stats[DROPPED_BY_LINK] += 1
        return delay

    async def _send(self, a: Send, span) -> None:
        # Sizes are needed for layer byte counts and for bandwidth emulation; an event copy is
        # not encoded twice just to be measured otherwise.
        event = isinstance(a.msg, EventMsg)
        size = codec.wire_size(a.msg, self.node_id) if not event or self.links.bandwidth_kbps else 0
        delay = self.emulate(a.msg, a.dst, size)
        if delay is None:
            return
        if delay:
            await self._hold(delay, a.dst)
        wire = codec.wire_type(a.msg)
        data = codec.encode(a.msg, self.node_id, context_bytes(span) if event else codec.NO_TRACE)
        if a.addr not in self.channels:  # looked up once, when a channel is opened
            await self.channels.resolve(a.addr)
        channel = self.channels.get(a.addr)
        self._in_flight[a.addr] += 1
        try:
            if wire.exchange:
                response = await self._call(a.addr, wire.rpc)(data, timeout=self.reply_timeout_s + 1.0)
                reply = codec.decode(wire, response)
                self.receive(a.dst, reply.msg, None)
            else:
                await self._call(a.addr, wire.rpc)(data, timeout=10.0)
        except grpc.aio.AioRpcError as e:
            self.stats[SEND_FAILED] += 1
            self.refusals.warn("node %d: a message to node %d was not sent: %s %s", self.node_id, a.dst, e.code(), e.details())
            if await self.channels.stale(a.addr, channel, e.code()):  # reconnect, looking the host up again
                self._forget_channel(a.addr)
            self._execute(self.core.on_send_failed(a.dst, a.msg, self.now), span)
        except RemoteProtocolError as e:
            self._reject(a.dst, e)
        finally:
            self._in_flight[a.addr] -= 1

    async def _hold(self, delay: float, dst: int) -> None:
        """Wait out a message's emulated delay; a change of link rules can shorten it (``_retime``)."""
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        self._held[woken] = (loop.call_at(loop.time() + delay, _wake, woken), dst)
        try:
            await woken
        finally:
            self._held.pop(woken, None)

    def _retime(self) -> int:
        """Link rules changed: each message held longer than the new rules would hold one sent
        now is released then instead (a link whose delay falls drains). Returns how many moved."""
        if self.transport.mode == "stream":
            return self.peer_host.retime(self)
        loop, moved = asyncio.get_running_loop(), 0
        for woken, (handle, dst) in list(self._held.items()):
            latest = loop.time() + latest_arrival_s(self.links, self.node_id, dst)
            if handle.when() > latest:
                handle.cancel()
                self._held[woken] = (loop.call_at(latest, _wake, woken), dst)
                moved += 1
        return moved

    # --- transport.mode stream (node.transport.host) ------------------------------------------

    def stream_failed(self, lost: list[Queued], why: str) -> None:
        """Messages of this peer its link could not write (``why``: queue_full, deadline,
        broken): counted, and handed to the core as failed sends."""
        self.stats[SEND_FAILED] += len(lost)
        self.stats[f"stream_{why}"] += len(lost)
        self.refusals.warn("node %d: %d messages to node %d were not sent: %s", self.node_id, len(lost), lost[0].dst, why)
        for q in lost:
            self._execute(self.core.on_send_failed(q.dst, q.msg, self.now), q.span)

    def check_entries(self, src: int, msg) -> None:
        """RemoteProtocolError for a message from, or naming, a node or address of no peer of the run."""
        self.entries.check_node(src)
        if isinstance(msg, (Gossip, Signal)):
            self.entries.check_all((msg.sender, *msg.entries))
        elif isinstance(msg, EventMsg):
            self.entries.check_node(msg.publisher)

    def receive(self, src: int, msg, parent, reply_to: int | None = None):
        try:
            self.check_entries(src, msg)
            actions = self.core.on_message(src, msg, self.now)
        except RemoteProtocolError as e:
            self._reject(src, e)
            return None
        return self._execute(actions, parent, reply_to)

    def _reject(self, src, err: Exception) -> None:
        self.refusals.reject(f"node {self.node_id}", src, err)

    async def _authorize(self, context: grpc.aio.ServicerContext, roles: set[str], what: str) -> None:
        await self.refusals.authorize(f"node {self.node_id}", context, roles, what)

    # --- peer service (raw bytes in, raw bytes out) -----------------------------------------

    async def _refuse_if_down(self, context: grpc.aio.ServicerContext) -> None:
        if not self.accepting:
            self.stats["refused_before_join"] += 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "not joined")

    def _handler(self, wire: codec.WireType):
        """The server side of one registered message type."""
        async def handle(data: bytes, context: grpc.aio.ServicerContext) -> bytes:
            await self._authorize(context, PEER_SERVICE, wire.rpc)
            await self._refuse_if_down(context)
            try:
                incoming = codec.decode(wire, data)
                if codec.is_reply(incoming.msg):
                    raise RemoteProtocolError(f"a {wire.rpc} request marked as a reply")
                self.check_entries(incoming.src, incoming.msg)
            except RemoteProtocolError as e:
                self._reject(context.peer(), e)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            parent = remote_parent(*incoming.trace)
            if not wire.exchange:
                self.receive(incoming.src, incoming.msg, parent)
                return b""
            reply = self.receive(incoming.src, incoming.msg, parent, reply_to=incoming.src)
            if reply is None:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no reply")
            return await self._respond(reply, incoming.src, context)
        return handle

    async def _respond(self, reply, dst: int, context: grpc.aio.ServicerContext) -> bytes:
        """Send ``reply`` as the response: counted and through the link emulation like any send."""
        data = codec.encode(reply, self.node_id)
        delay = self.emulate(reply, dst, len(data))
        if delay is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "reply lost (link emulation)")
        if delay:
            await asyncio.sleep(delay)
        return data

    async def _rpc_ping(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return await answer_ping(self.refusals, f"node {self.node_id}", data, context)

    # --- control service --------------------------------------------------------------------

    def _control_handler(self, method: str, call):
        """Decode and check a Control request (refused and counted like a bad peer message),
        then call the method; raw bytes both ways."""
        roles = control_roles(method)

        async def handle(data: bytes, context: grpc.aio.ServicerContext) -> bytes:
            await self._authorize(context, roles, method)
            try:
                request = codec.control_request(method, data)
            except RemoteProtocolError as e:
                self._reject(context.peer(), e)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            if self.caller_token and method in CHANGES_PLAN and not self._from_the_run(context):
                self.stats[f"unplanned.{method}"] += 1
                self.refusals.warn("node %d: %s from %s, a caller without the run's token", self.node_id, method, context.peer())
            return (await call(request, context)).SerializeToString()
        return handle

    def _from_the_run(self, context: grpc.aio.ServicerContext) -> bool:
        given = dict(context.invocation_metadata() or ()).get(CALLER_KEY, "")
        return hmac.compare_digest(str(given).encode(), self.caller_token.encode())

    async def Join(self, request, context):
        if request.incarnation != self.incarnation and self.state_path is None:
            # a fresh rejoin where the host came back on its own, not told its life (a pod the
            # StatefulSet restarts): the controller's count of the node's lives decides
            self._new_life(request.incarnation)
        contacts = [codec.descriptor_from_pb(c) for c in request.contacts]
        try:
            self.entries.check_all(contacts)
        except RemoteProtocolError as e:
            self._reject(context.peer(), e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        self.core.subscribe_all(request.topics, self.now)
        self._execute(self.core.start(self.now, contacts))
        self.joined = True
        return peer_pb2.Ack()

    async def Subscribe(self, request, context):
        self._execute(self.core.subscribe(request.topic, self.now))
        return peer_pb2.Ack()

    async def Unsubscribe(self, request, context):
        self._execute(self.core.unsubscribe(request.topic, self.now))
        return peer_pb2.Ack()

    async def Publish(self, request, context):
        try:
            actions = self.core.publish(request.topic, request.payload, self.now)
        except LocalProtocolError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        link = remote_parent(request.trace_id, request.span_id)
        self._execute(actions, links=(link,) if link else ())
        event = next(a.event for a in actions if isinstance(a, Published))
        return control_pb2.PublishReply(event_id=event.event_id)

    async def GetStats(self, request, context):
        counters = {**self.stats, **self.core.counters()}
        if self.incarnation:
            counters["life"] = self.incarnation
        counters["spans_ended"] = self.telemetry.ended
        counters["spans_exported"] = self.telemetry.exporter.exported
        if self.transport.mode == "unary":  # streams: the process's links, not this peer's
            counters["open_channels"] = len(self.channels.open)
        if self.peer_host.first(self):
            for k, v in self.peer_host.stats.items():
                counters[k] = counters.get(k, 0) + v
        return control_pb2.Stats(node_id=self.node_id, counters=counters)

    async def GetSnapshot(self, request, context):
        return codec.snapshot_to_pb(self.core.snapshot())

    async def SetLinkRules(self, request, context):
        self.links.rules = [
            LinkRule(frozenset(r.nodes), r.delay_ms, r.jitter_ms, r.loss, r.partitioned) for r in request.rules
        ]
        row = list(request.base_delay_ms)
        self.links.base = (lambda src, dst: row[dst] if dst < len(row) else 0.0) if row else None
        self.links.partitions = [frozenset(p.nodes) for p in request.partitions]
        self.links.bandwidth_kbps = request.bandwidth_kbps or None
        self.stats["held_retimed"] += self._retime()
        return peer_pb2.Ack()

    async def ProbeLink(self, request, context):
        """Send ``count`` probes to the node through the link emulation, ``interval_ms`` apart;
        report the one-way delays of those that arrived (same host clock on both ends) beside
        the delays the emulation drew for them, and how many it dropped by plan."""
        size = peer_pb2.Probe(seq=1).ByteSize()
        dropped = 0

        async def probe(seq: int) -> tuple[float, float] | None:
            nonlocal dropped
            await asyncio.sleep(seq * request.interval_ms / 1000.0)
            sent = time.time_ns()
            delay = self.links.sample(self.node_id, request.node_id, size, self.now)
            if delay is None:
                dropped += 1
                return None
            await asyncio.sleep(delay)
            try:
                ack = peer_pb2.ProbeAck.FromString(await ping(peer_pb2.Probe(seq=seq).SerializeToString(), timeout=10.0))
            except grpc.aio.AioRpcError:
                return None
            return (ack.received_unix_nano - sent) / 1e6, delay * 1000.0

        # A channel of the probes' own: measuring a link leaves the peer's connections as they
        # were. Connected first: the probes measure the link, not the connection's set-up.
        async with aio_channel(request.addr, self.credentials, self.channels.options) as channel:
            ping = channel.unary_unary(f"/{SERVICE}/Ping")
            try:
                await asyncio.wait_for(channel.channel_ready(), timeout=10.0)
            except TimeoutError:
                return control_pb2.ProbeReport(sent=request.count)
            arrived = [r for r in await asyncio.gather(*(probe(k) for k in range(request.count))) if r is not None]
        return control_pb2.ProbeReport(sent=request.count, delays_ms=[m for m, _ in arrived],
                                       planned_ms=[p for _, p in arrived], dropped=dropped)

    async def Leave(self, request, context):
        self._execute(self.core.leave(self.now))
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
        self.checkpoint()
        # The deadline runs from now: the peers of one process flush on a few shared threads.
        deadline = time.monotonic() + FLUSH_S
        dropped = await asyncio.get_running_loop().run_in_executor(None, self.telemetry.flush, deadline)
        self.stats["spans_dropped"] = dropped
        return peer_pb2.Ack()


def span_attributes(r: SpanRecord) -> dict:
    """A span record as OpenTelemetry attributes (ARCHITECTURE.md, "Traces")."""
    e = r.event
    attrs = {
        "pubsub.event_id": e.event_id, "pubsub.topic": e.topic, "pubsub.node": r.node,
        "pubsub.hops": e.hops, "pubsub.first_copy": r.first_copy, "pubsub.subscriber": r.subscriber,
    }
    if r.src is not None:
        attrs["pubsub.from"] = r.src
    return attrs


def _wake(woken: asyncio.Future) -> None:
    if not woken.done():
        woken.set_result(None)
