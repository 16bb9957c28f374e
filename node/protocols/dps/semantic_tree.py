"""Where a label belongs in an attribute's tree of semantic groups (DPS, spec
../shared/design/protocols/dps.md §4.3): the local decision of a group that knows its children,
and a whole-tree reference model built from it.

Theory of operation

``decide(children, x)`` runs at a group whose label contains ``x``: a child with an equal label
is found (the oldest); else the walk descends into the tightest child that contains ``x``
(``placement_key``: width, then the C1 convention, equalities below greater-than half-lines,
then the deepest half-line, then age); else a new group is created here and adopts the children
that ``x`` properly contains. So a parent's label always contains its children's (the safety
invariant that makes pruning correct), and an ambiguous label goes as deep as it can (C2).

``SemanticTree`` applies ``decide`` from the root (label ``TOP``) for every insertion, the
root-based traversal of the paper with no concurrency: the protocol's groups run the same
decision on their own views, and this model is what a run's tree is checked against.
``publish`` lists the groups an event visits under root-based traversal with the parent-side
filter (spec §4.5): the root, then every child whose label matches, recursively.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from node.protocols.dps.content import TOP, Constraint, Interval, Pattern, Value, contains, matches

_KIND_RANK = ("eq", "prefix", "suffix", "substr")


@dataclass(eq=False, slots=True)
class Group:
    """A group of the tree: its label, creation order (``seq``) and children."""

    label: Constraint
    seq: int
    parent: Group | None = None
    children: list[Group] = field(default_factory=list)


def placement_key(label: Constraint, seq: int) -> tuple[object, ...]:
    """Order among the children that contain a label: the first is where it descends."""
    if isinstance(label, Interval):
        width = label.hi - label.lo  # inf for a half-line
        upper_only = math.isinf(label.lo) and not math.isinf(label.hi)  # "a < c": C1 puts it after "a > c"
        depth = label.hi if upper_only else -label.lo
        return (width, upper_only, depth, seq)
    if isinstance(label, Pattern):
        return (_KIND_RANK.index(label.kind), -len(label.s), seq)
    return (math.inf, seq)


class Labelled(Protocol):
    label: Constraint
    seq: int


G = TypeVar("G", bound=Labelled)


def decide(children: Sequence[G], x: Constraint) -> tuple[str, G | None, list[G]]:
    """At a group whose label contains ``x``: ("found", child, []), ("descend", child, []) or
    ("create", None, adopted children). ``children``: anything with a ``label`` and a ``seq``
    (this module's groups, or what a DPS node knows of its group's children)."""
    canon = x.canon()
    equal = [c for c in children if c.label.canon() == canon]
    if equal:
        return "found", min(equal, key=lambda c: c.seq), []
    containers = [c for c in children if contains(c.label, x)]
    if containers:
        return "descend", min(containers, key=lambda c: placement_key(c.label, c.seq)), []
    return "create", None, [c for c in children if contains(x, c.label)]


class SemanticTree:
    """One attribute's tree, built by inserting labels from the root."""

    def __init__(self) -> None:
        self.root = Group(TOP, 0)
        self._seq = 0

    def insert(self, label: Constraint) -> Group:
        """The group of ``label``: an existing one with an equal label on its path, or a new
        one (adopting the children it contains)."""
        at = self.root
        if label.canon() == at.label.canon():
            return at
        while True:
            verdict, child, adopted = decide(at.children, label)
            if verdict == "found":
                assert child is not None
                return child
            if verdict == "descend":
                assert child is not None
                at = child
                continue
            self._seq += 1
            new = Group(label, self._seq, parent=at, children=adopted)
            at.children = [c for c in at.children if c not in adopted] + [new]
            for c in adopted:
                c.parent = new
            return new

    def publish(self, v: Value) -> list[Group]:
        """The groups an event with value ``v`` visits (root-based, parent-side filter)."""
        visited, stack = [], [self.root]
        while stack:
            g = stack.pop()
            visited.append(g)
            stack.extend(reversed([c for c in g.children if matches(c.label, v)]))
        return visited

    def groups(self) -> Iterable[Group]:
        stack = [self.root]
        while stack:
            g = stack.pop()
            yield g
            stack.extend(g.children)

    def depth(self) -> int:
        """Levels, the root's included."""
        def level(g: Group) -> int:
            return 1 + max((level(c) for c in g.children), default=0)
        return level(self.root)
