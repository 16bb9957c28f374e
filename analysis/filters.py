"""Content filters and events in their text form, read without the protocol cores (so the
analysis stays a second route to what the cores did): what a content run's filters are and
which events they match."""

from __future__ import annotations

import math
import re

# The text form (node/protocols/dps/content.py documents it), read here on its own so that the analysis
# stays a second route: ``?name op value&...``; ops = < > <= >= ^= (prefix) $= (suffix) *=
# (substring) and ``name?type`` (any); strings quoted with ', ints and floats as Python writes them.
_PART = re.compile(r"^([A-Za-z_][\w.-]*)(<=|>=|\^=|\$=|\*=|=|<|>|\?)(.*)$")
_STRING_KIND = {"=": "eq", "^=": "prefix", "$=": "suffix", "*=": "substr"}
Value = int | float | str


def _value(text: str) -> Value:
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    try:
        return int(text)
    except ValueError:
        return float(text)


def value_type(v: Value) -> str:
    return "string" if isinstance(v, str) else "int" if isinstance(v, int) else "float"


def _parts(text: str) -> list[tuple[str, str, str]]:
    if not text.startswith("?"):
        return [("topic", "=", f"'{text}'")]  # a plain topic is the equality topic = 'topic'
    out = []
    for part in text[1:].split("&"):
        m = _PART.match(part)
        if m is None:
            raise ValueError(f"{text!r}: cannot read {part!r}")
        out.append((m[1], m[2], m[3]))
    return out


def predicates(text: str) -> list[tuple]:
    """A filter's predicates as (name, type, kind, lo, hi, lo_open, hi_open, s): every predicate
    is an interval (numbers; an int's strict bound moved by one) or a string test, or top."""
    out = []
    for name, op, raw in _parts(text):
        if op == "?":
            out.append((name, raw, "top", None, None, None, None, None))
            continue
        v = _value(raw)
        kind = value_type(v)
        if kind == "string":
            out.append((name, kind, _STRING_KIND[op], None, None, None, None, v))
            continue
        x, inf, step = float(v), math.inf, 1 if kind == "int" else 0
        lo, hi, lo_open, hi_open = {
            "=": (x, x, False, False), "<=": (-inf, x, True, False), ">=": (x, inf, False, True),
            "<": (-inf, x - step, True, kind == "float"), ">": (x + step, inf, kind == "float", True),
        }[op]
        out.append((name, kind, "interval", lo, hi, lo_open, hi_open, None))
    return out


def attributes(text: str) -> dict[str, Value]:
    return {name: _value(raw) for name, _, raw in _parts(text)}


def holds(p: tuple, v: Value | None) -> bool:
    """Whether one predicate (``predicates``) holds for a value (None: the event lacks it)."""
    name, kind, test, lo, hi, lo_open, hi_open, s = p
    if v is None or value_type(v) != kind:
        return False
    if test == "top":
        return True
    if test == "interval":
        return (v > lo or (v == lo and not lo_open)) and (v < hi or (v == hi and not hi_open))
    return {"eq": v == s, "prefix": str(v).startswith(s), "suffix": str(v).endswith(s), "substr": s in str(v)}[test]


def filter_matches(text: str, event: dict[str, Value]) -> bool:
    """Whether an event (``attributes``) matches a filter: every predicate holds (plain Python:
    crosscheck's route)."""
    return all(holds(p, event.get(p[0])) for p in predicates(text))
