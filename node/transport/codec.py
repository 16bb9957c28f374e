"""The one mapping between protobuf (``node/_gen``) and core dataclasses (``node/core/types``).

``decode_*`` raise :class:`RemoteProtocolError` for anything a correct peer never sends: bytes
that do not parse, missing fields, oversized lists or strings. Limits are module constants so the
shell, the simulator and the tests agree on them.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from node._gen.overlaylab.v1 import control_pb2, peer_pb2
from node.core.types import (
    Descriptor, EventMsg, Gossip, LayerSnapshot, Message, NodeSnapshot, RemoteProtocolError,
)

MAX_MESSAGE_BYTES = 1 << 20
"""Largest peer message accepted (bytes); larger ones are rejected and counted."""
MAX_ENTRIES = 256
MAX_TOPICS = 16_384
"""Most topics in one profile. Social workloads are heavy-tailed: the 10,000-node Twitter-like
workload has a subscriber to 4,334 topics (a 77 KB profile with priorities), and a VICINITY
message of the 11 heaviest profiles is 424 KB, inside MAX_MESSAGE_BYTES."""
MAX_NAME = 256
"""Longest topic, layer, event id or address (characters)."""


def descriptor_to_pb(d: Descriptor) -> peer_pb2.NodeDescriptor:
    return peer_pb2.NodeDescriptor(node_id=d.node_id, addr=d.addr, topics=sorted(d.topics), age=d.age,
                                   priorities=dict(d.priorities))


def descriptor_from_pb(pb: peer_pb2.NodeDescriptor) -> Descriptor:
    if len(pb.topics) > MAX_TOPICS or len(pb.priorities) > len(pb.topics):
        raise RemoteProtocolError(f"descriptor with {len(pb.topics)} topics, {len(pb.priorities)} priorities")
    _check_names(pb.addr, *pb.topics)
    return Descriptor(pb.node_id, pb.addr, frozenset(pb.topics), pb.age, tuple(sorted(pb.priorities.items())))


def gossip_to_pb(m: Gossip) -> peer_pb2.GossipMessage:
    return peer_pb2.GossipMessage(
        layer=m.layer, sender=descriptor_to_pb(m.sender),
        entries=[descriptor_to_pb(d) for d in m.entries], reply=m.reply,
    )


def gossip_from_pb(pb: peer_pb2.GossipMessage) -> Gossip:
    if not pb.layer or not pb.HasField("sender"):
        raise RemoteProtocolError("gossip message without layer or sender")
    if len(pb.entries) > MAX_ENTRIES:
        raise RemoteProtocolError(f"gossip message with {len(pb.entries)} entries")
    _check_names(pb.layer)
    return Gossip(
        pb.layer, descriptor_from_pb(pb.sender),
        tuple(descriptor_from_pb(d) for d in pb.entries), pb.reply,
    )


def event_to_pb(m: EventMsg, sender: int, trace_id: bytes = b"", span_id: bytes = b"") -> peer_pb2.EventMessage:
    return peer_pb2.EventMessage(
        event_id=m.event_id, topic=m.topic, payload=m.payload, hops=m.hops,
        publisher=m.publisher, sender=sender,
        trace=peer_pb2.TraceContext(trace_id=trace_id, span_id=span_id),
    )


def event_from_pb(pb: peer_pb2.EventMessage) -> EventMsg:
    if not pb.event_id or not pb.topic or pb.hops < 1:
        raise RemoteProtocolError("event without id or topic, or with hop count 0")
    _check_names(pb.event_id, pb.topic)
    return EventMsg(pb.event_id, pb.topic, pb.payload, pb.publisher, pb.hops)


def to_pb(m: Message, sender: int) -> peer_pb2.GossipMessage | peer_pb2.EventMessage:
    return gossip_to_pb(m) if isinstance(m, Gossip) else event_to_pb(m, sender)


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
    """Encoded size in bytes. Gossip sizes are summed from cached per-descriptor sizes (the same
    descriptors travel again and again), with protobuf's framing arithmetic."""
    if not isinstance(m, Gossip):
        return to_pb(m, sender).ByteSize()
    size = _field(len(m.layer.encode())) if m.layer else 0
    size += _field(_descriptor_size(m.sender)) + sum(_field(_descriptor_size(d)) for d in m.entries)
    return size + (2 if m.reply else 0)


def _descriptor_size(d: Descriptor) -> int:
    """The profile's size (cached: profiles repeat, ages vary) plus the age field's."""
    size = _profile_size(d)
    return size + 1 + _varint_len(d.age) if d.age else size


_PROFILE_SIZES: dict[tuple[int, int, int], tuple[Descriptor, int]] = {}
_PROFILE_SIZES_MAX = 200_000


def _profile_size(d: Descriptor) -> int:
    """Keyed by the identity of the profile's parts: copies of a descriptor share them, and
    hashing the priorities of a subscriber to thousands of topics would cost as much as encoding.
    The entry keeps the descriptor alive, so its ids are not reused while cached."""
    key = (d.node_id, id(d.topics), id(d.priorities))
    hit = _PROFILE_SIZES.get(key)
    if hit is not None:
        cached, size = hit
        if cached.topics is d.topics and cached.priorities is d.priorities and cached.addr == d.addr:
            return size
    if len(_PROFILE_SIZES) >= _PROFILE_SIZES_MAX:
        _PROFILE_SIZES.clear()
    size = descriptor_to_pb(Descriptor(d.node_id, d.addr, d.topics, 0, d.priorities)).ByteSize()
    _PROFILE_SIZES[key] = (d, size)
    return size


def _field(n: int) -> int:
    """Bytes of a length-delimited field with a one-byte tag and an n-byte payload."""
    return 1 + _varint_len(n) + n


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def roundtrip(m: Message, sender: int) -> tuple[Message, int]:
    """Encode and decode ``m`` as the wire would (the simulator's codec check).
    Returns the decoded message and its size in bytes."""
    data = to_pb(m, sender).SerializeToString()
    if isinstance(m, Gossip):
        return gossip_from_pb(parse(peer_pb2.GossipMessage, data)), len(data)
    return event_from_pb(parse(peer_pb2.EventMessage, data)), len(data)


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


def _check_names(*names: str) -> None:
    for name in names:
        if len(name) > MAX_NAME:
            raise RemoteProtocolError(f"string of {len(name)} characters (limit {MAX_NAME})")
