"""Typed message kinds (node/kit/messages.py): for every declared kind, values drawn from its
field types survive the mapping onto a signal and the wire codec unchanged, and signals a
correct peer never sends (an item missing or extra, a bound crossed) are refused. A new kind is
covered the moment it is declared."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.kit.messages import Kind, MaxLen, Range, declared_kinds, from_signal, malformed, message, to_signal
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


def instances(spec: Kind) -> st.SearchStrategy:
    """Messages of kind ``spec``, each field drawn from its type."""
    fields = {}
    for f in spec.fields:
        one = _one(f)
        if f.shape == "many":
            one = st.lists(one, max_size=min(f.max_len, 5)).map(tuple)
        elif f.shape == "maybe":
            one = st.none() | one
        fields[f.name] = one
    return st.builds(spec.cls, sender=DESCRIPTORS, **fields)


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
    assert len(bad) >= 3
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


def test_an_unknown_kind_and_a_bad_declaration_are_errors():
    with pytest.raises(RemoteProtocolError):
        from_signal(Signal("test-layer", "no-such-kind", Descriptor(1, "a")))
    with pytest.raises(TypeError, match="sender"):
        message("test-layer", "no-sender")(type("NoSender", (), {"__annotations__": {"x": "int"}}))
    with pytest.raises(TypeError, match="cannot travel"):
        message("test-layer", "a-float")(type("Floaty", (), {"__annotations__": {"sender": Descriptor, "x": float}}))
