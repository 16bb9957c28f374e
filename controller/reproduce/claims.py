"""Claims as data: each paper's checkable headline results (``claims/<paper>.yaml``, from the
design specs), and, for those this project checks, how (:class:`Check`): the runs each scale
needs, the number taken from their summaries, what the paper says it should be, and the rule
that gives the verdict.

Verdicts: ``reproduced`` (a bound, an ordering or a trend the paper states holds),
``within tolerance`` (our number within the stated tolerance of the paper's), ``shape only``
(the paper's numbers missed, its shape held), ``not reproduced``, ``not testable`` (with why:
a baseline not built, a figure read off a curve, or no check registered yet).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

CLAIMS = Path(__file__).parent / "claims"
PAPERS = {
    "poldercast": "PolderCast (Setty, van Steen, Vitenberg, Voulgaris; Middleware 2012)",
    "spidercast": "SpiderCast (Chockler, Melamed, Tock, Vitenberg; IPTPS 2007)",
    "stan": "StaN (Matos, Felber, Oliveira, Pereira, Rivière; DAIS 2013)",
    "dps": "DPS (Anceaume, Gradinariu, Datta, Simon, Virgillito; 2006)",
    "ferretti": "Interest-aware gossip on complex networks (Ferretti, D'Angelo; 2011)",
}
Scale = Literal["quick", "paper"]
Verdict = Literal["reproduced", "within tolerance", "shape only", "not reproduced", "not testable"]
FAILED: tuple[Verdict, ...] = ("not reproduced",)


@dataclass(frozen=True)
class Run:
    """One experiment file with ``--set`` overrides, once per seed in ``seeds`` (none: the
    file's own seed)."""

    file: str
    sets: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()

    def expanded(self) -> list[tuple[str, tuple[str, ...]]]:
        if not self.seeds:
            return [(self.file, self.sets)]
        return [(self.file, (*self.sets, f"seed={s}")) for s in self.seeds]


@dataclass(frozen=True)
class Expect:
    """What the paper says of the number (of every number, for a sequence): ``op`` one of ``>=``,
    ``<=``, ``between`` (``value`` = (low, high), widened by ``abs_tol``), ``==`` (within ``tol``,
    relative), ``decreasing``, ``increasing`` (a sequence), ``true``, ``all`` (``value``: an
    Expect per part of a claim, ``ours`` a value per part; the weakest part's verdict);
    ``value``: the paper's number (or bound); ``shape``: for ``==``, the ordering or trend to
    fall back on."""

    op: Literal[">=", "<=", "between", "==", "decreasing", "increasing", "true", "all"]
    value: Any = None
    tol: float = 0.0
    abs_tol: float = 0.0
    """``==``: also within this much, absolutely (percentage points, say)."""
    shape: Literal["decreasing", "increasing"] | None = None

    def verdict(self, ours: Any) -> Verdict:
        if ours is None:
            return "not reproduced"
        if self.op == "all":
            parts = {part.verdict(v) for part, v in zip(self.value, ours, strict=True)}
            return next(v for v in ("not reproduced", "shape only", "within tolerance", "reproduced") if v in parts)
        if self.op == ">=":
            return "reproduced" if min(_values(ours)) >= self.value else "not reproduced"
        if self.op == "<=":
            return "reproduced" if max(_values(ours)) <= self.value else "not reproduced"
        if self.op == "between":
            lo, hi = self.value
            return "reproduced" if all(lo - self.abs_tol <= v <= hi + self.abs_tol for v in _values(ours)) \
                else "not reproduced"
        if self.op == "true":
            return "reproduced" if ours is True else "not reproduced"
        if self.op in ("decreasing", "increasing"):
            return "reproduced" if _monotone(ours, self.op) else "not reproduced"
        if _close(ours, self.value, self.tol, self.abs_tol):
            return "within tolerance"
        if self.shape is not None and _monotone(ours, self.shape):
            return "shape only"
        return "not reproduced"

    def paper(self) -> Any:
        """The paper's number(s), as the report shows them."""
        return [part.paper() for part in self.value] if self.op == "all" else self.value

    def describe(self) -> str:
        if self.op == "==":
            within = " or ".join(w for w in (f"{self.tol:.0%}" if self.tol else "", f"{self.abs_tol:g}" if self.abs_tol else "") if w)
            return f"{self.value} ± {within}" + (f" (shape: {self.shape})" if self.shape else "")
        if self.op in ("decreasing", "increasing", "true"):
            return self.op
        if self.op == "all":
            return "; ".join(part.describe() for part in self.value)
        if self.op == "between":
            return f"between {self.value[0]} and {self.value[1]}" + (f" (± {self.abs_tol:g})" if self.abs_tol else "")
        return f"{self.op} {self.value}"


def _num(x: Any) -> float:
    return float(x["mean"] if isinstance(x, dict) else x)


def _values(x: Any) -> list[float]:
    return [_num(v) for v in (x if isinstance(x, (list, tuple)) else [x])]


def _monotone(x: Any, direction: str) -> bool:
    v = _values(x)
    pairs = list(zip(v, v[1:]))
    return bool(pairs) and all(b < a if direction == "decreasing" else b > a for a, b in pairs)


def _close(ours: Any, paper: Any, tol: float, abs_tol: float = 0.0) -> bool:
    mine, theirs = _values(ours), _values(paper)
    return len(mine) == len(theirs) and all(math.isclose(a, b, rel_tol=tol, abs_tol=abs_tol) for a, b in zip(mine, theirs))


def mean_sd(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation over repetitions (seeds)."""
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values)}


@dataclass(frozen=True)
class Check:
    """How this project checks a claim: per scale, its runs; ``metric`` takes their summaries
    (in the order of ``runs``, seeds expanded) to our number(s)."""

    runs: dict[str, tuple[Run, ...]]
    metric: Callable[[list[dict]], Any]
    expect: Expect | dict[str, Expect]
    """What the paper says, or per scale where the scales' runs cover different settings."""
    options: dict[str, Any] = field(default_factory=dict)
    """The rules and options the runs ran under that the verdict depends on."""
    x: Sequence[Any] | dict[str, Sequence[Any]] = ()
    """Where ``metric`` gives a sequence: its x values (for the plot; per scale where they
    differ), and ``x_label``."""
    x_label: str = ""
    note: str = ""
    explained: str | Callable[[Any], str] = ""
    """Why the claim does not reproduce here, where that is understood (a rule the paper leaves
    open, a bound stated loosely): such a claim does not fail the command; the report says why.
    A function of our number(s) where the explanation rests on a measured fact: "" where that
    fact does not hold either, and the claim fails."""
    beside: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Other rules or options to report our number under, beside the verdict's (label -> ``--set``
    overrides added to every run of the check): a choice the paper leaves open, or this
    testbed's improvement on the paper's rule. Reported, never judged."""

    def runs_at(self, scale: str, beside: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
        """The (file, sets) of every run at ``scale``, seeds expanded; under ``beside``'s options
        where one is named."""
        extra = self.beside[beside] if beside else ()
        return [(f, (*sets, *extra)) for run in self.runs.get(scale, ()) for f, sets in run.expanded()]

    def at(self, scale: str) -> tuple[Expect, list[Any]]:
        """The expectation and x values at ``scale``."""
        expect = self.expect[scale] if isinstance(self.expect, dict) else self.expect
        x = self.x[scale] if isinstance(self.x, dict) else self.x
        return expect, list(x)


@dataclass(frozen=True)
class Claim:
    paper: str
    id: str
    statement: str
    setup: str
    source: str
    check: Check | None
    why_not: str = ""
    """Where ``check`` is None: why the claim is not testable here."""


def load(paper: str, checks: dict[str, Check], not_testable: dict[str, str]) -> list[Claim]:
    """``paper``'s claims from its YAML, each with its check or why it has none."""
    rows = yaml.safe_load((CLAIMS / f"{paper}.yaml").read_text())
    unknown = (checks.keys() | not_testable.keys()) - {r["id"] for r in rows}
    if unknown:
        raise KeyError(f"{paper}: checks for claims it does not list: {sorted(unknown)}")
    return [Claim(paper, r["id"], r["statement"], r["setup"], r["source"], checks.get(r["id"]),
                  not_testable.get(r["id"], "no check registered yet")) for r in rows]
