"""Typed message kinds, carried by the wire's generic one-way message (:class:`Signal`).

A protocol declares each kind of message one of its layers sends as a small dataclass with
:func:`message`; the kind's fields map onto the signal's, field by field, in declaration order:

- ``sender: Descriptor`` (required, first): the signal's sender;
- ``Descriptor``: one entry; ``int`` and ``bool``: one value; ``str``: one topic; a ``Literal``
  of strings: one value, its index among them;
- ``tuple[Descriptor, ...]``, ``tuple[str, ...]``, ``tuple[int, ...]``: the items in entries,
  topics or values, their count first among the values;
- ``X | None`` of one of those: a value 0 or 1, then the item if present;
- a :func:`record` (a group of fields, such as a reference to a group of nodes), as one, a
  tuple or ``| None``: its own fields, in place, as if the message declared them there;
- a tuple marked :class:`Rest`: the rest of its slot, without a count (one item more or less
  is then well-formed); marked :class:`SameLen`: as many items as an earlier tuple, without a
  count.

The slots (entries, topics, values) fill independently, so a kind can match a layout chosen
before it was typed, value for value.

The checks that decoding applies come from the types, narrowed with ``Annotated``:
:class:`Range` for an int (default: any int64), :class:`MaxLen` for a string or a tuple
(defaults: :data:`MAX_TEXT` and :data:`MAX_ITEMS`; a tuple's items take their own bounds,
``tuple[Annotated[str, MaxLen(8)], ...]``). Anything a correct peer never sends (a
missing or extra item, a bound crossed, an unknown enum value) raises
:class:`RemoteProtocolError`, which drivers count as malformed. The round trip, and the refusal
of malformed signals, is tested for every declared kind (tests/unit/test_messages.py), with
values drawn from the types; the conformance suite feeds each protocol's core the malformed
variants of every kind of its layers. Kinds are keyed by layer and name across all protocols:
declare them for a layer name the protocol owns.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import MappingProxyType
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
class Rest:
    """A tuple field that takes the rest of its slot's items, without a count: the last field
    to use that slot."""


@dataclass(frozen=True)
class SameLen:
    """A tuple field with as many items as the earlier tuple field ``of``, without a count."""

    of: str


Slot = Literal["entry", "value", "topic", "enum", "bool", "record"]
Shape = Literal["one", "many", "maybe", "rest", "same"]
_STREAM = MappingProxyType({"entry": "entries", "topic": "topics", "value": "values", "enum": "values", "bool": "values"})


@dataclass(frozen=True)
class _Field:
    """How one field travels: its slot (entry, value, topic, enum, bool, or a record's fields),
    shape and bound."""

    name: str
    slot: Slot
    shape: Shape
    choices: tuple[str, ...] = ()
    lo: int = INT64[0]
    hi: int = INT64[1]
    max_len: int = MAX_TEXT
    """A string's most characters."""
    max_items: int = MAX_ITEMS
    """A tuple's most items."""
    same_as: str = ""
    record: type | None = None
    sub: tuple[_Field, ...] = ()

    @functools.cached_property
    def stream(self) -> str:
        """The signal's slot its items go to (a record: none of its own)."""
        return _STREAM.get(self.slot, "")

    @property
    def streams(self) -> set[str]:
        """The signal's slots this field occupies (a count or presence is a value)."""
        out = set().union(*(f.streams for f in self.sub)) if self.slot == "record" else {_STREAM[self.slot]}
        return out | ({"values"} if self.shape in ("many", "maybe") else set())


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
        spec = Kind(layer, name, cls, _fields(cls, names[1:], hints))
        if _kinds.get((layer, name), spec).cls.__qualname__ != cls.__qualname__:
            raise TypeError(f"message kind {layer}/{name} is declared twice")
        _kinds[(layer, name)] = spec
        cls._kind = spec  # type: ignore[attr-defined]
        return cls

    return declare


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type[_T]) -> type[_T]:
    """Declare a record: a group of fields that travels inside messages (its fields in the
    same slots, in order, as if the message declared them where it holds the record)."""
    cls = dataclass(slots=True, unsafe_hash=True)(cls)
    hints = typing.get_type_hints(cls, include_extras=True)
    cls._record_fields = _fields(cls, [f.name for f in dataclasses.fields(cls)], hints)  # type: ignore[arg-type, attr-defined]
    return cls


def _fields(cls: type, names: list[str], hints: dict[str, Any]) -> tuple[_Field, ...]:
    out: list[_Field] = []
    closed: set[str] = set()  # slots a Rest field has taken to the end
    for n in names:
        f = _field(n, hints[n])
        if f.streams & closed:
            raise TypeError(f"{cls.__name__}.{n}: after a Rest field of slot {sorted(f.streams & closed)}")
        if f.shape == "same" and not any(g.name == f.same_as and g.shape in ("many", "rest", "same") for g in out):
            raise TypeError(f"{cls.__name__}.{n}: SameLen({f.same_as!r}) names no earlier tuple field")
        if f.shape == "rest":
            closed |= f.streams
        out.append(f)
    return tuple(out)


def _bounds(hint: Any) -> tuple[Any, list[Any]]:
    """A hint without its ``Annotated`` wrapper, and the wrapper's extras."""
    if get_origin(hint) is typing.Annotated:
        hint, *extras = get_args(hint)
        return hint, extras
    return hint, []


def _field(name: str, hint: Any) -> _Field:
    hint, extras = _bounds(hint)
    shape: Shape = "one"
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
        size = next((x for x in extras if isinstance(x, (Rest, SameLen))), None)
        shape = "rest" if isinstance(size, Rest) else "same" if isinstance(size, SameLen) else "many"
        same = size.of if isinstance(size, SameLen) else ""
        items = next((x.n for x in extras if isinstance(x, MaxLen)), MAX_ITEMS)
        item, item_extras = _bounds(args[0])  # an item's own bounds: tuple[Annotated[str, MaxLen(8)], ...]
        return dataclasses.replace(_scalar(name, item, shape, item_extras), max_items=items, same_as=same)
    if any(isinstance(x, (Rest, SameLen)) for x in extras):
        raise TypeError(f"field {name}: Rest and SameLen are for tuples")
    return _scalar(name, hint, shape, extras)


def _scalar(name: str, hint: Any, shape: Shape, extras: list[Any]) -> _Field:
    lo, hi = next(((x.lo, x.hi) for x in extras if isinstance(x, Range)), INT64)
    text = next((x.n for x in extras if isinstance(x, MaxLen)), MAX_TEXT)
    sub: tuple[_Field, ...] | None = getattr(hint, "_record_fields", None)
    if sub is not None:
        if shape in ("rest", "same"):
            raise TypeError(f"field {name}: a record cannot be Rest or SameLen")
        return _Field(name, "record", shape, record=hint, sub=sub)
    if hint is Descriptor:
        return _Field(name, "entry", shape)
    if hint is bool:
        return _Field(name, "bool", shape)
    if hint is int:
        return _Field(name, "value", shape, lo=lo, hi=hi)
    if hint is str:
        return _Field(name, "topic", shape, max_len=text)
    if get_origin(hint) is Literal and all(isinstance(c, str) for c in get_args(hint)):
        return _Field(name, "enum", shape, choices=get_args(hint))
    raise TypeError(f"field {name}: {hint!r} cannot travel (Descriptor, int, bool, str, a Literal of strings, "
                    "a @record, a tuple of one of these, or one of these | None)")


class _Writer:
    """A signal's slots as a message's fields fill them; with ``track``, where each value came
    from (for ``malformed``)."""

    def __init__(self, track: bool = False) -> None:
        self.slots: dict[str, list[Any]] = {"entries": [], "topics": [], "values": []}
        self.track = track
        self.marks: list[tuple[int, _Field, str]] = []
        """(index among the values, field, role: presence, count or item)."""
        self.rests: dict[str, tuple[_Field, int]] = {}
        """Per slot, its Rest field and how many items it took."""

    def value(self, f: _Field, role: str, v: int) -> None:
        values = self.slots["values"]
        if self.track:
            self.marks.append((len(values), f, role))
        values.append(v)

    def write(self, fields: tuple[_Field, ...], obj: Any) -> None:
        for f in fields:
            v = getattr(obj, f.name)
            if f.shape == "one" and f.slot in ("entry", "topic"):
                self.slots[f.stream].append(v)
                continue
            if f.shape == "maybe":
                self.value(f, "presence", int(v is not None))
                if v is None:
                    continue
            items: tuple[Any, ...] = v if f.shape in ("many", "rest", "same") else (v,)
            if f.shape == "many":
                self.value(f, "count", len(items))
            elif f.shape == "rest":
                self.rests[f.stream] = (f, len(items))
            elif f.shape == "same" and len(items) != len(getattr(obj, f.same_as)):
                raise ValueError(f"{f.name}: {len(items)} items, {f.same_as} has {len(getattr(obj, f.same_as))}")
            if f.slot == "record":
                for x in items:
                    self.write(f.sub, x)
            elif f.slot in ("entry", "topic"):
                self.slots[f.stream].extend(items)
            else:
                for x in items:
                    self.value(f, "item", f.choices.index(x) if f.slot == "enum" else int(x))


def _written(msg: Any, track: bool = False) -> _Writer:
    w = _Writer(track)
    w.write(type(msg)._kind.fields, msg)
    return w


def to_signal(msg: Any) -> Signal:
    """A typed message as the signal that carries it."""
    spec: Kind = type(msg)._kind
    s = _written(msg).slots
    return Signal(spec.layer, spec.name, msg.sender, tuple(s["entries"]), tuple(s["topics"]), tuple(s["values"]))


class _Cursor:
    __slots__ = ("items", "at", "what")

    def __init__(self, items: tuple[Any, ...], what: str) -> None:
        self.items, self.at, self.what = items, 0, what

    def take1(self) -> Any:
        if self.at >= len(self.items):
            raise RemoteProtocolError(f"too few {self.what}")
        self.at += 1
        return self.items[self.at - 1]

    def take(self, n: int) -> tuple[Any, ...]:
        if n < 0 or self.at + n > len(self.items):
            raise RemoteProtocolError(f"too few {self.what}")
        self.at += n
        return self.items[self.at - n:self.at]

    def left(self) -> int:
        return len(self.items) - self.at

    def done(self) -> None:
        if self.at != len(self.items):
            raise RemoteProtocolError(f"{len(self.items) - self.at} {self.what} too many")


def from_signal(sig: Signal) -> Any:
    """The typed message a signal carries; RemoteProtocolError for anything malformed."""
    spec = kind_of(sig.layer, sig.kind)
    cursors = {"entries": _Cursor(sig.entries, "entries"), "topics": _Cursor(sig.topics, "topics"),
               "values": _Cursor(sig.values, "values")}
    out = _read(spec.fields, cursors, spec)
    for c in cursors.values():
        c.done()
    return spec.cls(sender=sig.sender, **out)


def _read(fields: tuple[_Field, ...], cursors: dict[str, _Cursor], where: Any) -> dict[str, Any]:
    """The fields' values; ``where`` (the kind, or a record field's path) names them in errors."""
    out: dict[str, Any] = {}
    values = cursors["values"]
    for f in fields:
        if f.shape == "one" and f.slot != "record":
            out[f.name] = _check(f, cursors[f.stream].take1(), where)
            continue
        if f.shape == "maybe":
            present = values.take1()
            if present not in (0, 1):
                raise RemoteProtocolError(f"{_at(where, f)}: presence {present}")
            if not present:
                out[f.name] = None
                continue
        n = 1
        if f.shape == "many":
            n = values.take1()
        elif f.shape == "rest":
            n = cursors[f.stream].left()
        elif f.shape == "same":
            n = len(out[f.same_as])
        if f.shape in ("many", "rest") and not 0 <= n <= f.max_items:
            raise RemoteProtocolError(f"{_at(where, f)}: {n} items (at most {f.max_items})")
        if f.slot == "record":
            assert f.record is not None
            items = tuple(f.record(**_read(f.sub, cursors, _at(where, f))) for _ in range(n))
        else:
            items = tuple(_check(f, x, where) for x in cursors[f.stream].take(n))
        out[f.name] = items if f.shape in ("many", "rest", "same") else items[0]
    return out


def _at(where: Any, f: _Field) -> str:
    return f"{f'{where.layer}/{where.name}' if isinstance(where, Kind) else where}.{f.name}"


def _check(f: _Field, x: Any, where: Any) -> Any:
    slot = f.slot
    if slot == "entry":
        return x
    if slot == "topic":
        if len(x) > f.max_len:
            raise RemoteProtocolError(f"{_at(where, f)}: {len(x)} characters (at most {f.max_len})")
        return x
    if slot == "value":
        if not f.lo <= x <= f.hi:
            raise RemoteProtocolError(f"{_at(where, f)}: {x} outside [{f.lo}, {f.hi}]")
        return x
    if slot == "enum":
        if not 0 <= x < len(f.choices):
            raise RemoteProtocolError(f"{_at(where, f)}: {x} is none of {f.choices}")
        return f.choices[x]
    if x not in (0, 1):
        raise RemoteProtocolError(f"{_at(where, f)}: {x} is not a bool")
    return bool(x)


def malformed(spec: Kind, good: Signal) -> Iterator[Signal]:
    """Signals a correct peer never sends, derived from a well-formed one of kind ``spec``: an
    item missing or extra in each slot (where a Rest field would not take it in), and each
    bound of each field crossed."""
    w = _written(from_signal(good), track=True)
    for slot in ("entries", "topics", "values"):
        items = getattr(good, slot)
        rest, n = w.rests.get(slot, (None, 0))
        extra = {"entries": good.sender, "topics": "x", "values": 0}[slot]
        changed = []
        if items and (rest is None or n == 0):
            changed.append(items[:-1])
        if rest is None or n == rest.max_items:
            changed.append((*items, extra))
        for c in changed:
            yield Signal(good.layer, good.kind, good.sender, **{**_slots(good), slot: c})
    for i, f, role in w.marks:
        bad = 2 if role == "presence" else f.max_items + 1 if role == "count" else _outside(f)
        if bad is not None:
            yield _with_value(good, i, bad)


def example(spec: Kind, sender: Descriptor) -> Any:
    """A well-formed message of kind ``spec`` from ``sender`` (one item per tuple, each value
    at its lower bound), for kinds a test run did not happen to send."""
    def values(fields: tuple[_Field, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields:
            one: Any = {"entry": sender, "bool": False, "topic": "x", "value": max(f.lo, min(0, f.hi))}.get(f.slot)
            if f.slot == "enum":
                one = f.choices[0]
            elif f.slot == "record":
                assert f.record is not None
                one = f.record(**values(f.sub))
            out[f.name] = tuple(one for _ in out[f.same_as]) if f.shape == "same" else (one,) if f.shape in ("many", "rest") else one
        return out
    return spec.cls(sender=sender, **values(spec.fields))


def fully_open(spec: Kind) -> bool:
    """Whether every slot of ``spec`` ends in a Rest field (then an item more or less may be
    well-formed everywhere, and ``malformed`` may find nothing to offer)."""
    return {_STREAM[f.slot] for f in spec.fields if f.shape == "rest"} == {"entries", "topics", "values"}


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
