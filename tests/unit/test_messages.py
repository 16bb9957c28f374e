"""Typed message kinds (node/kit/messages.py): for every declared kind, values drawn from its
field types survive the mapping onto a signal and the wire codec unchanged, and signals a
correct peer never sends (an item missing or extra, a bound crossed) are refused. A new kind is
covered the moment it is declared."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.kit.messages import (
    Kind,
    MaxLen,
    Range,
    Rest,
    SameLen,
    declared_kinds,
    from_signal,
    fully_open,
    malformed,
    message,
    record,
    to_signal,
)
from node.kit.registry import protocol_names, protocol_spec
from node.kit.types import Descriptor, RemoteProtocolError, Signal
from node.wire import codec

pytestmark = pytest.mark.unit


@message("test-layer", "every-field")
class EveryField:
    """A kind with a field of every shape the kit maps (declared here so that each is covered)."""

    sender: Descriptor
    to: Descriptor
    count: Annotated[int, Range(-5, 5)]
    big: int
    flag: bool
    label: Annotated[str, MaxLen(12)]
    mode: Literal["a", "b", "c"]
    peers: Annotated[tuple[Descriptor, ...], MaxLen(4)]
    names: tuple[str, ...]
    numbers: tuple[int, ...]
    parent: Descriptor | None
    note: str | None


@record
class Group:
    """A record: its fields travel in place, wherever a message holds one."""

    gid: str
    rank: Annotated[int, Range(0, 9)]
    leader: Descriptor
    backups: Annotated[tuple[Descriptor, ...], MaxLen(3)]


@message("test-layer", "records-and-rests")
class RecordsAndRests:
    """Records one, many and maybe; a SameLen tuple; Rest tuples in two slots."""

    sender: Descriptor
    group: Group
    parent: Group | None
    children: tuple[Group, ...]
    names: tuple[str, ...]
    owners: Annotated[tuple[Descriptor, ...], SameLen("names")]
    others: Annotated[tuple[Descriptor, ...], Rest()]
    tail: Annotated[tuple[str, ...], Rest(), MaxLen(2)]


NAMES = st.text(alphabet="abcdefgh:.-0123456789", min_size=1, max_size=10)
DESCRIPTORS = st.builds(Descriptor, st.integers(0, 1 << 20), NAMES, st.frozensets(NAMES, max_size=3))


def _one(f) -> st.SearchStrategy:
    if f.slot == "entry":
        return DESCRIPTORS
    if f.slot == "bool":
        return st.booleans()
    if f.slot == "enum":
        return st.sampled_from(f.choices)
    if f.slot == "value":
        return st.integers(f.lo, f.hi)
    return st.text(alphabet="abcdefgh:.-0123456789", min_size=1, max_size=min(f.max_len, 12))


def _values(fields) -> st.SearchStrategy:
    """Field values drawn from their types (a SameLen tuple as long as the one it names)."""
    @st.composite
    def draw(d):
        out = {}
        for f in fields:
            one = _values(f.sub).map(lambda kw, cls=f.record: cls(**kw)) if f.slot == "record" else _one(f)
            if f.shape == "same":
                out[f.name] = tuple(d(one) for _ in out[f.same_as])
            elif f.shape in ("many", "rest"):
                out[f.name] = tuple(d(st.lists(one, max_size=min(f.max_items, 5))))
            else:
                out[f.name] = d(st.none() | one if f.shape == "maybe" else one)
        return out
    return draw()


def instances(spec: Kind) -> st.SearchStrategy:
    """Messages of kind ``spec``, each field drawn from its type."""
    return st.builds(lambda sender, kw: spec.cls(sender=sender, **kw), DESCRIPTORS, _values(spec.fields))


for _name in protocol_names():  # every built-in protocol's kinds declared
    protocol_spec(_name)
KINDS = declared_kinds()


def test_every_kind_the_tests_know_is_declared():
    assert {(k.layer, k.name) for k in KINDS} >= {("test-layer", "every-field"), ("toy-heartbeat", "beat")}


@pytest.mark.parametrize("spec", KINDS, ids=lambda k: f"{k.layer}/{k.name}")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_kind_round_trips_the_signal_and_the_wire_and_refuses_what_no_peer_sends(spec, data):
    msg = data.draw(instances(spec))
    sig = to_signal(msg)
    assert isinstance(sig, Signal) and (sig.layer, sig.kind) == (spec.layer, spec.name)
    assert from_signal(sig) == msg
    decoded, _ = codec.roundtrip(sig, sender=0)
    assert from_signal(decoded) == msg
    bad = list(malformed(spec, sig))
    assert bad or fully_open(spec)
    for b in bad:
        with pytest.raises(RemoteProtocolError):
            from_signal(b)


def test_the_mapping_is_field_by_field_in_declaration_order():
    me, to, p = Descriptor(1, "a"), Descriptor(2, "b"), Descriptor(3, "c")
    sig = to_signal(EveryField(me, to, -5, 7, True, "x", "c", (p,), ("n1", "n2"), (9,), None, "hi"))
    assert sig.entries == (to, p)
    assert sig.topics == ("x", "n1", "n2", "hi")
    # count, big, flag, mode (index), len(peers), len(names), len(numbers), numbers, parent absent, note present
    assert sig.values == (-5, 7, 1, 2, 1, 2, 1, 9, 0, 1)


def test_records_rests_and_same_lengths_fill_each_slot_in_place():
    me, a, b, c, d = (Descriptor(k, f"h{k}") for k in range(5))
    msg = RecordsAndRests(me, Group("g", 3, a, (b,)), None, (Group("h", 4, c, ()),), ("n1", "n2"), (a, b), (d,), ("t",))
    sig = to_signal(msg)
    # group (gid, rank, leader, 1 backup), parent absent, 1 child (gid, rank, leader, 0 backups), 2 names
    assert sig.values == (3, 1, 0, 1, 4, 0, 2)
    assert sig.topics == ("g", "h", "n1", "n2", "t")
    assert sig.entries == (a, b, c, a, b, d)
    assert from_signal(sig) == msg
    # a Rest tuple takes one more, up to its bound; a SameLen tuple must be complete
    assert from_signal(Signal(sig.layer, sig.kind, me, sig.entries + (a,), sig.topics, sig.values)).others == (d, a)
    with pytest.raises(RemoteProtocolError, match="at most 2"):
        from_signal(Signal(sig.layer, sig.kind, me, sig.entries, sig.topics + ("u", "v"), sig.values))
    with pytest.raises(RemoteProtocolError, match="too few entries"):
        from_signal(Signal(sig.layer, sig.kind, me, sig.entries[:3], sig.topics, sig.values))


def test_an_unknown_kind_and_a_bad_declaration_are_errors():
    with pytest.raises(RemoteProtocolError):
        from_signal(Signal("test-layer", "no-such-kind", Descriptor(1, "a")))
    with pytest.raises(TypeError, match="sender"):
        message("test-layer", "no-sender")(type("NoSender", (), {"__annotations__": {"x": "int"}}))
    with pytest.raises(TypeError, match="after a Rest field"):
        message("test-layer", "rest-then-more")(type("RestThenMore", (), {"__annotations__": {
            "sender": Descriptor, "a": Annotated[tuple[int, ...], Rest()], "b": int}}))
    with pytest.raises(TypeError, match="SameLen"):
        message("test-layer", "same-as-nothing")(type("SameAsNothing", (), {"__annotations__": {
            "sender": Descriptor, "a": Annotated[tuple[int, ...], SameLen("b")]}}))
    with pytest.raises(TypeError, match="cannot travel"):
        message("test-layer", "a-float")(type("Floaty", (), {"__annotations__": {"sender": Descriptor, "x": float}}))
