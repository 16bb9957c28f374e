"""Typed message kinds, carried by the wire's generic one-way message (:class:`Signal`).

A protocol declares each kind of message one of its layers sends as a small dataclass with
:func:`message`; the kind's fields map onto the signal's, field by field, in declaration order:

- ``sender: Descriptor`` (required, first): the signal's sender;
- ``Descriptor``: one entry; ``int`` and ``bool``: one value; ``str``: one topic; a ``Literal``
  of strings: one value, its index among them;
- ``tuple[Descriptor, ...]``, ``tuple[str, ...]``, ``tuple[int, ...]``: the items in entries,
  topics or values, their count first among the values;
- ``X | None`` of one of those: a value 0 or 1, then the item if present.

The checks that decoding applies come from the types, narrowed with ``Annotated``:
:class:`Range` for an int (default: any int64), :class:`MaxLen` for a string or a tuple
(defaults: :data:`MAX_TEXT` and :data:`MAX_ITEMS`). Anything a correct peer never sends (a
missing or extra item, a bound crossed, an unknown enum value) raises
:class:`RemoteProtocolError`, which drivers count as malformed. The round trip, and the refusal
of malformed signals, is tested for every declared kind (tests/unit/test_messages.py), with
values drawn from the types; the conformance suite feeds each protocol's core the malformed
variants of every kind of its layers. Kinds are keyed by layer and name across all protocols:
declare them for a layer name the protocol owns.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, dataclass_transform, get_args, get_origin

from node.kit.types import Descriptor, RemoteProtocolError, Signal

_T = TypeVar("_T")

MAX_TEXT = 256
"""Longest string field unless narrowed (characters)."""
MAX_ITEMS = 16_384
"""Most items in a tuple field unless narrowed."""
INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class Range:
    """An int field's bounds, both included."""

    lo: int
    hi: int


@dataclass(frozen=True)
class MaxLen:
    """A string's most characters, or a tuple's most items."""

    n: int


@dataclass(frozen=True)
class _Field:
    """How one field travels: its slot (entry, value, topic, enum), shape and bound."""

    name: str
    slot: Literal["entry", "value", "topic", "enum", "bool"]
    shape: Literal["one", "many", "maybe"]
    choices: tuple[str, ...] = ()
    lo: int = INT64[0]
    hi: int = INT64[1]
    max_len: int = MAX_TEXT


@dataclass(frozen=True)
class Kind:
    """A declared message kind: its layer, its name on the wire and its fields."""

    layer: str
    name: str
    cls: type
    fields: tuple[_Field, ...]


_kinds: dict[tuple[str, str], Kind] = {}


def declared_kinds() -> list[Kind]:
    """Every declared kind, by layer and name."""
    return [_kinds[k] for k in sorted(_kinds)]


def kind_of(layer: str, name: str) -> Kind:
    try:
        return _kinds[(layer, name)]
    except KeyError:
        raise RemoteProtocolError(f"{layer}: unknown message kind {name!r}") from None


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def message(layer: str, name: str) -> Callable[[type[_T]], type[_T]]:
    """Declare a message kind of ``layer`` called ``name`` on the wire (a class decorator)."""

    def declare(cls: type[_T]) -> type[_T]:
        cls = dataclass(slots=True, unsafe_hash=True)(cls)
        hints = typing.get_type_hints(cls, include_extras=True)
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        if not names or names[0] != "sender" or hints["sender"] is not Descriptor:
            raise TypeError(f"message {cls.__name__}: the first field must be 'sender: Descriptor'")
        spec = Kind(layer, name, cls, tuple(_field(n, hints[n]) for n in names[1:]))
        if _kinds.get((layer, name), spec).cls.__qualname__ != cls.__qualname__:
            raise TypeError(f"message kind {layer}/{name} is declared twice")
        _kinds[(layer, name)] = spec
        cls._kind = spec  # type: ignore[attr-defined]
        return cls

    return declare


def _field(name: str, hint: Any) -> _Field:
    lo, hi, max_len = INT64[0], INT64[1], None
    if get_origin(hint) is typing.Annotated:
        hint, *extras = get_args(hint)
        for x in extras:
            if isinstance(x, Range):
                lo, hi = x.lo, x.hi
            elif isinstance(x, MaxLen):
                max_len = x.n
    shape: Literal["one", "many", "maybe"] = "one"
    origin = get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        present = [a for a in get_args(hint) if a is not type(None)]
        if len(present) != 1 or len(get_args(hint)) != 2:
            raise TypeError(f"field {name}: only 'X | None' unions are supported")
        hint, shape = present[0], "maybe"
    elif origin is tuple:
        args = get_args(hint)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"field {name}: tuples are tuple[X, ...]")
        hint, shape = args[0], "many"
    limit = max_len if max_len is not None else MAX_ITEMS if shape == "many" else MAX_TEXT
    if hint is Descriptor:
        return _Field(name, "entry", shape, max_len=limit)
    if hint is bool:
        return _Field(name, "bool", shape, max_len=limit)
    if hint is int:
        return _Field(name, "value", shape, lo=lo, hi=hi, max_len=limit)
    if hint is str:
        return _Field(name, "topic", shape, max_len=limit)
    if get_origin(hint) is Literal and all(isinstance(c, str) for c in get_args(hint)):
        return _Field(name, "enum", shape, choices=get_args(hint), max_len=limit)
    raise TypeError(f"field {name}: {hint!r} cannot travel (Descriptor, int, bool, str, a Literal of strings, "
                    "a tuple of Descriptor, int or str, or one of these | None)")


def to_signal(msg: Any) -> Signal:
    """A typed message as the signal that carries it."""
    spec: Kind = type(msg)._kind
    entries: list[Descriptor] = []
    topics: list[str] = []
    values: list[int] = []
    for f in spec.fields:
        v = getattr(msg, f.name)
        if f.shape == "maybe":
            values.append(int(v is not None))
            if v is None:
                continue
        items: tuple[Any, ...] = v if f.shape == "many" else (v,)
        if f.shape == "many":
            values.append(len(items))
        if f.slot == "entry":
            entries.extend(items)
        elif f.slot == "topic":
            topics.extend(items)
        elif f.slot == "enum":
            values.extend(f.choices.index(x) for x in items)
        else:
            values.extend(int(x) for x in items)
    return Signal(spec.layer, spec.name, msg.sender, tuple(entries), tuple(topics), tuple(values))


class _Cursor:
    def __init__(self, items: tuple[Any, ...], what: str) -> None:
        self.items, self.at, self.what = items, 0, what

    def take(self, n: int = 1) -> tuple[Any, ...]:
        if n < 0 or self.at + n > len(self.items):
            raise RemoteProtocolError(f"too few {self.what}")
        self.at += n
        return self.items[self.at - n:self.at]

    def done(self) -> None:
        if self.at != len(self.items):
            raise RemoteProtocolError(f"{len(self.items) - self.at} {self.what} too many")


def from_signal(sig: Signal) -> Any:
    """The typed message a signal carries; RemoteProtocolError for anything malformed."""
    spec = kind_of(sig.layer, sig.kind)
    cursors = {"entry": _Cursor(sig.entries, "entries"), "topic": _Cursor(sig.topics, "topics"),
               "value": _Cursor(sig.values, "values")}
    values = cursors["value"]
    out: dict[str, Any] = {"sender": sig.sender}
    for f in spec.fields:
        where = f"{spec.layer}/{spec.name}.{f.name}"
        if f.shape == "maybe":
            present = values.take()[0]
            if present not in (0, 1):
                raise RemoteProtocolError(f"{where}: presence {present}")
            if not present:
                out[f.name] = None
                continue
        n = 1
        if f.shape == "many":
            n = values.take()[0]
            if not 0 <= n <= f.max_len:
                raise RemoteProtocolError(f"{where}: {n} items (at most {f.max_len})")
        items = cursors["value" if f.slot in ("enum", "bool") else f.slot].take(n)
        out[f.name] = tuple(_check(f, x, where) for x in items) if f.shape == "many" else _check(f, items[0], where)
    for c in cursors.values():
        c.done()
    return spec.cls(**out)


def _check(f: _Field, x: Any, where: str) -> Any:
    if f.slot == "enum":
        if not 0 <= x < len(f.choices):
            raise RemoteProtocolError(f"{where}: {x} is none of {f.choices}")
        return f.choices[x]
    if f.slot == "bool":
        if x not in (0, 1):
            raise RemoteProtocolError(f"{where}: {x} is not a bool")
        return bool(x)
    if f.slot == "value" and not f.lo <= x <= f.hi:
        raise RemoteProtocolError(f"{where}: {x} outside [{f.lo}, {f.hi}]")
    if f.slot == "topic" and len(x) > f.max_len:
        raise RemoteProtocolError(f"{where}: {len(x)} characters (at most {f.max_len})")
    return x


def malformed(spec: Kind, good: Signal) -> Iterator[Signal]:
    """Signals a correct peer never sends, derived from a well-formed one of kind ``spec``: an
    item missing or extra in each slot, and each bound of each field crossed."""
    for slot in ("entries", "topics", "values"):
        items = getattr(good, slot)
        extra = {"entries": good.sender, "topics": "x", "values": 0}[slot]
        fewer, more = ([items[:-1]] if items else []), (*items, extra)
        for changed in (*fewer, more):
            yield Signal(good.layer, good.kind, good.sender, **{**_slots(good), slot: changed})
    # each field's bounds, one at a time, on the values it occupies in ``good``
    at = 0
    msg = from_signal(good)
    for f in spec.fields:
        v = getattr(msg, f.name)
        if f.shape == "maybe":
            yield _with_value(good, at, 2)
            at += 1
            if v is None:
                continue
        if f.shape == "many":
            yield _with_value(good, at, f.max_len + 1)
            at += 1
        n = len(v) if f.shape == "many" else 1
        if f.slot in ("enum", "bool", "value") and n:
            bad = _outside(f)
            if bad is not None:
                yield _with_value(good, at, bad)
            at += n


def _slots(sig: Signal) -> dict[str, tuple[Any, ...]]:
    return {"entries": sig.entries, "topics": sig.topics, "values": sig.values}


def _outside(f: _Field) -> int | None:
    """A value the field refuses (None: an int64 without narrower bounds refuses none)."""
    if f.slot == "enum":
        return len(f.choices)
    if f.slot == "bool":
        return 2
    if f.hi < INT64[1]:
        return f.hi + 1
    return f.lo - 1 if f.lo > INT64[0] else None


def _with_value(sig: Signal, i: int, v: int) -> Signal:
    values = list(sig.values)
    values[i] = v
    return Signal(sig.layer, sig.kind, sig.sender, sig.entries, sig.topics, tuple(values))
