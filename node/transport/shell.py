"""The gRPC shell: drives one protocol core with real gRPC, real time and OpenTelemetry.

Small and boring on purpose: decode, feed the core, carry out its actions, arm one timer per
name. The Peer service and the Control service listen on ports of their own (Control on
loopback unless a controller in another pod must reach it); with the run's credentials both
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
queues whose overflow the core sees as failed sends. Event copies carry the sender's span
context. Actions are carried out by :func:`node.interpret.interpret`, the simulator's
interpreter too. Link emulation
(:mod:`node.links`) delays or drops each message at send time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import random
import secrets
import socket
import time
from collections import Counter, deque
from pathlib import Path

import grpc

from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc, peer_pb2
from node.core import create_protocol, protocol_spec
from node.core.stack import Stack
from node.core.types import Action, Descriptor, EventMsg, LocalProtocolError, Published, RemoteProtocolError, Send
from node.interpret import DROPPED_BY_LINK, MALFORMED, SEND_FAILED, SpanRecord, count_sent, interpret
from node.links import LinkModel, LinkRule

from . import codec
from .security import PEER_SERVICE, Credentials, aio_channel, control_roles, role_of
from .settings import TransportSettings
from .streams import Link, Queued, envelope, frame_messages
from .telemetry import FLUSH_S, PeerTelemetry, context_bytes, remote_parent

log = logging.getLogger("overlaylab.peer")

SERVICE = "overlaylab.v1.Peer"
CONTROL_SERVICE = "overlaylab.v1.Control"
UNAUTHORIZED = "unauthorized"
LOG_PER_S = 5
"""Refusals logged per second at most."""
CHANNEL_OPTIONS = [
    # A peer that crashed and restarted on its port should be reachable again within a cycle,
    # not after gRPC's default reconnect backoff (up to two minutes). Not min_reconnect_backoff:
    # gRPC also takes it as the connect timeout, and a TLS handshake on a busy host can take
    # longer than 100 ms (every such connection failed "before receiving SETTINGS frame").
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

INBOX_EVENTS = 4096
"""transport.mode stream: event copies received and queued before the peer stops reading its links."""
EVENTS_PER_TURN = 64
"""Event copies handled before the event loop gets a turn (control messages, timers)."""
SERVER_QUEUE_OPTIONS = [
    # gRPC core cancels calls (CANCELLED) once more than 1,000 wait for the application, or 3,000
    # at all: a burst of Publish calls or unary Forwards is then lost, though the peer would work
    # through it in a second or two. The queue is bounded by the peer's own transport instead.
    ("grpc.server.max_pending_requests", 1 << 20),
    ("grpc.server.max_pending_requests_hard_limit", 1 << 20),
]


class PeerShell(control_pb2_grpc.ControlServicer):
    def __init__(self, node_id: int, protocol: str, params, seed: int, run_id: str,
                 trace_dir: Path | None, host: str = "127.0.0.1", state_path: Path | None = None, *,
                 advertise: str | None = None, otlp_endpoint: str | None = None,
                 refuse_before_join: bool = False, shared: dict | None = None,
                 control_host: str = "127.0.0.1", credentials: Credentials | None = None,
                 transport: TransportSettings | None = None) -> None:
        self.node_id = node_id
        self.protocol_name = protocol
        self.params = params
        self.seed = seed
        self.host = host
        self.advertise = advertise or host
        """The host name other peers reach this one by (a pod's DNS name where ``host`` is 0.0.0.0)."""
        self.control_host = control_host
        """Where the Control service listens: its own listener, loopback unless a controller in
        another pod must reach it."""
        self.credentials = credentials
        """The run's peer certificate: mutual TLS on both listeners and every channel (None: plaintext)."""
        self.transport = transport or TransportSettings()
        self.refuse_before_join = refuse_before_join
        """Answer peer traffic with UNAVAILABLE until ``Join``: a pod that Kubernetes restarts at
        once is still down for the plan until the controller joins it again."""
        self.joined = False
        self.telemetry = PeerTelemetry(run_id, node_id, protocol, trace_dir, otlp_endpoint)
        self.stats: Counter[str] = Counter()
        self.links = LinkModel([], random.Random(f"{seed}:links:{node_id}"))
        self.core: Stack | None = None
        self.shared = {} if shared is None else shared
        """Handed to the core (``create_protocol``); the peers of one process share it."""
        self.reply_timeout_s = protocol_spec(protocol).reply_timeout_s(params)
        self.channels_follow_links = protocol_spec(protocol).channels_follow_links
        self.server: grpc.aio.Server | None = None
        self.control_server: grpc.aio.Server | None = None
        self.control_port = 0
        self._log_budget = RateLimit(LOG_PER_S)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._calls: dict[tuple[str, str], grpc.aio.UnaryUnaryMultiCallable] = {}
        self._in_flight: Counter[str] = Counter()  # calls under way per address
        self._streams: dict[str, Link] = {}  # transport.mode stream: one per address sent to
        self._inbox: deque[codec.Incoming] = deque()  # ... and event copies received, not yet handled
        self._draining: asyncio.Task | None = None
        self._inbox_room = asyncio.Event()
        self._stopping = False
        self._hosts: dict[str, str] = {}  # host name -> address, resolved once (see _resolve)
        self._reply_to: int | None = None  # while _execute runs: the node whose call is being served
        self._reply = None  # ... and the reply to it, which travels as the call's response
        self._links: tuple = ()  # ... and the span contexts a publish span links to
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task] = set()
        self.addr = ""
        self.state_path = state_path
        """If set, the core is checkpointed there every timer tick and restored at start."""

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self, port: int = 0, control_port: int = 0) -> int:
        """Start both listeners (port 0: any free one); returns the Peer service's port, the
        Control service's is ``control_port``."""
        raw = dict(request_deserializer=None, response_serializer=None)
        handlers = {w.rpc: grpc.unary_unary_rpc_method_handler(self._handler(w), **raw) for w in codec.WIRE_TYPES}
        handlers["Ping"] = grpc.unary_unary_rpc_method_handler(self._rpc_ping, **raw)
        handlers["Stream"] = grpc.stream_unary_rpc_method_handler(self._rpc_stream, **raw)
        control = {m: grpc.unary_unary_rpc_method_handler(self._control_handler(m, getattr(self, m)), **raw)
                   for m in codec.CONTROL_REQUESTS}
        self.server, port = self._listen(SERVICE, handlers, self.host, port)
        self.control_server, self.control_port = self._listen(CONTROL_SERVICE, control, self.control_host, control_port)
        await self.server.start()
        await self.control_server.start()
        self.addr = f"{self.advertise}:{port}"
        me = Descriptor(self.node_id, self.addr)
        if self.state_path is not None and self.state_path.exists():
            self.core = pickle.loads(self.state_path.read_bytes())
            self.core.me = Descriptor(self.node_id, self.addr, self.core.me.topics, 0, self.core.me.priorities)
            self.stats["restored_state"] += 1
        else:
            # A random incarnation: a restarted peer's event ids never repeat its earlier ones.
            self.core = create_protocol(self.protocol_name, me, self.params, random.Random(f"{self.seed}:node:{self.node_id}"),
                                        self.shared, secrets.token_hex(4))
        return port

    def _listen(self, service: str, handlers: dict, host: str, port: int) -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", 4 * (codec.MAX_MESSAGE_BYTES + 1024)), ("grpc.so_reuseport", 0),
            *SERVER_QUEUE_OPTIONS,
        ])
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service, handlers)])
        if self.credentials is None:
            return server, server.add_insecure_port(f"{host}:{port}")
        return server, server.add_secure_port(f"{host}:{port}", self.credentials.server())

    def checkpoint(self) -> None:
        if self.state_path is not None:
            tmp = self.state_path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self.core))
            os.replace(tmp, self.state_path)

    async def stop(self) -> None:
        self._stopping = True
        if self._draining is not None:
            self._draining.cancel()
        for h in self._timers.values():
            h.cancel()
        for t in list(self._tasks):
            t.cancel()
        for link in list(self._streams.values()):
            await link.close()
        for server in (self.server, self.control_server):
            if server is not None:
                await server.stop(grace=0.5)
        for channel in self._channels.values():
            await channel.close()
        self.telemetry.shutdown()

    # --- driving the core -------------------------------------------------------------------

    @property
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def _execute(self, actions: list[Action], parent=None, reply_to: int | None = None, links=()):
        """Carry out ``actions``; returns the reply addressed to ``reply_to``, if any (it travels
        as the response of the call being served). ``links``: span contexts the publish span
        links to (the load generator's request)."""
        self._reply_to, self._reply, self._links = reply_to, None, links
        interpret(self.core, actions, self.stats, self, parent)
        reply, self._reply_to, self._reply, self._links = self._reply, None, None, ()
        return reply

    # --- ActionDriver (node.interpret) ----------------------------------------------------------

    def send(self, node: int, a: Send, span) -> None:
        if self._reply_to is not None and a.dst == self._reply_to and codec.is_reply(a.msg):
            self._reply = a.msg
        elif self.transport.mode == "stream":
            self._stream_send(a, span)
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
            self._close_unlinked_channels()
        self.checkpoint()

    def _close_unlinked_channels(self) -> None:
        """Close the idle channels to peers that are no longer the core's neighbours."""
        linked = {d.addr for d in self.core.union().values()}
        busy = {a for a, link in self._streams.items() if not link.idle()}
        for addr in [a for a in self._channels if a not in linked and not self._in_flight[a] and a not in busy]:
            self._close_channel(addr)
            self.stats["channels_closed"] += 1

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _channel(self, addr: str) -> grpc.aio.Channel:
        channel = self._channels.get(addr)
        if channel is None:
            host, _, port = addr.rpartition(":")
            target = f"{self._hosts[host]}:{port}" if host in self._hosts else addr
            channel = self._channels[addr] = aio_channel(target, self.credentials, CHANNEL_OPTIONS)
        return channel

    async def _resolve(self, addr: str) -> None:
        """Resolve ``addr``'s host once for every channel to it: a peer that opens and closes
        channels as its links change (StaN) would otherwise send the cluster's DNS a lookup per
        channel. A call that fails as unavailable closes the channel and forgets the address (a
        pod that restarted has a new one)."""
        host = addr.rpartition(":")[0]
        if host in self._hosts or not host or host[0].isdigit() or host.startswith("["):
            return
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError:
            return  # the channel resolves it itself
        ip = infos[0][4][0]
        self._hosts[host] = f"[{ip}]" if ":" in ip else ip

    def _close_channel(self, addr: str) -> None:
        link = self._streams.pop(addr, None)
        if link is not None:
            self._spawn(link.close())
        self._forget_channel(addr)

    def _forget_channel(self, addr: str) -> None:
        """Drop the channel to ``addr`` (the next use opens a new one, looking the host up again)."""
        self._hosts.pop(addr.rpartition(":")[0], None)
        channel = self._channels.pop(addr, None)
        for key in [k for k in self._calls if k[0] == addr]:
            del self._calls[key]
        if channel is not None:
            self._spawn(channel.close())

    def _call(self, addr: str, rpc: str) -> grpc.aio.UnaryUnaryMultiCallable:
        """The raw-bytes call of ``rpc`` on the peer at ``addr``."""
        call = self._calls.get((addr, rpc))
        if call is None:
            call = self._calls[(addr, rpc)] = self._channel(addr).unary_unary(f"/{SERVICE}/{rpc}")
        return call

    def _emulate(self, msg, dst: int, size: int) -> float | None:
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
        delay = self._emulate(a.msg, a.dst, size)
        if delay is None:
            return
        if delay:
            await asyncio.sleep(delay)
        wire = codec.wire_type(a.msg)
        data = codec.encode(a.msg, self.node_id, context_bytes(span) if event else codec.NO_TRACE)
        if a.addr not in self._channels:  # looked up once, when a channel is opened
            await self._resolve(a.addr)
        self._in_flight[a.addr] += 1
        try:
            if wire.exchange:
                response = await self._call(a.addr, wire.rpc)(data, timeout=self.reply_timeout_s + 1.0)
                reply = codec.decode(wire, response)
                self._receive(a.dst, reply.msg, None)
            else:
                await self._call(a.addr, wire.rpc)(data, timeout=10.0)
        except grpc.aio.AioRpcError as e:
            self.stats[SEND_FAILED] += 1
            log.debug("node %d: send to %d failed: %s %s", self.node_id, a.dst, e.code(), e.details())
            if e.code() == grpc.StatusCode.UNAVAILABLE:  # reconnect, looking the host up again
                self._close_channel(a.addr)
            self._execute(self.core.on_send_failed(a.dst, a.msg, self.now), span)
        except RemoteProtocolError as e:
            self._reject(a.dst, e)
        finally:
            self._in_flight[a.addr] -= 1

    # --- transport.mode stream ------------------------------------------------------------------

    def _stream_send(self, a: Send, span) -> None:
        """Encode ``a`` now (its span context rides in the event), then queue it on its link
        once the emulated delay has passed."""
        event = isinstance(a.msg, EventMsg)
        env = envelope(a.msg, self.node_id, context_bytes(span) if event else codec.NO_TRACE)
        size = len(env.data)
        delay = self._emulate(a.msg, a.dst, size)
        if delay is None:
            return
        q = Queued(a.dst, a.msg, env, size, 0.0, span)
        if delay:
            asyncio.get_running_loop().call_later(delay, self._enqueue, a.addr, q)
        else:
            self._enqueue(a.addr, q)

    def _enqueue(self, addr: str, q: Queued) -> None:
        if self._stopping:
            return
        q.queued_at = self.now
        link = self._streams.get(addr)
        if link is None:
            link = self._streams[addr] = Link(addr, lambda: self._open_stream(addr), self.transport,
                                              self._stream_failed, lambda: self.now)
        if not link.put(q):
            self._stream_failed(addr, [q], "queue_full")

    async def _open_stream(self, addr: str) -> grpc.aio.StreamUnaryCall:
        if addr not in self._channels:
            await self._resolve(addr)
        return self._channel(addr).stream_unary(f"/{SERVICE}/Stream")()

    def _stream_failed(self, addr: str, lost: list[Queued], why: str) -> None:
        """Messages the link to ``addr`` could not write (``why``: queue_full, deadline, broken):
        counted, and handed to the core as failed sends; a broken stream drops its channel."""
        self.stats[SEND_FAILED] += len(lost)
        self.stats[f"stream_{why}"] += len(lost)
        if why == "broken":
            self._forget_channel(addr)
        for q in lost:
            self._execute(self.core.on_send_failed(q.dst, q.msg, self.now), q.span)

    async def _rpc_stream(self, frames, context: grpc.aio.ServicerContext) -> bytes:
        """The receiving end of a link: every message of every frame to the core, in order within
        its class; a bad frame or message is refused and counted, and the stream goes on.
        Control messages are handled at once, event copies in their turn by ``_drain_events``:
        a backlog of events never delays a gossip reply past its timeout. While the backlog is
        over ``INBOX_EVENTS`` the stream is not read, so HTTP/2 flow control holds the senders."""
        await self._authorize(context, PEER_SERVICE, "Stream")
        await self._refuse_if_down(context)
        async for data in frames:
            try:
                envelopes = frame_messages(data)
            except RemoteProtocolError as e:
                self._reject(context.peer(), e)
                continue
            for env in envelopes:
                try:
                    wire = codec.WIRE_BY_RPC.get(env.rpc)
                    if wire is None:
                        raise RemoteProtocolError(f"a frame with a message of unknown type {env.rpc[:64]!r}")
                    incoming = codec.decode(wire, env.data)
                except RemoteProtocolError as e:
                    self._reject(context.peer(), e)
                    continue
                if isinstance(incoming.msg, EventMsg):
                    self._inbox.append(incoming)
                    if self._draining is None:
                        self._draining = asyncio.get_running_loop().create_task(self._drain_events())
                else:
                    self._receive(incoming.src, incoming.msg, None)
            if len(self._inbox) > INBOX_EVENTS:
                self._inbox_room.clear()
                await self._inbox_room.wait()
        return b""

    async def _drain_events(self) -> None:
        """Hand queued event copies to the core, yielding to the loop every ``EVENTS_PER_TURN``."""
        try:
            while self._inbox:
                for _ in range(min(EVENTS_PER_TURN, len(self._inbox))):
                    incoming = self._inbox.popleft()
                    self._receive(incoming.src, incoming.msg, remote_parent(*incoming.trace))
                if len(self._inbox) <= INBOX_EVENTS:
                    self._inbox_room.set()
                await asyncio.sleep(0)
        finally:
            self._draining = None
            self._inbox_room.set()

    def _receive(self, src: int, msg, parent, reply_to: int | None = None):
        try:
            actions = self.core.on_message(src, msg, self.now)
        except RemoteProtocolError as e:
            self._reject(src, e)
            return None
        return self._execute(actions, parent, reply_to)

    def _reject(self, src, err: Exception) -> None:
        self.stats[MALFORMED] += 1
        self._warn("node %d: rejected a message from %s: %s", self.node_id, src, err)

    def _warn(self, msg: str, *args) -> None:
        """Log a refusal, at most ``LOG_PER_S`` a second (a flood of bad input must not become
        a flood of log lines); the lines left out are counted in the next one."""
        skipped = self._log_budget.take()
        if skipped is not None:
            log.warning(msg + (f" ({skipped} similar lines left out)" if skipped else ""), *args)

    async def _authorize(self, context: grpc.aio.ServicerContext, roles: set[str], what: str) -> None:
        """Over mutual TLS: refuse (PERMISSION_DENIED, counted) a client whose role may not call ``what``."""
        if self.credentials is None:
            return
        role = role_of(context)
        if role not in roles:
            self.stats[UNAUTHORIZED] += 1
            self._warn("node %d: refused %s from %s (role %s)", self.node_id, what, context.peer(), role)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"role {role!r} may not call {what}")

    # --- peer service (raw bytes in, raw bytes out) -----------------------------------------

    async def _refuse_if_down(self, context: grpc.aio.ServicerContext) -> None:
        if self.refuse_before_join and not self.joined:
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
            except RemoteProtocolError as e:
                self._reject(context.peer(), e)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            parent = remote_parent(*incoming.trace)
            if not wire.exchange:
                self._receive(incoming.src, incoming.msg, parent)
                return b""
            reply = self._receive(incoming.src, incoming.msg, parent, reply_to=incoming.src)
            if reply is None:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no reply")
            return await self._respond(reply, incoming.src, context)
        return handle

    async def _respond(self, reply, dst: int, context: grpc.aio.ServicerContext) -> bytes:
        """Send ``reply`` as the response: counted and through the link emulation like any send."""
        data = codec.encode(reply, self.node_id)
        delay = self._emulate(reply, dst, len(data))
        if delay is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "reply lost (link emulation)")
        if delay:
            await asyncio.sleep(delay)
        return data

    async def _rpc_ping(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        received = time.time_ns()
        await self._authorize(context, PEER_SERVICE, "Ping")
        try:
            codec.parse(peer_pb2.Probe, data)
        except RemoteProtocolError as e:
            self._reject(context.peer(), e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return peer_pb2.ProbeAck(received_unix_nano=received).SerializeToString()

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
            return (await call(request, context)).SerializeToString()
        return handle

    async def Join(self, request, context):
        self.core.subscribe_all(request.topics, self.now)
        contacts = [codec.descriptor_from_pb(c) for c in request.contacts]
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
        self._execute(actions, links=[link] if link else ())
        event = next(a.event for a in actions if isinstance(a, Published))
        return control_pb2.PublishReply(event_id=event.event_id)

    async def GetStats(self, request, context):
        counters = dict(self.stats)
        counters["spans_ended"] = self.telemetry.ended
        counters["spans_exported"] = self.telemetry.exporter.exported
        counters["open_channels"] = len(self._channels)
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
        return peer_pb2.Ack()

    async def ProbeLink(self, request, context):
        """Send ``count`` probes to the node through the link emulation, ``interval_ms`` apart;
        report the one-way delays of those that arrived (same host clock on both ends)."""
        size = peer_pb2.Probe(seq=1).ByteSize()

        async def probe(seq: int) -> float | None:
            await asyncio.sleep(seq * request.interval_ms / 1000.0)
            sent = time.time_ns()
            delay = self.links.sample(self.node_id, request.node_id, size, self.now)
            if delay is None:
                return None
            await asyncio.sleep(delay)
            try:
                ack = peer_pb2.ProbeAck.FromString(await ping(peer_pb2.Probe(seq=seq).SerializeToString(), timeout=10.0))
            except grpc.aio.AioRpcError:
                return None
            return (ack.received_unix_nano - sent) / 1e6

        # A channel of the probes' own: measuring a link leaves the peer's connections as they were.
        async with aio_channel(request.addr, self.credentials, CHANNEL_OPTIONS) as channel:
            ping = channel.unary_unary(f"/{SERVICE}/Ping")
            delays = await asyncio.gather(*(probe(k) for k in range(request.count)))
        return control_pb2.ProbeReport(sent=request.count, delays_ms=[d for d in delays if d is not None])

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


class RateLimit:
    """A token bucket of ``per_s`` tokens a second (burst ``per_s``)."""

    def __init__(self, per_s: float) -> None:
        self.per_s, self.tokens, self.at, self.skipped = per_s, float(per_s), time.monotonic(), 0

    def take(self) -> int | None:
        """None if no token is left (one more skipped), else how many were skipped before."""
        now = time.monotonic()
        self.tokens = min(self.per_s, self.tokens + (now - self.at) * self.per_s)
        self.at = now
        if self.tokens < 1:
            self.skipped += 1
            return None
        self.tokens -= 1
        skipped, self.skipped = self.skipped, 0
        return skipped


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
