import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node._gen.overlaylab.v1 import peer_pb2
from node.kit.types import Descriptor, EventMsg, Gossip, LayerSnapshot, NodeSnapshot, RemoteProtocolError, Signal
from node.wire import codec

D = Descriptor(7, "127.0.0.1:5000", frozenset({"a", "b"}), 3)
# priorities in an order that is not sorted: the wire keeps the sender's order
P = Descriptor(9, "h:1", frozenset({"a", "b", "c"}), 0, (("c", 4), ("a", 2), ("b", 3)))

# One table drives both directions (h11's SIMPLE_CASES style).
CASES = [
    Gossip("cyclon", D, (), False),
    Gossip("cyclon", D, (D, Descriptor(8, "x:1")), True),
    Gossip("vicinity", P, (P, D), False),
    Gossip("cyclon", D, (D,), False, ("7-0-1", "12-3-400")),
    EventMsg("7-1", "a", b"payload", 7, 1),
    EventMsg("7-2", "b", b"", 9, 200),
    Signal("spidercast", "connect", D, topics=("a", "b")),
    Signal("walk", "step", P, (D, P), ("t",), (5, -1, 2**40)),
]


@pytest.mark.parametrize("msg", CASES)
def test_roundtrip(msg):
    decoded, size = codec.roundtrip(msg, sender=7)
    assert decoded == msg
    assert size == codec.wire_size(msg, 7) > 0


def test_every_message_type_is_registered_once_with_its_own_rpc():
    types = {type(m) for m in CASES}
    assert {w.core for w in codec.WIRE_TYPES} == types
    assert len({w.rpc for w in codec.WIRE_TYPES}) == len(codec.WIRE_TYPES)
    assert [w.rpc for w in codec.WIRE_TYPES if w.exchange] == ["Exchange"]


def test_a_priority_given_twice_is_a_remote_error():
    pb = peer_pb2.NodeDescriptor()
    pb.CopyFrom(codec.descriptor_to_pb(P))  # that one is shared
    pb.priorities[1].topic = "c"
    with pytest.raises(RemoteProtocolError, match="twice"):
        codec.descriptor_from_pb(pb)


def test_snapshot_roundtrip():
    s = NodeSnapshot(3, ["a"], [LayerSnapshot("cyclon", [1, 2]), LayerSnapshot("rings", [4], {"a": [4, 5]})])
    assert codec.snapshot_from_pb(codec.snapshot_to_pb(s)) == s


@pytest.mark.parametrize("data", [b"\xff\xff\xff", b"\x0a\x05ab", b"\x12\xff\x01"])
def test_garbage_bytes_are_remote_errors(data):
    with pytest.raises(RemoteProtocolError):
        codec.decode(codec.wire_type(CASES[0]), data)


def test_oversized_message_is_rejected_before_parsing():
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        codec.parse(peer_pb2.EventMessage, b"\x00" * (codec.MAX_MESSAGE_BYTES + 1))


@pytest.mark.parametrize("pb", [
    peer_pb2.GossipMessage(layer="cyclon"),                                  # no sender
    peer_pb2.GossipMessage(sender=peer_pb2.NodeDescriptor(node_id=1)),        # no layer
    peer_pb2.GossipMessage(layer="x" * 300, sender=peer_pb2.NodeDescriptor()),
    peer_pb2.GossipMessage(layer="c", sender=peer_pb2.NodeDescriptor(),
                           entries=[peer_pb2.NodeDescriptor()] * (codec.MAX_ENTRIES + 1)),
])
def test_invalid_gossip_is_a_remote_error(pb):
    with pytest.raises(RemoteProtocolError):
        codec.gossip_from_pb(pb)


@pytest.mark.parametrize("pb", [
    peer_pb2.SignalMessage(kind="k", sender=peer_pb2.NodeDescriptor()),      # no layer
    peer_pb2.SignalMessage(layer="l", sender=peer_pb2.NodeDescriptor()),     # no kind
    peer_pb2.SignalMessage(layer="l", kind="k"),                             # no sender
    peer_pb2.SignalMessage(layer="l", kind="k", sender=peer_pb2.NodeDescriptor(), values=[1] * (codec.MAX_SIGNAL_ITEMS + 1)),
    peer_pb2.SignalMessage(layer="l", kind="k", sender=peer_pb2.NodeDescriptor(),
                           entries=[peer_pb2.NodeDescriptor()] * (codec.MAX_SIGNAL_ITEMS + 1)),
])
def test_invalid_signal_is_a_remote_error(pb):
    with pytest.raises(RemoteProtocolError):
        codec.signal_from_pb(pb)


def test_a_signal_carries_a_large_groups_state():
    """A DPS leader's state for its co-leaders: more members than a gossip message may carry."""
    pb = peer_pb2.SignalMessage(layer="dps", kind="sync", sender=peer_pb2.NodeDescriptor(node_id=1),
                                entries=[peer_pb2.NodeDescriptor(node_id=i) for i in range(2000)], values=[1] * 2000)
    assert len(codec.signal_from_pb(pb).entries) == 2000


@pytest.mark.parametrize("pb", [
    peer_pb2.EventMessage(topic="a", hops=1),           # no id
    peer_pb2.EventMessage(event_id="e", hops=1),        # no topic
    peer_pb2.EventMessage(event_id="e", topic="a"),     # hop 0 on the wire
])
def test_invalid_event_is_a_remote_error(pb):
    with pytest.raises(RemoteProtocolError):
        codec.event_from_pb(pb)


@pytest.mark.parametrize("name", ["a\x00b", "line\nbreak", "\u202egnp.exe", "zero\u200bwidth", "\ufeffbom"])
def test_a_name_with_an_unprintable_character_is_a_remote_error(name):
    with pytest.raises(RemoteProtocolError, match="unprintable character U\\+"):
        codec.event_from_pb(peer_pb2.EventMessage(event_id="0-1-1", topic=name, hops=1))
    with pytest.raises(RemoteProtocolError, match="unprintable character"):
        codec.descriptor_from_pb(peer_pb2.NodeDescriptor(node_id=1, addr="127.0.0.1:1", topics=["a", name]))
    assert codec.event_from_pb(peer_pb2.EventMessage(event_id="0-1-1", topic="caf\u00e9 \u20ac", hops=1)).topic == "caf\u00e9 \u20ac"


def test_gossip_with_too_many_recent_ids_is_a_remote_error():
    pb = codec.gossip_to_pb(Gossip("cyclon", D, (), False, ("e",) * (codec.MAX_SIGNAL_ITEMS + 1)))
    with pytest.raises(RemoteProtocolError, match="recent event ids"):
        codec.gossip_from_pb(pb)


def test_gossip_size_arithmetic_matches_protobuf():
    big = Descriptor(2**40, "h" * 300, frozenset(f"t{i}" for i in range(200)), 7, tuple((f"t{i}", i % 5) for i in range(0, 200, 3)))
    for msg in (Gossip("cyclon", D, (), False), Gossip("rings", big, (D, big) * 5, True), Gossip("", D, (D,), False),
                Gossip("cyclon", D, (D,), True, tuple(f"{i}-0-{i * 977}" for i in range(40)) + ("x" * 300,))):
        assert codec.wire_size(msg, 1) == len(codec.encode(msg, 1))


def test_signal_size_arithmetic_matches_protobuf():
    big = Descriptor(2**40, "h" * 300, frozenset(f"t{i}" for i in range(200)), 7, tuple((f"t{i}", i % 5) for i in range(0, 200, 3)))
    for msg in (Signal("stan", "walk", D, (D,), ("a",), (1, 5)), Signal("s", "k", big, (D, big) * 5, ("x" * 200, ""), ()),
                Signal("s", "k", D, (), (), (-1, 0, 2**62, 127, 128)), Signal("s", "k", D)):
        assert codec.wire_size(msg, 1) == len(codec.encode(msg, 1))


def test_heavy_social_subscriber_fits_and_more_topics_are_rejected():
    """The 10,000-node Twitter-like workload has a profile of 4,334 topics (with priorities);
    it must cross the wire, while a profile over MAX_TOPICS is a remote error."""
    topics = frozenset(f"u{i}" for i in range(4334))
    heavy = Descriptor(1, "10.0.0.1:50051", topics, 2, tuple((t, 4) for t in sorted(topics)))
    msg = Gossip("vicinity", heavy, (heavy,) * 10)
    decoded, size = codec.roundtrip(msg, sender=1)
    assert decoded == msg and size == codec.wire_size(msg, 1) < codec.MAX_MESSAGE_BYTES
    too_many = peer_pb2.GossipMessage(layer="vicinity", sender=peer_pb2.NodeDescriptor(
        node_id=1, topics=[f"u{i}" for i in range(codec.MAX_TOPICS + 1)]))
    with pytest.raises(RemoteProtocolError):
        codec.gossip_from_pb(too_many)


_names = st.text(alphabet="aé€x", max_size=140)


@settings(max_examples=300, deadline=None)
@given(node_id=st.sampled_from([0, 1, 127, 128, 2**40]), addr=_names, topics=st.frozensets(_names, max_size=12),
       data=st.data())
def test_profile_size_arithmetic_matches_protobuf(node_id, addr, topics, data):
    """A profile's size is summed by protobuf's framing rules (empty strings, multi-byte
    characters and lengths, zero priorities and ids left out): it must equal the encoding's."""
    chosen = data.draw(st.lists(st.sampled_from(sorted(topics) or [""]), unique=True))
    priorities = tuple((t, data.draw(st.sampled_from([0, 1, 127, 128, 70_000]))) for t in chosen)
    d = Descriptor(node_id, addr, topics, 0, priorities)
    assert codec._profile_size(d) == codec.descriptor_to_pb(d).ByteSize()
