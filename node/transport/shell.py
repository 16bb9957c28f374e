"""The gRPC shell: drives one protocol core with real gRPC, real time and OpenTelemetry.

Small and boring on purpose: decode, feed the core, carry out its actions, arm one timer per
name. Peer messages arrive as raw bytes (the handlers do their own decoding), so a malformed or
oversized message is rejected with INVALID_ARGUMENT, counted in ``malformed`` and logged; it
never reaches the core, and never stops the peer.

Push-pull gossip maps onto one unary call: the initiator's ``Send`` of a request becomes an
``Exchange`` call; the partner feeds the request to its core, and the reply ``Send`` it returns
becomes the call's response. Event copies are ``Forward`` calls carrying the sender's span
context. Link emulation (:mod:`node.links`) delays or drops each message at send time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import random
import time
from collections import Counter
from pathlib import Path

import grpc

from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc, peer_pb2, peer_pb2_grpc
from node.core import create_protocol
from node.core.base import Protocol
from node.core.types import (
    Action, Deliver, Descriptor, EventMsg, Gossip, LocalProtocolError, Published, RemoteProtocolError, Send,
    SetTimer,
)
from node.links import LinkModel, LinkRule

from . import codec
from .telemetry import PeerTelemetry, context_bytes, remote_parent

log = logging.getLogger("overlaylab.peer")

SERVICE = "overlaylab.v1.Peer"
CHANNEL_OPTIONS = [
    # A peer that crashed and restarted on its port should be reachable again within a cycle,
    # not after gRPC's default reconnect backoff (up to two minutes).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class PeerShell(control_pb2_grpc.ControlServicer):
    def __init__(self, node_id: int, protocol: str, params, seed: int, run_id: str,
                 trace_dir: Path | None, host: str = "127.0.0.1", state_path: Path | None = None, *,
                 advertise: str | None = None, otlp_endpoint: str | None = None,
                 refuse_before_join: bool = False) -> None:
        self.node_id = node_id
        self.protocol_name = protocol
        self.params = params
        self.seed = seed
        self.host = host
        self.advertise = advertise or host
        """The host name other peers reach this one by (a pod's DNS name where ``host`` is 0.0.0.0)."""
        self.refuse_before_join = refuse_before_join
        """Answer peer traffic with UNAVAILABLE until ``Join``: a pod that Kubernetes restarts at
        once is still down for the plan until the controller joins it again."""
        self.joined = False
        self.telemetry = PeerTelemetry(run_id, node_id, protocol, trace_dir, otlp_endpoint)
        self.stats: Counter[str] = Counter()
        self.links = LinkModel([], random.Random(f"{seed}:links:{node_id}"))
        self.core: Protocol | None = None
        self.server: grpc.aio.Server | None = None
        self._channels: dict[str, tuple[grpc.aio.Channel, peer_pb2_grpc.PeerStub]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task] = set()
        self.addr = ""
        self.state_path = state_path
        """If set, the core is checkpointed there every timer tick and restored at start."""

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self, port: int = 0) -> int:
        limit = codec.MAX_MESSAGE_BYTES + 1024
        self.server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", 4 * limit), ("grpc.so_reuseport", 0),
        ])
        raw = dict(request_deserializer=None, response_serializer=None)
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {
            "Exchange": grpc.unary_unary_rpc_method_handler(self._rpc_exchange, **raw),
            "Forward": grpc.unary_unary_rpc_method_handler(self._rpc_forward, **raw),
            "Ping": grpc.unary_unary_rpc_method_handler(self._rpc_ping, **raw),
        })])
        control_pb2_grpc.add_ControlServicer_to_server(self, self.server)
        port = self.server.add_insecure_port(f"{self.host}:{port}")
        await self.server.start()
        self.addr = f"{self.advertise}:{port}"
        me = Descriptor(self.node_id, self.addr)
        if self.state_path is not None and self.state_path.exists():
            self.core = pickle.loads(self.state_path.read_bytes())
            self.core.me = Descriptor(self.node_id, self.addr, self.core.me.topics, 0, self.core.me.priorities)
            self.stats["restored_state"] += 1
        else:
            self.core = create_protocol(self.protocol_name, me, self.params, random.Random(f"{self.seed}:node:{self.node_id}"))
        return port

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
        if self.server is not None:
            await self.server.stop(grace=0.5)
        for channel, _ in self._channels.values():
            await channel.close()
        self.telemetry.shutdown()

    # --- driving the core -------------------------------------------------------------------

    @property
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def _execute(self, actions: list[Action], parent=None, reply_to: int | None = None, links=()):
        """Carry out ``actions``; returns the reply Gossip addressed to ``reply_to``, if any.
        ``links``: span contexts the publish span links to (the load generator's request)."""
        reply = None
        span = parent
        for a in actions:
            if isinstance(a, Send):
                if reply_to is not None and isinstance(a.msg, Gossip) and a.msg.reply and a.dst == reply_to:
                    reply = a.msg
                else:
                    self._spawn(self._send(a, span))
            elif isinstance(a, SetTimer):
                old = self._timers.pop(a.name, None)
                if old is not None:
                    old.cancel()
                self._timers[a.name] = asyncio.get_running_loop().call_at(a.at, self._on_timer, a.name)
            elif isinstance(a, Deliver):
                self.stats["events_received"] += 1
                self.stats["duplicates"] += not a.first_copy
                span = self.telemetry.span("receive", parent, self._attributes(a.event, a.src, a.first_copy, a.subscriber))
            elif isinstance(a, Published):
                self.stats["events_published"] += 1
                span = self.telemetry.span("publish", None, self._attributes(a.event, None, True, a.event.topic in self.core.topics),
                                           links=links)
        return reply

    def _attributes(self, e: EventMsg, src: int | None, first: bool, subscriber: bool) -> dict:
        attrs = {
            "pubsub.event_id": e.event_id, "pubsub.topic": e.topic, "pubsub.node": self.node_id,
            "pubsub.hops": e.hops, "pubsub.first_copy": first, "pubsub.subscriber": subscriber,
        }
        if src is not None:
            attrs["pubsub.from"] = src
        return attrs

    def _on_timer(self, name: str) -> None:
        self._timers.pop(name, None)
        self._execute(self.core.on_timer(name, self.now))
        self.checkpoint()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _count_gossip(self, msg: Gossip, size: int) -> None:
        self.stats[f"msgs_sent.{msg.layer}"] += 1
        self.stats[f"bytes_sent.{msg.layer}"] += size

    def _stub(self, addr: str) -> peer_pb2_grpc.PeerStub:
        entry = self._channels.get(addr)
        if entry is None:
            channel = grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
            entry = self._channels[addr] = (channel, peer_pb2_grpc.PeerStub(channel))
        return entry[1]

    async def _send(self, a: Send, span) -> None:
        # Sizes are needed for gossip byte counts and for bandwidth emulation; an event copy is
        # not encoded twice just to be measured otherwise.
        gossip = isinstance(a.msg, Gossip)
        size = codec.wire_size(a.msg, self.node_id) if gossip or self.links.bandwidth_kbps else 0
        if gossip:
            self._count_gossip(a.msg, size)
        else:
            self.stats["events_sent"] += 1
        delay = self.links.sample(self.node_id, a.dst, size, self.now)
        if delay is None:
            self.stats["dropped_by_link"] += 1
            return
        if delay:
            await asyncio.sleep(delay)
        stub = self._stub(a.addr)
        try:
            if isinstance(a.msg, Gossip):
                timeout = getattr(getattr(self.params, "cyclon", self.params), "timeout_ms", 1000.0) / 1000.0
                response = await stub.Exchange(codec.gossip_to_pb(a.msg), timeout=timeout + 1.0)
                self._receive(a.dst, codec.gossip_from_pb(response), None)
            else:
                trace_id, span_id = context_bytes(span)
                await stub.Forward(codec.event_to_pb(a.msg, self.node_id, trace_id, span_id), timeout=10.0)
        except grpc.aio.AioRpcError as e:
            self.stats["send_failed"] += 1
            log.debug("node %d: send to %d failed: %s", self.node_id, a.dst, e.code())
            self._execute(self.core.on_send_failed(a.dst, a.msg, self.now), span)
        except RemoteProtocolError as e:
            self._reject(a.dst, e)

    def _receive(self, src: int, msg, parent, reply_to: int | None = None):
        try:
            actions = self.core.on_message(src, msg, self.now)
        except RemoteProtocolError as e:
            self._reject(src, e)
            return None
        return self._execute(actions, parent, reply_to)

    def _reject(self, src, err: Exception) -> None:
        self.stats["malformed"] += 1
        log.warning("node %d: rejected a message from %s: %s", self.node_id, src, err)

    # --- peer service (raw bytes in, raw bytes out) -----------------------------------------

    async def _refuse_if_down(self, context: grpc.aio.ServicerContext) -> None:
        if self.refuse_before_join and not self.joined:
            self.stats["refused_before_join"] += 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "not joined")

    async def _rpc_exchange(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await self._refuse_if_down(context)
        try:
            msg = codec.gossip_from_pb(codec.parse(peer_pb2.GossipMessage, data))
            if msg.reply:
                raise RemoteProtocolError("an Exchange request marked as a reply")
        except RemoteProtocolError as e:
            self._reject(context.peer(), e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        src = msg.sender.node_id
        reply = self._receive(src, msg, None, reply_to=src)
        if reply is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no reply")
        data = codec.gossip_to_pb(reply).SerializeToString()
        self._count_gossip(reply, len(data))
        delay = self.links.sample(self.node_id, src, len(data), self.now)
        if delay is None:
            self.stats["dropped_by_link"] += 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "reply lost (link emulation)")
        if delay:
            await asyncio.sleep(delay)
        return data

    async def _rpc_forward(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await self._refuse_if_down(context)
        try:
            pb = codec.parse(peer_pb2.EventMessage, data)
            msg = codec.event_from_pb(pb)
        except RemoteProtocolError as e:
            self._reject(context.peer(), e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        self._receive(pb.sender, msg, remote_parent(pb.trace.trace_id, pb.trace.span_id))
        return b""

    async def _rpc_ping(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        received = time.time_ns()
        try:
            codec.parse(peer_pb2.Probe, data)
        except RemoteProtocolError as e:
            self._reject(context.peer(), e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return peer_pb2.ProbeAck(received_unix_nano=received).SerializeToString()

    # --- control service --------------------------------------------------------------------

    async def Join(self, request, context):
        for topic in request.topics:
            self.core.subscribe(topic, self.now)
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
        self._execute(actions, links=[link] if link else [])
        event = next(a.event for a in actions if isinstance(a, Published))
        return control_pb2.PublishReply(event_id=event.event_id)

    async def GetStats(self, request, context):
        counters = dict(self.stats)
        counters["spans_ended"] = self.telemetry.ended
        counters["spans_exported"] = self.telemetry.exporter.exported
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
        stub = self._stub(request.addr)
        size = peer_pb2.Probe(seq=1).ByteSize()

        async def probe(seq: int) -> float | None:
            await asyncio.sleep(seq * request.interval_ms / 1000.0)
            sent = time.time_ns()
            delay = self.links.sample(self.node_id, request.node_id, size, self.now)
            if delay is None:
                return None
            await asyncio.sleep(delay)
            try:
                ack = await stub.Ping(peer_pb2.Probe(seq=seq), timeout=10.0)
            except grpc.aio.AioRpcError:
                return None
            return (ack.received_unix_nano - sent) / 1e6

        delays = await asyncio.gather(*(probe(k) for k in range(request.count)))
        return control_pb2.ProbeReport(sent=request.count, delays_ms=[d for d in delays if d is not None])

    async def Leave(self, request, context):
        self._execute(self.core.leave(self.now))
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
        self.checkpoint()
        dropped = await asyncio.get_running_loop().run_in_executor(None, self.telemetry.flush)
        self.stats["spans_dropped"] = dropped
        return peer_pb2.Ack()
