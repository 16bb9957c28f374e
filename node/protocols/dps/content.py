"""Content-based subscriptions and events: predicates, group labels, matching and containment
(DPS, spec ../shared/design/protocols/dps.md §2).

Theory of operation

A subscription is a conjunction of predicates ``(name, op, value)`` on typed attributes (int,
float, string); an event maps attribute names to values. ``normalise`` folds the predicates a
subscription places on one attribute into one ``Constraint`` (spec §2.2, choice): numeric
predicates intersect into one interval (integer bounds closed, so ``a > 3`` and ``a >= 4`` are
the same label; float bounds keep open/closed flags), string predicates keep the most selective
one as the label (eq, then the longest prefix, suffix, substring; the others are checked at
delivery), and ``any`` or an empty pattern is ``TOP``, the whole domain. A contradictory
conjunction (an empty interval, a numeric operator on a string) is refused with a ``ValueError``
that names the attribute.

Containment (``contains(p, q)``: every value matching q matches p) is sound: it never says yes
wrongly, since DPS prunes whole subtrees on it; it may miss containments between string
patterns of different kinds (spec §2.3). An attribute's tree is keyed by ``(name, type)``: the
same name with two types makes two unrelated trees.

Choices (spec §2.2, §2.4): ``group_on`` (``interval``: one label per attribute, the
intersection; ``first_predicate``: the label of the attribute's first predicate alone) and the
join-attribute policy (``random``, ``most_selective``, ``first``) are parameters of the callers.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

AttrType = Literal["int", "float", "string"]
Value = int | float | str
NUMERIC_OPS = ("=", "<", ">", "<=", ">=")
STRING_OPS = ("=", "prefix", "suffix", "substr")
OPS = (*NUMERIC_OPS, "prefix", "suffix", "substr", "any")
JOIN_POLICIES = ("random", "most_selective", "first")
_SELECTIVITY = MappingProxyType({"eq": 0, "prefix": 1, "suffix": 2, "substr": 3})  # most selective first


def value_type(v: Value) -> AttrType:
    """The attribute type of a value (bool is refused: it is not an attribute type)."""
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ValueError(f"{v!r}: an attribute value is an int, a float or a string")
    return "string" if isinstance(v, str) else "int" if isinstance(v, int) else "float"


@dataclass(frozen=True, slots=True)
class Predicate:
    """``name op value``; ``op`` one of ``OPS``. ``type`` defaults to the value's (``any`` has
    no value and needs it)."""

    name: str
    op: str
    value: Value | None = None
    type: AttrType | None = None

    @property
    def attr(self) -> tuple[str, AttrType]:
        if self.type is not None:
            return self.name, self.type
        if self.value is None:
            raise ValueError(f"{self.name}: a predicate without a value needs a type")
        return self.name, value_type(self.value)

    def matches(self, v: Value) -> bool:
        return matches(constraint_of(self), v) if value_type(v) == self.attr[1] else False


@dataclass(frozen=True, slots=True)
class Top:
    """The whole domain of an attribute (``any``, an empty pattern)."""

    def canon(self) -> str:
        return "top"


@dataclass(frozen=True, slots=True)
class Interval:
    """A numeric interval; ``±math.inf`` for an unbounded side (always open). Integer intervals
    have closed bounds."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    def canon(self) -> str:
        def bound(x: float) -> str:
            return ("+" if x > 0 else "-") + "inf" if math.isinf(x) else repr(x)
        return f"num{'(' if self.lo_open else '['}{bound(self.lo)},{bound(self.hi)}{')' if self.hi_open else ']'}"

    def is_empty(self) -> bool:
        return self.lo > self.hi or (self.lo == self.hi and (self.lo_open or self.hi_open))


@dataclass(frozen=True, slots=True)
class Pattern:
    """A string test: ``kind`` one of eq, prefix, suffix, substr."""

    kind: str
    s: str

    def canon(self) -> str:
        return f"str:{self.kind}:{self.s}"


Constraint = Top | Interval | Pattern
TOP = Top()


def constraint_of(p: Predicate) -> Constraint:
    """The constraint of one predicate alone."""
    name, kind = p.attr
    if p.op not in OPS:
        raise ValueError(f"{name}: unknown operator {p.op!r} (one of {', '.join(OPS)})")
    if p.op == "any":
        return TOP
    if p.value is None or value_type(p.value) != kind:
        raise ValueError(f"{name}: {p.op} needs a {kind} value, got {p.value!r}")
    v = p.value
    if kind == "string":
        assert isinstance(v, str)
        if p.op not in STRING_OPS:
            raise ValueError(f"{name}: {p.op!r} does not apply to strings (one of {', '.join(STRING_OPS)}, any)")
        if p.op == "=":
            return Pattern("eq", v)
        return Pattern(p.op, v) if v else TOP
    if p.op not in NUMERIC_OPS:
        raise ValueError(f"{name}: {p.op!r} does not apply to numbers (one of {', '.join(NUMERIC_OPS)}, any)")
    assert not isinstance(v, str)
    inf = math.inf
    if kind == "int":  # closed integer bounds: a > 3 is [4, +inf)
        lo, hi = {"=": (v, v), ">": (v + 1, inf), ">=": (v, inf), "<": (-inf, v - 1), "<=": (-inf, v)}[p.op]
        return Interval(lo, hi, math.isinf(lo), math.isinf(hi))
    return {"=": Interval(v, v), ">": Interval(v, inf, True, True), ">=": Interval(v, inf, False, True),
            "<": Interval(-inf, v, True, True), "<=": Interval(-inf, v, True, False)}[p.op]


def intersect(a: Interval, b: Interval) -> Interval:
    lo, lo_open = max((a.lo, a.lo_open), (b.lo, b.lo_open))  # at equal bounds the open one is tighter
    hi, hi_open = min((a.hi, not a.hi_open), (b.hi, not b.hi_open))
    return Interval(lo, hi, lo_open, not hi_open)


def normalise(preds: Sequence[Predicate], group_on: str = "interval") -> dict[tuple[str, AttrType], Constraint]:
    """One constraint per attribute of a conjunction (``group_on``: ``interval``, the
    intersection of the attribute's predicates; ``first_predicate``, its first predicate's)."""
    by_attr: dict[tuple[str, AttrType], list[Constraint]] = {}
    for p in preds:
        by_attr.setdefault(p.attr, []).append(constraint_of(p))
    out: dict[tuple[str, AttrType], Constraint] = {}
    for attr, cs in by_attr.items():
        if group_on == "first_predicate":
            out[attr] = cs[0]
            continue
        if group_on != "interval":
            raise ValueError(f"group_on: {group_on!r} (interval or first_predicate)")
        intervals = [c for c in cs if isinstance(c, Interval)]
        if intervals:
            label = intervals[0]
            for c in intervals[1:]:
                label = intersect(label, c)
            if label.is_empty():
                raise ValueError(f"{attr[0]}: the predicates on it match no value")
            out[attr] = label
            continue
        patterns = [c for c in cs if isinstance(c, Pattern)]
        out[attr] = min(patterns, key=lambda c: (_SELECTIVITY[c.kind], -len(c.s))) if patterns else TOP
    return out


def matches(c: Constraint, v: Value) -> bool:
    """Whether value ``v`` (of the constraint's attribute type) satisfies ``c``."""
    if isinstance(c, Top):
        return True
    if isinstance(c, Interval):
        if isinstance(v, str):
            return False
        return (c.lo < v or (c.lo == v and not c.lo_open)) and (v < c.hi or (v == c.hi and not c.hi_open))
    if not isinstance(v, str):
        return False
    return {"eq": v == c.s, "prefix": v.startswith(c.s), "suffix": v.endswith(c.s), "substr": c.s in v}[c.kind]


def contains(p: Constraint, q: Constraint) -> bool:
    """Q ⊆ P: every value matching q matches p. Sound (never true wrongly), complete for
    intervals and for patterns of the same kind (spec §2.3)."""
    if isinstance(p, Top):
        return True
    if isinstance(q, Top):
        return False
    if isinstance(p, Interval):
        if not isinstance(q, Interval):
            return False
        if q.is_empty():
            return True
        lo_ok = p.lo < q.lo or (p.lo == q.lo and (not p.lo_open or q.lo_open))
        hi_ok = q.hi < p.hi or (q.hi == p.hi and (not p.hi_open or q.hi_open))
        return lo_ok and hi_ok
    if not isinstance(q, Pattern):
        return False
    if p.kind == "eq":
        return q.kind == "eq" and q.s == p.s
    if p.kind == "prefix":
        return q.kind in ("eq", "prefix") and q.s.startswith(p.s)
    if p.kind == "suffix":
        return q.kind in ("eq", "suffix") and q.s.endswith(p.s)
    return p.s in q.s  # substr: any pattern whose string holds it


def properly_contains(p: Constraint, q: Constraint) -> bool:
    return contains(p, q) and p.canon() != q.canon()


@dataclass(frozen=True, slots=True)
class Subscription:
    """A conjunction of predicates; ``labels`` its normalised constraint per attribute."""

    preds: tuple[Predicate, ...]
    labels: Mapping[tuple[str, AttrType], Constraint]

    @classmethod
    def of(cls, preds: Sequence[Predicate], group_on: str = "interval") -> Subscription:
        if not preds:
            raise ValueError("a subscription needs at least one predicate")
        return cls(tuple(preds), normalise(preds, group_on))

    def matches(self, event: Mapping[str, Value]) -> bool:
        """Every predicate has a matching value in the event (the full filter, every string
        predicate included, not only the labels)."""
        return all(p.name in event and p.matches(event[p.name]) for p in self.preds)

    def join_attribute(self, policy: str, rng: random.Random,
                       selectivity: Mapping[tuple[str, AttrType], float] | None = None) -> tuple[str, AttrType]:
        """The attribute whose tree this subscription joins (spec §2.4): ``random`` (uniform),
        ``most_selective`` (smallest ``selectivity``, the share of events a label matches;
        ties to the first attribute), ``first`` (lexicographically)."""
        attrs = sorted(self.labels)
        if policy == "random":
            return rng.choice(attrs)
        if policy == "first":
            return attrs[0]
        if policy == "most_selective":
            if selectivity is None:
                raise ValueError("most_selective needs each label's selectivity")
            return min(attrs, key=lambda a: selectivity.get(a, 1.0))
        raise ValueError(f"join_attr_policy: {policy!r} (one of {', '.join(JOIN_POLICIES)})")


# --- text form: how subscriptions and events travel as topic strings ---------------------------
#
# A plain topic ``t`` is the equality ``topic = 't'`` (spec §5.1, the topic mapping). A content
# filter or event starts with ``?`` and joins its parts with ``&``, like a query string:
# ``?price>=10&price<=19&symbol*='a'`` (a filter), ``?price=42&symbol='acgtacg'`` (an event).
# Operators: = < > <= >= and the string tests ^= (prefix) $= (suffix) *= (substring); ``name?``
# followed by a type (``int``, ``float``, ``string``) is ``any``. Strings are single-quoted and
# may not hold ``'`` or ``&``.

TOPIC_ATTRIBUTE = "topic"
_TEXT_OPS = MappingProxyType({"<=": "<=", ">=": ">=", "^=": "prefix", "$=": "suffix", "*=": "substr", "=": "=", "<": "<", ">": ">"})
_PART = re.compile(r"^([A-Za-z_][\w.-]*)(<=|>=|\^=|\$=|\*=|=|<|>|\?)(.*)$")


def _value_text(v: Value) -> str:
    if isinstance(v, str):
        if "'" in v or "&" in v:
            raise ValueError(f"string value {v!r} holds ' or &")
        return f"'{v}'"
    return repr(v)


def _parse_value(text: str, where: str) -> Value:
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    try:
        return int(text)
    except ValueError:
        pass
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a number or a quoted string") from None
    if not math.isfinite(v):
        raise ValueError(f"{where}: {text!r} is not a finite number")
    return v


def _parts(text: str) -> list[tuple[str, str, str]]:
    if not text.startswith("?") or len(text) < 2:
        raise ValueError(f"{text!r}: a content filter or event starts with '?'")
    out = []
    for part in text[1:].split("&"):
        m = _PART.match(part)
        if m is None:
            raise ValueError(f"{text!r}: cannot read {part!r} (name, operator, value)")
        out.append((m[1], m[2], m[3]))
    return out


def parse_filter(text: str, group_on: str = "interval") -> Subscription:
    """A subscription from its text form (a plain topic is ``topic = 'topic'``)."""
    if not text.startswith("?"):
        return Subscription.of([Predicate(TOPIC_ATTRIBUTE, "=", text)], group_on)
    preds = []
    for name, op, value in _parts(text):
        if op == "?":
            if value not in ("int", "float", "string"):
                raise ValueError(f"{text!r}: {name}? needs a type (int, float or string)")
            preds.append(Predicate(name, "any", None, value))  # type: ignore[arg-type]
        else:
            preds.append(Predicate(name, _TEXT_OPS[op], _parse_value(value, f"{text!r} {name}")))
    return Subscription.of(preds, group_on)


def format_filter(preds: Sequence[Predicate]) -> str:
    ops = {v: k for k, v in _TEXT_OPS.items()}
    return "?" + "&".join(f"{p.name}?{p.attr[1]}" if p.op == "any" else f"{p.name}{ops[p.op]}{_value_text(p.value)}"  # type: ignore[arg-type]
                          for p in preds)


def parse_event(text: str) -> dict[str, Value]:
    """An event's attributes from its text form (a plain topic is ``{topic: 'topic'}``)."""
    if not text.startswith("?"):
        return {TOPIC_ATTRIBUTE: text}
    attrs: dict[str, Value] = {}
    for name, op, value in _parts(text):
        if op != "=" or name in attrs:
            raise ValueError(f"{text!r}: an event is one equality per attribute ({name}{op}...)")
        attrs[name] = _parse_value(value, f"{text!r} {name}")
    return attrs


def format_event(attrs: Mapping[str, Value]) -> str:
    return "?" + "&".join(f"{k}={_value_text(v)}" for k, v in sorted(attrs.items()))


_CANON_NUM = re.compile(r"^num([\[(])([^,]+),([^\])]+)([\])])$")


def parse_canon(text: str) -> Constraint:
    """A label from its canonical string (``canon()``'s inverse): how labels travel in messages."""
    if text == "top":
        return TOP
    if text.startswith("str:"):
        kind, _, s = text[4:].partition(":")
        if kind not in _SELECTIVITY:
            raise ValueError(f"label {text!r}: unknown string test {kind!r}")
        return Pattern(kind, s)
    m = _CANON_NUM.match(text)
    if m is None:
        raise ValueError(f"label {text!r}: not top, num[..] or str:..")
    def bound(b: str) -> float:
        return math.inf if b == "+inf" else -math.inf if b == "-inf" else _parse_value(b, text)  # type: ignore[return-value]
    out = Interval(bound(m[2]), bound(m[3]), m[1] == "(", m[4] == ")")
    if out.canon() != text or out.is_empty():
        raise ValueError(f"label {text!r} is not a canonical non-empty interval")
    return out
