"""Links as long-lived gRPC streams (``transport.mode: stream``).

Theory of operation

A process keeps one ``Link`` per destination address its peers send to (the peers of a process
share one address, :mod:`node.transport.host`): two lanes, control (gossip, replies and
signals) and events, each a bounded queue and a task that writes it, as ``Frame``\\ s, into a
client stream of its own (the Peer service's ``Stream`` call) to that address. Separate streams
keep event traffic from starving the overlay at both ends: a receiver whose event inbox is full
stops reading event streams (gRPC flow control then holds the sender's writes), while its
control streams go on. Each lane coalesces what is queued into one frame, up to
``coalesce_max_bytes``: what queued while the last frame was being written, and what comes within
``coalesce_window_ms`` (0 by default) after the first message.
A replaced unary call per message costs a task, a call and an HTTP/2 stream each; a frame costs
one write.

Backpressure is a failed send, never an unbounded queue: a message that finds its queue full
(``queue_messages``), or waits longer than ``deadline_ms`` (queued, or in a write the receiver's
flow control holds up), is handed back to the core's ``on_send_failed`` as the unary path hands
back a call that failed; so is everything queued or in flight when the stream breaks (the
receiver crashed, or refused the stream). The next message opens a new stream. Exchanges work
one way: the partner's reply is an ordinary message on its own link back, matched to the
request by the core (``PendingReplies``), which also times out a reply that never comes.

Link emulation stays per message and happens before queueing (the shell samples each message's
delay or loss and enqueues it when the delay has passed), so delay, jitter, loss, bandwidth and
partitions mean what they mean for the unary transport.

Choices (not from a paper; named settings of the experiment file's ``transport`` section):
``queue_messages``, ``coalesce_window_ms``, ``coalesce_max_bytes``, ``deadline_ms``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from node._gen.overlaylab.v1 import peer_pb2
from node.kit.types import EventMsg, Message
from node.transport.settings import TransportSettings
from node.wire import codec

log = logging.getLogger("overlaylab.peer")


@dataclass(slots=True)
class Queued:
    sender: Any  # the PeerShell that sent it
    dst: int
    msg: Message
    envelope: peer_pb2.Envelope
    size: int
    queued_at: float
    span: object


Failed = Callable[[str, list[Queued], str], None]
"""(address, messages, reason): hands messages that could not be written back to their senders."""

_FRAME_OVERHEAD = 8  # bytes of framing per envelope, at most (tag + length of the message field)


class Link:
    """The streams to one address: a lane for control messages and one for events."""

    def __init__(self, addr: str, opener: Callable[[], Awaitable[grpc.aio.StreamUnaryCall]], settings: TransportSettings,
                 failed: Failed, clock: Callable[[], float], stats: Counter[str]) -> None:
        self.control = _Lane(addr, opener, settings, failed, clock, stats)
        self.events = _Lane(addr, opener, settings, failed, clock, stats)

    def put(self, q: Queued) -> bool:
        """Queue ``q`` in its lane; False when that lane is full (the caller fails the send)."""
        return (self.events if isinstance(q.msg, EventMsg) else self.control).put(q)

    def idle(self) -> bool:
        return self.control.idle() and self.events.idle()

    async def close(self) -> None:
        await self.control.close()
        await self.events.close()


class _Lane:
    """One bounded queue and the task that writes it, coalesced into frames, into a stream of
    its own: a receiver that stops reading a link's events (its inbox is full) still reads its
    control messages."""

    def __init__(self, addr: str, opener: Callable[[], Awaitable[grpc.aio.StreamUnaryCall]], settings: TransportSettings,
                 failed: Failed, clock: Callable[[], float], stats: Counter[str]) -> None:
        self.addr, self.open, self.settings, self.failed, self.clock = addr, opener, settings, failed, clock
        self.stats = stats
        """Frames and messages written (``stream_frames``, ``stream_messages``)."""
        self.queue: deque[Queued] = deque()
        self.ready = asyncio.Event()
        self.call: grpc.aio.StreamUnaryCall | None = None
        self.task = asyncio.get_running_loop().create_task(self._run())

    def put(self, q: Queued) -> bool:
        if len(self.queue) >= self.settings.queue_messages:
            return False
        self.queue.append(q)
        self.ready.set()
        return True

    def idle(self) -> bool:
        return not self.queue

    def _take(self) -> list[Queued]:
        """The next frame's messages, up to the size limit; those past their deadline fail
        instead."""
        limit, deadline = self.settings.coalesce_max_bytes, self.settings.deadline_ms / 1000.0
        now, taken, size, expired = self.clock(), [], 0, []
        queue = self.queue
        while queue and (not taken or size + queue[0].size + _FRAME_OVERHEAD <= limit):
            q = queue.popleft()
            if now - q.queued_at > deadline:
                expired.append(q)
                continue
            taken.append(q)
            size += q.size + _FRAME_OVERHEAD
        if expired:
            self.failed(self.addr, expired, "deadline")
        return taken

    async def _run(self) -> None:
        window = self.settings.coalesce_window_ms / 1000.0
        while True:
            await self.ready.wait()
            if window:
                await asyncio.sleep(window)
            try:
                batch = self._take()
                if self.idle():
                    self.ready.clear()
                if batch:
                    await self._write(batch)
            except Exception:  # a core's failure handling raised: logged, and the lane goes on
                log.exception("link to %s", self.addr)

    async def _write(self, batch: list[Queued]) -> None:
        frame = peer_pb2.Frame(messages=[q.envelope for q in batch]).SerializeToString()
        deadline = self.settings.deadline_ms / 1000.0 - (self.clock() - min(q.queued_at for q in batch))
        try:
            if self.call is None or self.call.done():  # first use, or the receiver ended the last stream
                self.call = await self.open()
            async with asyncio.timeout(max(deadline, 0.001)):  # no task of its own, as wait_for makes
                await self.call.write(frame)
            self.stats["stream_frames"] += 1
            self.stats["stream_messages"] += len(batch)
        except TimeoutError:  # the receiver's flow control held the write past the deadline
            self._fail_all(batch, "deadline")
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as e:
            log.debug("stream to %s broke: %r", self.addr, e)
            self._fail_all(batch, "broken")

    def _fail_all(self, batch: list[Queued], why: str) -> None:
        """Abandon the stream (a new one opens for the next message) and fail ``batch`` and
        everything queued, before the core sees them: it may send again at once."""
        self._break()
        lost = [*batch, *self.queue]
        self.queue.clear()
        self.failed(self.addr, lost, why)

    def _break(self) -> None:
        if self.call is not None:
            self.call.cancel()
            self.call = None

    async def close(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        if self.call is not None:
            try:
                await self.call.done_writing()
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                pass
            self._break()


def envelope(msg: Message, sender: int, dst: int, trace: codec.TraceIds) -> peer_pb2.Envelope:
    return peer_pb2.Envelope(rpc=codec.wire_type(msg).rpc, data=codec.encode(msg, sender, trace), dst=dst)


def frame_messages(data: bytes) -> list[peer_pb2.Envelope]:
    """The envelopes of a received frame; RemoteProtocolError for a frame a peer must refuse."""
    return list(codec.parse(peer_pb2.Frame, data).messages)
