"""What the peers of one process share.

``python -m node`` hosts one or several peers (``nodes.peers_per_process``, ``k8s.peers_per_pod``)
on one event loop. They share one span pipeline (one batch processor and its thread,
:class:`node.transport.telemetry.SpanPipeline`) and, with ``transport.mode: stream``, one Peer
server and the links:

- Every peer of the process advertises the one address of that server. A message to a peer of
  another process goes on the one :class:`~node.transport.streams.Link` to that process's
  address, so the gossip and event copies of all the peers here share its frames; each
  ``Envelope`` names the node it is for.
- A message between two peers of this process skips gRPC and the codec: it goes through the link
  emulation like any other and is handed over as it would have been decoded. The copies of an
  event that a peer forwards at once are encoded once (they differ only in their destination).
- On receipt each envelope goes to the peer it names (a message for a node not hosted here, or
  without one, is refused and counted). Control messages are handled at once, event copies in
  their turn (``EVENTS_PER_TURN`` before the loop gets a turn); while ``INBOX_EVENTS`` copies
  wait the server stops reading the streams that carry events, so HTTP/2 flow control holds
  their senders; the links' control streams go on.
- A copy of an event its peer has seen already waits until no first copy does: a flood's copies
  arrive in waves (each node hears of an event from most of its neighbours), and a first copy,
  which the next hop waits for, no longer queues behind the duplicates of its wave. A
  duplicate's receive span is stamped when it is handled, as every copy's is.
- A stream is refused (UNAVAILABLE) while no peer here has joined, when peers refuse traffic
  before ``Join``; a message for one that has not joined yet is dropped and counted
  (``refused_before_join``).

The process's own counters (a refused frame, stream or probe) are reported with its first
peer's (``GetStats``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, deque
from typing import Any, Protocol

import grpc

from node._gen.overlaylab.v1 import peer_pb2
from node.kit.interpret import MALFORMED
from node.kit.links import LinkModel, latest_arrival_s
from node.kit.types import EventMsg, RemoteProtocolError, Send
from node.transport.channels import Channels
from node.transport.loopwatch import LoopWatch
from node.transport.security import PEER_SERVICE, Credentials, role_of
from node.transport.settings import TransportSettings
from node.transport.streams import Link, Queued, envelope, frame_messages
from node.transport.telemetry import SpanPipeline, SpanRef, context_bytes, remote_parent
from node.wire import codec

log = logging.getLogger("overlaylab.peer")


class HostedPeer(Protocol):
    """What the host asks of a peer it serves (:class:`node.transport.shell.PeerShell`)."""

    node_id: int
    stats: Counter[str]
    refusals: Refusals
    core: Any
    links: LinkModel

    @property
    def accepting(self) -> bool: ...
    def emulate(self, msg: Any, dst: int, size: int) -> float | None: ...
    def receive(self, src: int, msg: Any, parent: Any, reply_to: int | None = None) -> Any: ...


SERVICE = "overlaylab.v1.Peer"
UNAUTHORIZED = "unauthorized"
LOG_PER_S = 5
"""Refusals logged per second at most."""
INBOX_EVENTS = 4096
"""transport.mode stream: event copies received and queued before the server stops reading the
links' event lanes (their control lanes go on)."""
EVENTS_PER_TURN = 64
"""Event copies handled before the event loop gets a turn (control messages, timers)."""
SERVER_OPTIONS = [
    ("grpc.so_reuseport", 0),
    # gRPC core cancels calls (CANCELLED) once more than 1,000 wait for the application, or 3,000
    # at all: a burst of Publish calls or unary Forwards is then lost, though the peer would work
    # through it in a second or two. The queue is bounded by the peer's own transport instead.
    ("grpc.server.max_pending_requests", 1 << 20),
    ("grpc.server.max_pending_requests_hard_limit", 1 << 20),
    # ... and cancels (CANCELLED) a call that waited 30 s for the application to take it up: on
    # a loaded host a peer's event loop takes a burst's calls up later than that. The caller's
    # deadline bounds the wait instead.
    ("grpc.server_max_unrequested_time_in_server", 3600),
]
UNLINK_EVERY_S = 1.0
"""stream: how often the links to addresses no peer here links to any more are closed (StaN)."""
DELAY_GRID_S = 1e-4
"""stream: delayed messages due in the same 0.1 ms slot share one timer, released in the order
they were sent (choice: a timer per message cost about a tenth of a flooding peer's CPU; an
emulated delay grows by less than this)."""


def listen(service: str, handlers: dict, address: str, credentials: Credentials | None) -> tuple[grpc.aio.Server, int]:
    """A gRPC server of raw-bytes ``handlers`` on ``address`` (``host:port``, port 0: any free
    one, or ``unix:path``), not started; and the port bound (1 for a Unix socket)."""
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", 4 * (codec.MAX_MESSAGE_BYTES + 1024)), *SERVER_OPTIONS,
    ])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service, handlers)])
    if credentials is None:
        return server, server.add_insecure_port(address)
    return server, server.add_secure_port(address, credentials.server())


def unix_address(folder: str, name: str) -> str:
    """The address of the Unix socket ``name`` in ``folder`` (``PeerConfig.socket_dir``)."""
    return f"unix:{folder}/{name}.sock"


class Refusals:
    """Counts and logs refused input: a log line per refusal, at most ``LOG_PER_S`` a second (a
    flood of bad input must not become a flood of log lines); those left out are counted in the
    next line."""

    def __init__(self, stats: Counter[str], credentials: Credentials | None) -> None:
        self.stats, self.credentials = stats, credentials
        self.tokens, self.at, self.skipped = float(LOG_PER_S), time.monotonic(), 0

    def warn(self, msg: str, *args) -> None:
        now = time.monotonic()
        self.tokens = min(LOG_PER_S, self.tokens + (now - self.at) * LOG_PER_S)
        self.at = now
        if self.tokens < 1:
            self.skipped += 1
            return
        self.tokens -= 1
        log.warning(msg + (f" ({self.skipped} similar lines left out)" if self.skipped else ""), *args)
        self.skipped = 0

    def reject(self, who, origin, err: Exception) -> None:
        """A malformed message from ``origin``, refused by ``who``."""
        self.stats[MALFORMED] += 1
        self.warn("%s: rejected a message from %s: %s", who, origin, err)

    async def authorize(self, who, context: grpc.aio.ServicerContext, roles: set[str], what: str) -> None:
        """Over mutual TLS: refuse (PERMISSION_DENIED, counted) a client whose role may not call ``what``."""
        if self.credentials is None:
            return
        role = role_of(context)
        if role not in roles:
            self.stats[UNAUTHORIZED] += 1
            self.warn("%s: refused %s from %s (role %s)", who, what, context.peer(), role)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"role {role!r} may not call {what}")


async def answer_ping(refusals: Refusals, who, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
    """The Peer service's Ping: the receiver's clock at arrival."""
    received = time.time_ns()
    await refusals.authorize(who, context, PEER_SERVICE, "Ping")
    try:
        codec.parse(peer_pb2.Probe, data)
    except RemoteProtocolError as e:
        refusals.reject(who, context.peer(), e)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
    return peer_pb2.ProbeAck(received_unix_nano=received).SerializeToString()


class PeerHost:
    def __init__(self, transport: TransportSettings | None = None, credentials: Credentials | None = None,
                 bind: str = "127.0.0.1", advertise: str | None = None, socket_dir: str | None = None) -> None:
        self.transport = transport or TransportSettings()
        self.credentials = credentials
        self.bind, self.advertise = bind, advertise or bind
        self.socket_dir = socket_dir
        """Listen on a Unix socket in this folder, not on TCP (``PeerConfig.socket_dir``)."""
        self.port = 0
        self.spans = SpanPipeline()
        self.peers: dict[int, HostedPeer] = {}
        self.stats: Counter[str] = Counter()
        self.refusals = Refusals(self.stats, credentials)
        self.loop_watch = LoopWatch(self.stats, self.backlogs)
        """The process's event-loop lag, CPU and backlogs, in ``stats`` (node/transport/loopwatch.py)."""
        self.server: grpc.aio.Server | None = None
        self.addr = ""
        self.channels = Channels(credentials, self.spawn, self.transport.connect_timeout_ms)
        self.links: dict[str, Link] = {}
        self._inbox: deque[tuple[HostedPeer, int, EventMsg, SpanRef | None]] = deque()  # peer, sender, copy, parent
        self._seen_inbox: deque[tuple[HostedPeer, int, EventMsg, SpanRef | None]] = deque()  # copies of seen events
        self._draining: asyncio.Task | None = None
        self._inbox_room = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False
        self._unlinked_at = 0.0
        self._encoded: tuple = (None, None, None, None)  # the last message encoded: (msg, sender, trace, envelope)
        self._due: dict[int, tuple[asyncio.TimerHandle, list[tuple[str, Queued]]]] = {}
        """DELAY_GRID_S slot -> its timer and the messages released then."""
        # The peers' loop (set by add), and its clock read as time.monotonic (what
        # BaseEventLoop.time returns): on Python 3.11 asyncio.get_running_loop makes a getpid
        # system call, and the send path of every copy needs both.
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def streams(self) -> bool:
        return self.transport.mode == "stream"

    def first(self, peer: HostedPeer) -> bool:
        """Whether ``peer`` reports the process's own counters."""
        return next(iter(self.peers), None) == peer.node_id

    def spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- lifecycle --------------------------------------------------------------------------

    async def add(self, peer: HostedPeer, port: int) -> int:
        """Host ``peer``; in stream mode start the shared server the first time (on ``port``,
        0: any free one; a Unix socket with ``socket_dir``). Returns the shared server's port
        (0 in unary mode); its address is ``addr``."""
        self.peers[peer.node_id] = peer
        loop = asyncio.get_running_loop()
        if self._loop is not loop or len(self.peers) == 1:  # the process's first peer (again)
            self._loop = loop
            self.loop_watch.stop()
            self.loop_watch.start(loop)
        if not self.streams:
            return 0
        if self.server is None:
            handlers = {"Stream": grpc.stream_unary_rpc_method_handler(self._rpc_stream),
                        "Ping": grpc.unary_unary_rpc_method_handler(self._rpc_ping)}
            if self.socket_dir:
                self.addr = unix_address(self.socket_dir, f"host-{peer.node_id}")
                self.server, self.port = listen(SERVICE, handlers, self.addr, self.credentials)
            else:
                self.server, self.port = listen(SERVICE, handlers, f"{self.bind}:{port}", self.credentials)
                self.addr = f"{self.advertise}:{self.port}"
            await self.server.start()
        return self.port

    async def remove(self, peer: HostedPeer) -> None:
        """``peer`` stopped; the last one stops the server and the links."""
        self.peers.pop(peer.node_id, None)
        if self.peers:
            return
        self.loop_watch.stop()
        self._stopping = True
        if self._draining is not None:
            self._draining.cancel()
        for link in list(self.links.values()):
            await link.close()
        if self.server is not None:
            await self.server.stop(grace=0.5)
        for t in list(self._tasks):
            t.cancel()
        await self.channels.close()

    # --- sending ----------------------------------------------------------------------------

    def send(self, peer: HostedPeer, a: Send, span) -> None:
        """Encode ``a`` now (its span context rides in the event), then queue it on its link
        once the emulated delay has passed."""
        trace = context_bytes(span) if isinstance(a.msg, EventMsg) else codec.NO_TRACE
        last = self._encoded
        if last[0] is a.msg and last[1] == peer.node_id and last[2] == trace:
            env = peer_pb2.Envelope(rpc=last[3].rpc, data=last[3].data, dst=a.dst)
        else:
            env = envelope(a.msg, peer.node_id, a.dst, trace)
            self._encoded = (a.msg, peer.node_id, trace, env)
        size = len(env.data)
        delay = peer.emulate(a.msg, a.dst, size)
        if delay is None:
            return
        q = Queued(peer, a.dst, a.msg, env, size, 0.0, span)
        if not delay:
            self._enqueue(a.addr, q)
            return
        self._hold(math.ceil((time.monotonic() + delay) / DELAY_GRID_S), a.addr, q)

    def _hold(self, slot: int, addr: str, q: Queued) -> None:
        due = self._due.get(slot)
        if due is None:
            due = self._due[slot] = (self._loop.call_at(slot * DELAY_GRID_S, self._release, slot), [])
        due[1].append((addr, q))

    def _release(self, slot: int) -> None:
        for addr, q in self._due.pop(slot)[1]:
            self._enqueue(addr, q)

    def retime(self, peer: HostedPeer) -> int:
        """``peer``'s link rules changed: each message of its still held longer than the new
        rules would hold one sent now is released then instead. Returns how many moved."""
        now, moved = time.monotonic(), []
        for slot, (handle, held) in list(self._due.items()):
            keep = []
            for addr, q in held:
                latest = math.ceil((now + latest_arrival_s(peer.links, peer.node_id, q.dst)) / DELAY_GRID_S) \
                    if q.sender is peer else slot  # other peers' messages keep their time
                (moved.append((latest, addr, q)) if latest < slot else keep.append((addr, q)))
            if not keep:
                handle.cancel()
                del self._due[slot]
            elif len(keep) < len(held):
                held[:] = keep
        for latest, addr, q in moved:
            self._hold(latest, addr, q)
        return len(moved)

    def _enqueue(self, addr: str, q: Queued) -> None:
        if self._stopping:
            return
        if addr == self.addr:  # a peer of this process
            self._hand_over(q)
            return
        q.queued_at = time.monotonic()
        link = self.links.get(addr)
        if link is None:
            link = self.links[addr] = Link(addr, lambda: self._open_stream(addr), self.transport,
                                           self._failed, time.monotonic, self.stats)
        if not link.put(q):
            self._failed(addr, [q], "queue_full")

    async def _open_stream(self, addr: str) -> grpc.aio.StreamUnaryCall:
        if addr not in self.channels:
            await self.channels.resolve(addr)
        return self.channels.get(addr).stream_unary(f"/{SERVICE}/Stream")()

    def _failed(self, addr: str, lost: list[Queued], why: str) -> None:
        """Messages the link to ``addr`` could not write (``why``: queue_full, deadline, broken),
        handed back to their senders; a broken stream drops its channel, and so may a write that
        timed out on a channel that never connected (``Channels.stale``)."""
        if why == "broken":
            self.channels.forget(addr)
        elif why == "deadline" and addr in self.channels:
            self.spawn(self._forget_if_stale(addr, self.channels.open[addr]))
        for q in lost:
            q.sender.stream_failed([q], why)

    async def _forget_if_stale(self, addr: str, channel: grpc.aio.Channel) -> None:
        if await self.channels.stale(addr, channel, grpc.StatusCode.DEADLINE_EXCEEDED):
            self.channels.forget(addr)

    def close_unlinked(self, now: float) -> None:
        """Close the idle links to addresses none of the peers here links to (at most once per
        ``UNLINK_EVERY_S``)."""
        if now - self._unlinked_at < UNLINK_EVERY_S:
            return
        self._unlinked_at = now
        linked = {d.addr for p in self.peers.values() for d in p.core.union().values()}
        for addr in [a for a, link in self.links.items() if a not in linked and link.idle()]:
            self.spawn(self.links.pop(addr).close())
            self.channels.forget(addr)
            self.stats["channels_closed"] += 1

    # --- receiving --------------------------------------------------------------------------

    async def _rpc_ping(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return await answer_ping(self.refusals, f"process of {self.addr}", data, context)

    async def _rpc_stream(self, frames, context: grpc.aio.ServicerContext) -> bytes:
        """The receiving end of a link: every message of every frame to the peer it names, in
        order within its class; a bad frame or message is refused and counted, and the stream
        goes on."""
        await self.refusals.authorize(f"process of {self.addr}", context, PEER_SERVICE, "Stream")
        if not any(p.accepting for p in self.peers.values()):
            self.stats["refused_before_join"] += 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "not joined")
        async for data in frames:
            try:
                envelopes = frame_messages(data)
            except RemoteProtocolError as e:
                self.refusals.reject(f"process of {self.addr}", context.peer(), e)
                continue
            events = False
            for env in envelopes:
                events |= self._dispatch(env, context.peer())
            if events and self._queued() > INBOX_EVENTS:  # a link's event lane: stop reading it for now
                self._inbox_room.clear()
                await self._inbox_room.wait()
        return b""

    def _dispatch(self, env: peer_pb2.Envelope, origin: str) -> bool:
        """Hand ``env`` to its peer; whether it was an event copy (queued in the inbox)."""
        peer = self.peers.get(env.dst) if env.HasField("dst") else None
        try:
            if peer is None:
                raise RemoteProtocolError(f"a message for node {env.dst}, not hosted here" if env.HasField("dst")
                                          else "a message without the node it is for")
            wire = codec.WIRE_BY_RPC.get(env.rpc)
            if wire is None:
                raise RemoteProtocolError(f"a frame with a message of unknown type {env.rpc[:64]!r}")
            incoming = codec.decode(wire, env.data)
        except RemoteProtocolError as e:
            (peer.refusals if peer else self.refusals).reject(peer.node_id if peer else f"process of {self.addr}", origin, e)
            return False
        if not peer.accepting:
            peer.stats["refused_before_join"] += 1
        elif isinstance(incoming.msg, EventMsg):
            self._queue_event(peer, incoming.src, incoming.msg, remote_parent(*incoming.trace))
            return True
        else:
            peer.receive(incoming.src, incoming.msg, None)
        return False

    def _hand_over(self, q: Queued) -> None:
        """A message between two peers of this process, as ``_dispatch`` would deliver it decoded."""
        peer = self.peers.get(q.dst)
        if peer is None:
            self.refusals.reject(f"process of {self.addr}", q.sender.node_id, RemoteProtocolError(f"a message for node {q.dst}, not hosted here"))
        elif not peer.accepting:
            peer.stats["refused_before_join"] += 1
        elif isinstance(q.msg, EventMsg):
            parent = (q.span[0], q.span[1], True) if q.span else None  # as remote as one that came by stream
            self._queue_event(peer, q.sender.node_id, q.msg, parent)
        else:
            peer.receive(q.sender.node_id, q.msg, None)

    def _queue_event(self, peer: HostedPeer, src: int, msg: EventMsg, parent: SpanRef | None) -> None:
        (self._seen_inbox if msg.event_id in peer.core.seen else self._inbox).append((peer, src, msg, parent))
        if self._draining is None:
            self._draining = self._loop.create_task(self._drain_events())

    def _queued(self) -> int:
        return len(self._inbox) + len(self._seen_inbox)

    def backlogs(self) -> dict[str, int]:
        """What waits in this process: event copies in the inbox, messages queued on its links
        and held by the link emulation, spans not yet exported."""
        return {"inbox": self._queued(),
                "link_queue": sum(len(link.control.queue) + len(link.events.queue) for link in self.links.values()),
                "held": sum(len(held) for _, held in self._due.values()),
                "span_backlog": len(self.spans.rows)}

    async def _drain_events(self) -> None:
        """Hand queued event copies to their peers, first copies first, yielding to the loop every
        ``EVENTS_PER_TURN``."""
        first, seen = self._inbox, self._seen_inbox
        try:
            while first or seen:
                for _ in range(EVENTS_PER_TURN):
                    if first:
                        peer, src, msg, parent = first.popleft()
                    elif seen:
                        peer, src, msg, parent = seen.popleft()
                    else:
                        break
                    if peer.node_id in self.peers:  # not stopped meanwhile
                        peer.receive(src, msg, parent)
                if self._queued() <= INBOX_EVENTS:
                    self._inbox_room.set()
                await asyncio.sleep(0)
        finally:
            self._draining = None
            self._inbox_room.set()
