"""The one mapping between protobuf (``node/_gen``) and core dataclasses (``node/kit/types``).

``decode_*`` raise :class:`RemoteProtocolError` for anything a correct peer never sends: bytes
that do not parse, missing fields, oversized lists or strings. Limits are module constants so the
shell, the simulator and the tests agree on them.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError

from node._gen.overlaylab.v1 import control_pb2, peer_pb2
from node.kit.links import BANDWIDTH_KBPS, MAX_DELAY_MS
from node.kit.types import Descriptor, EventMsg, Gossip, LayerSnapshot, Message, NodeId, NodeSnapshot, RemoteProtocolError, Signal
from node.transport.settings import MAX_MESSAGE_BYTES

TraceIds = tuple[bytes, bytes]
NO_TRACE: TraceIds = (b"", b"")


class Incoming(NamedTuple):
    """A decoded peer message: the message, the node that sent it, its trace context."""

    msg: Message
    src: NodeId
    trace: TraceIds = NO_TRACE

MAX_ENTRIES = 256
"""Most descriptors in a gossip message or a join's contacts."""
MAX_SIGNAL_ITEMS = 16_384
"""Most descriptors, and most values, in one signal: a DPS leader's state for its co-leaders
lists every member of its group and every child group (a stock-workload group at 10,000 nodes
has over 600 members); MAX_MESSAGE_BYTES bounds a signal's bytes all the same."""
MAX_TOPICS = 16_384
"""Most topics in one profile. Social workloads are heavy-tailed: the 10,000-node Twitter-like
workload has a subscriber to 4,334 topics (a 77 KB profile with priorities), and a VICINITY
message of the 11 heaviest profiles is 424 KB, inside MAX_MESSAGE_BYTES."""
MAX_NAME = 256
"""Longest topic, layer, event id or address (characters)."""


MAX_HOPS = 1 << 16
"""Largest hop count an event may carry."""
MAX_PAYLOAD_BYTES = MAX_MESSAGE_BYTES - (64 << 10)
"""Largest payload a Publish takes: its event must fit a peer message with room for the rest."""
MAX_PROBES = 10_000
"""Most probes one ProbeLink sends."""

CONTROL_REQUESTS: dict[str, type] = {
    "Join": control_pb2.JoinRequest, "Subscribe": control_pb2.TopicRequest,
    "Unsubscribe": control_pb2.TopicRequest, "Publish": control_pb2.PublishRequest,
    "GetStats": control_pb2.Empty, "GetSnapshot": control_pb2.Empty, "SetLinkRules": control_pb2.LinkRules,
    "ProbeLink": control_pb2.ProbeRequest, "Leave": control_pb2.Empty,
}
"""The Control service's methods and their request types."""


def control_request(method: str, data: bytes) -> Any:
    """Decode and check a Control request; RemoteProtocolError for one a peer must refuse (an
    empty or overlong topic, too many topics, an oversized payload, a link delay outside
    [0, MAX_DELAY_MS], a loss outside [0, 1] or a bandwidth outside BANDWIDTH_KBPS, too many probes)."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise RemoteProtocolError(f"control message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        req = CONTROL_REQUESTS[method].FromString(data)
    except DecodeError as e:
        raise RemoteProtocolError(f"undecodable {method} request: {e}") from None
    topics = list(getattr(req, "topics", ()))
    if isinstance(req, (control_pb2.TopicRequest, control_pb2.PublishRequest)):
        topics.append(req.topic)
    if len(topics) > MAX_TOPICS or len(getattr(req, "contacts", ())) > MAX_ENTRIES:
        raise RemoteProtocolError(f"{method} with {len(topics)} topics (limit {MAX_TOPICS}) "
                                  f"or {len(getattr(req, 'contacts', ()))} contacts (limit {MAX_ENTRIES})")
    if any(not t for t in topics):
        raise RemoteProtocolError(f"{method} with an empty topic")
    _check_names(*topics)
    for c in getattr(req, "contacts", ()):
        descriptor_from_pb(c)
    if isinstance(req, control_pb2.PublishRequest):
        if len(req.payload) > MAX_PAYLOAD_BYTES:
            raise RemoteProtocolError(f"payload of {len(req.payload)} bytes (limit {MAX_PAYLOAD_BYTES})")
        check_trace(req.trace_id, req.span_id)
    if isinstance(req, control_pb2.LinkRules):
        delays = [v for r in req.rules for v in (r.delay_ms, r.jitter_ms)] + [*req.base_delay_ms]
        if not all(0 <= v <= MAX_DELAY_MS for v in delays):  # False for NaN too
            raise RemoteProtocolError(f"link rule with a delay or jitter outside [0, {MAX_DELAY_MS:g}] ms")
        if not all(0 <= r.loss <= 1 for r in req.rules):
            raise RemoteProtocolError("link rule with a loss outside [0, 1]")
        if req.bandwidth_kbps and not BANDWIDTH_KBPS[0] <= req.bandwidth_kbps <= BANDWIDTH_KBPS[1]:
            raise RemoteProtocolError(f"bandwidth of {req.bandwidth_kbps:g} kbps (0 for none, or {BANDWIDTH_KBPS[0]:g} to {BANDWIDTH_KBPS[1]:g})")
    if isinstance(req, control_pb2.ProbeRequest):
        if req.count > MAX_PROBES or not (math.isfinite(req.interval_ms) and 0 <= req.interval_ms <= 60_000):
            raise RemoteProtocolError(f"probe count {req.count} (limit {MAX_PROBES}) or interval {req.interval_ms} ms")
        _check_names(req.addr)
    return req


CACHED_DESCRIPTORS = 16_384
"""Descriptors whose encoding, and encodings whose descriptor, each process keeps: the same
profiles travel again and again (a CYCLON exchange between two processes cost 80 us of codec
without, most of it building and checking descriptors)."""
_ENCODED: dict[tuple, peer_pb2.NodeDescriptor] = {}
_DECODED: dict[bytes, Descriptor] = {}


def _remember(cache: dict, key, value):
    if len(cache) >= CACHED_DESCRIPTORS:
        cache.clear()
    cache[key] = value
    return value


def descriptor_to_pb(d: Descriptor) -> peer_pb2.NodeDescriptor:
    """``d`` as protobuf; the caller must not change the message (it is shared)."""
    key = (d.node_id, d.addr, d.topics, d.age, d.priorities)
    pb = _ENCODED.get(key)
    if pb is None:
        pb = _remember(_ENCODED, key, peer_pb2.NodeDescriptor(
            node_id=d.node_id, addr=d.addr, topics=sorted(d.topics), age=d.age,
            priorities=[peer_pb2.TopicPriority(topic=t, priority=p) for t, p in d.priorities]))
    return pb


def descriptor_from_pb(pb: peer_pb2.NodeDescriptor) -> Descriptor:
    data = pb.SerializeToString()
    d = _DECODED.get(data)
    if d is None:
        d = _remember(_DECODED, data, _check_descriptor(pb))
    return d


def _check_descriptor(pb: peer_pb2.NodeDescriptor) -> Descriptor:
    if len(pb.topics) > MAX_TOPICS or len(pb.priorities) > len(pb.topics):
        raise RemoteProtocolError(f"descriptor with {len(pb.topics)} topics, {len(pb.priorities)} priorities")
    _check_names(pb.addr, *pb.topics)
    priorities = tuple((p.topic, p.priority) for p in pb.priorities)
    if len({t for t, _ in priorities}) < len(priorities):
        raise RemoteProtocolError("descriptor with a topic priority given twice")
    return Descriptor(pb.node_id, pb.addr, frozenset(pb.topics), pb.age, priorities)


def _sender(pb: Any, what: str) -> Descriptor:
    if not pb.HasField("sender"):
        raise RemoteProtocolError(f"{what} without a sender")
    return descriptor_from_pb(pb.sender)


def _entries(pb: Any, limit: int = MAX_ENTRIES) -> tuple[Descriptor, ...]:
    if len(pb.entries) > limit:
        raise RemoteProtocolError(f"message with {len(pb.entries)} entries (limit {limit})")
    return tuple(descriptor_from_pb(d) for d in pb.entries)


def gossip_to_pb(m: Gossip, sender: int = 0, trace: TraceIds = NO_TRACE) -> peer_pb2.GossipMessage:
    return peer_pb2.GossipMessage(
        layer=m.layer, sender=descriptor_to_pb(m.sender),
        entries=[descriptor_to_pb(d) for d in m.entries], reply=m.reply, recent=list(m.recent),
    )


def gossip_from_pb(pb: peer_pb2.GossipMessage) -> Gossip:
    if not pb.layer:
        raise RemoteProtocolError("gossip message without a layer")
    if len(pb.recent) > MAX_SIGNAL_ITEMS:
        raise RemoteProtocolError(f"gossip message with {len(pb.recent)} recent event ids")
    _check_names(pb.layer, *pb.recent)
    return Gossip(pb.layer, _sender(pb, "gossip message"), _entries(pb), pb.reply, tuple(pb.recent))


def signal_to_pb(m: Signal, sender: int = 0, trace: TraceIds = NO_TRACE) -> peer_pb2.SignalMessage:
    return peer_pb2.SignalMessage(
        layer=m.layer, kind=m.kind, sender=descriptor_to_pb(m.sender),
        entries=[descriptor_to_pb(d) for d in m.entries], topics=list(m.topics), values=list(m.values),
    )


def signal_from_pb(pb: peer_pb2.SignalMessage) -> Signal:
    if not pb.layer or not pb.kind:
        raise RemoteProtocolError("signal without a layer or a kind")
    if len(pb.topics) > MAX_TOPICS or len(pb.values) > MAX_SIGNAL_ITEMS:
        raise RemoteProtocolError(f"signal with {len(pb.topics)} topics, {len(pb.values)} values")
    _check_names(pb.layer, pb.kind, *pb.topics)
    return Signal(pb.layer, pb.kind, _sender(pb, "signal"), _entries(pb, MAX_SIGNAL_ITEMS), tuple(pb.topics), tuple(pb.values))


def event_to_pb(m: EventMsg, sender: int, trace: TraceIds = NO_TRACE) -> peer_pb2.EventMessage:
    return peer_pb2.EventMessage(
        event_id=m.event_id, topic=m.topic, payload=m.payload, hops=m.hops,
        publisher=m.publisher, sender=sender,
        trace=peer_pb2.TraceContext(trace_id=trace[0], span_id=trace[1]),
    )


def event_from_pb(pb: peer_pb2.EventMessage) -> EventMsg:
    if not pb.event_id or not pb.topic or not 1 <= pb.hops <= MAX_HOPS:
        raise RemoteProtocolError(f"event without id or topic, or with hop count {pb.hops} (1 to {MAX_HOPS})")
    _check_names(pb.event_id, pb.topic)
    return EventMsg(pb.event_id, pb.topic, pb.payload, pb.publisher, pb.hops)


def check_trace(trace_id: bytes, span_id: bytes) -> None:
    """RemoteProtocolError unless the trace context is absent or a valid W3C one (a 16-byte trace
    id and an 8-byte span id, neither all zero)."""
    if (trace_id or span_id) and (len(trace_id) != 16 or len(span_id) != 8 or not any(trace_id) or not any(span_id)):
        raise RemoteProtocolError(f"trace context of {len(trace_id)} and {len(span_id)} bytes, or all zero "
                                  "(16 and 8, not zero, or none)")


def _event_origin(pb: peer_pb2.EventMessage, msg: Message) -> tuple[NodeId, TraceIds]:
    check_trace(pb.trace.trace_id, pb.trace.span_id)
    return pb.sender, (pb.trace.trace_id, pb.trace.span_id)


def _sender_origin(pb: Any, msg: Gossip | Signal) -> tuple[NodeId, TraceIds]:
    return msg.sender.node_id, NO_TRACE


@dataclass(frozen=True)
class WireType:
    """How one core message type travels: its protobuf class, the Peer RPC that carries it and
    whether the RPC's response is a message of the same type (request/reply) or an Ack."""

    core: type
    pb: type
    rpc: str
    encode: Callable[[Any, int, TraceIds], Any]
    """(message, sending node, trace context of the sender's span) -> protobuf."""
    decode: Callable[[Any], Any]
    """protobuf -> the message; RemoteProtocolError if a correct peer would never send it."""
    origin: Callable[[Any, Any], tuple[NodeId, TraceIds]]
    """(protobuf, message) -> the node that sent it and its trace context."""
    exchange: bool = False
    """Request/reply: the partner's reply travels back as the response."""


WIRE_TYPES = (
    WireType(Gossip, peer_pb2.GossipMessage, "Exchange", gossip_to_pb, gossip_from_pb, _sender_origin, exchange=True),
    WireType(EventMsg, peer_pb2.EventMessage, "Forward", event_to_pb, event_from_pb, _event_origin),
    WireType(Signal, peer_pb2.SignalMessage, "Signal", signal_to_pb, signal_from_pb, _sender_origin),
)
"""Every message type of the Peer service, registered once: the shell serves and calls these
RPCs, the simulator round-trips through them, the tests fuzz each."""
_BY_CORE = {w.core: w for w in WIRE_TYPES}
WIRE_BY_RPC = {w.rpc: w for w in WIRE_TYPES}


def wire_type(m: Message) -> WireType:
    return _BY_CORE[type(m)]


def is_reply(m: Message) -> bool:
    """A message that answers an exchange (travels as the response of the request's call)."""
    return isinstance(m, Gossip) and m.reply


def encode(m: Message, sender: int, trace: TraceIds = NO_TRACE) -> bytes:
    return wire_type(m).encode(m, sender, trace).SerializeToString()


def decode(wire: WireType, data: bytes) -> Incoming:
    """Parse and check ``data`` as a message of ``wire``; RemoteProtocolError if it is bad."""
    pb = parse(wire.pb, data)
    msg = wire.decode(pb)
    return Incoming(msg, *wire.origin(pb, msg))


def parse(pb_class: type, data: bytes):
    """Parse ``data`` as ``pb_class``, enforcing the size limit."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise RemoteProtocolError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    msg = pb_class()
    try:
        msg.ParseFromString(data)
    except DecodeError as e:
        raise RemoteProtocolError(f"undecodable {pb_class.__name__}: {e}") from None
    return msg


def wire_size(m: Message, sender: int) -> int:
    """Encoded size in bytes. Gossip and signal sizes are summed from each descriptor's measured
    profile size (``Descriptor.profile_bytes``: the same profiles travel again and again) with
    protobuf's framing arithmetic (``test_conformance`` checks it against the encoding)."""
    kind = type(m)
    if kind is Gossip:
        size = _layer_field(m.layer) + (2 if m.reply else 0)
        if m.recent:
            size += sum(_field(len(i.encode())) for i in m.recent)
    elif kind is Signal:
        size = _layer_field(m.layer) + _layer_field(m.kind) + sum(_field(len(t.encode())) for t in m.topics)
        if m.values:
            size += _field(sum(_varint_len(v if v >= 0 else v + (1 << 64)) for v in m.values))
    else:
        return wire_type(m).encode(m, sender, NO_TRACE).ByteSize()
    for d in (m.sender, *m.entries):
        n = d.profile_bytes or _measure_profile(d)
        if d.age:
            n += 2 if d.age < 128 else 1 + _varint_len(d.age)
        size += n + (2 if n < 128 else 1 + _varint_len(n))
    return size


def profile_size(d: Descriptor) -> int:
    """The encoded size of ``d``'s profile (all but its age), as ``wire_size`` counts it."""
    return d.profile_bytes or _measure_profile(d)


def priority_topic_bytes(t: str) -> int:
    """The bytes topic ``t`` takes in a profile's TopicPriority, as ``wire_size`` counts them."""
    return _topic_field(t) if t else 0


def layer_bytes(layer: str) -> int:
    """The bytes a message's ``layer`` field takes, as ``wire_size`` counts them."""
    return _layer_field(layer)


_PROFILE_SIZES: dict[tuple[int, int, int], tuple[Descriptor, int]] = {}
_PROFILE_SIZES_MAX = 200_000


def _measure_profile(d: Descriptor) -> int:
    """The encoded size of ``d``'s profile, kept on ``d`` (a cache on an immutable value). Fresh
    copies of one profile (a node's ``me.aged(0)`` in every message it sends) share its parts:
    sizes are also memoized by the identity of the parts; the entry keeps them alive, so their
    ids are not reused while cached."""
    key = (d.node_id, id(d.topics), id(d.priorities))
    hit = _PROFILE_SIZES.get(key)
    if hit is not None and hit[0].topics is d.topics and hit[0].priorities is d.priorities and hit[0].addr == d.addr:
        size = hit[1]
    else:
        if len(_PROFILE_SIZES) >= _PROFILE_SIZES_MAX:
            _PROFILE_SIZES.clear()
        size = _profile_size(d)
        _PROFILE_SIZES[key] = (d, size)
    object.__setattr__(d, "profile_bytes", size)
    return size


@functools.lru_cache(maxsize=_PROFILE_SIZES_MAX)
def _topic_field(t: str) -> int:
    return _field(len(t.encode()))


def _profile_size(d: Descriptor) -> int:
    """The encoded size of ``d`` at age 0 (a ``NodeDescriptor``), by protobuf's framing
    arithmetic rather than by building the message: a heavy subscriber's profile has thousands
    of topics and priorities, and the simulator measures each new one."""
    topic = _topic_field
    size = (1 + _varint_len(d.node_id) if d.node_id else 0) + (_field(len(d.addr.encode())) if d.addr else 0)
    size += sum(map(topic, d.topics))
    for t, p in d.priorities:  # TopicPriority{topic = 1, priority = 2}, each a length-delimited field
        size += _field((topic(t) if t else 0) + (1 + _varint_len(p) if p else 0))
    return size


@functools.cache
def _layer_field(layer: str) -> int:
    return _field(len(layer.encode())) if layer else 0


def _field(n: int) -> int:
    """Bytes of a length-delimited field with a one-byte tag and an n-byte payload."""
    return 1 + _varint_len(n) + n


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def roundtrip(m: Message, sender: int) -> tuple[Message, int]:
    """Encode and decode ``m`` as the wire would (the simulator's codec check).
    Returns the decoded message and its size in bytes."""
    wire = _BY_CORE[type(m)]
    data = wire.encode(m, sender, NO_TRACE).SerializeToString()
    return wire.decode(parse(wire.pb, data)), len(data)


def snapshot_to_pb(s: NodeSnapshot) -> control_pb2.Snapshot:
    return control_pb2.Snapshot(
        node_id=s.node_id, topics=s.topics,
        layers=[
            control_pb2.LayerLinks(
                layer=layer.layer, neighbours=layer.neighbours,
                per_topic={t: control_pb2.NodeList(nodes=ns) for t, ns in layer.per_topic.items()},
            )
            for layer in s.layers
        ],
    )


def snapshot_from_pb(pb: control_pb2.Snapshot) -> NodeSnapshot:
    return NodeSnapshot(
        pb.node_id, list(pb.topics),
        [
            LayerSnapshot(l.layer, list(l.neighbours), {t: list(ns.nodes) for t, ns in l.per_topic.items()})
            for l in pb.layers
        ],
    )


UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
"""Characters no name (topic, event id, address, layer) may hold: control characters, line and
paragraph separators, zero-width and bidirectional formatting (a right-to-left override makes a
topic read as another in a log or report)."""


def _check_names(*names: str) -> None:
    for name in names:
        if len(name) > MAX_NAME:
            raise RemoteProtocolError(f"string of {len(name)} characters (limit {MAX_NAME})")
        if (bad := UNPRINTABLE.search(name)) is not None:
            raise RemoteProtocolError(f"name with the unprintable character U+{ord(bad.group()):04X}")
