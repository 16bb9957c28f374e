"""What gossip layers share: aged views, the oldest-partner rule, pending replies, the duplicate
filter. Written once here; every layer and the stack use these."""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable
from typing import Generic, TypeVar

from node.kit.types import Descriptor, NodeId

View = dict[NodeId, Descriptor]
T = TypeVar("T")


def age_all(view: View) -> None:
    """One cycle older: every entry's age grows by one."""
    for nid, d in view.items():
        view[nid] = d.aged(d.age + 1)


def pick_oldest(view: View, rng: random.Random) -> NodeId:
    """The id of an entry of the highest age, uniformly among ties (``view`` must not be empty)."""
    oldest = max(d.age for d in view.values())
    return rng.choice([n for n, d in view.items() if d.age == oldest])


def youngest(*views: View) -> View:
    """The views merged, one entry per id: the youngest copy, the earlier view's on a tie.
    The last view is copied whole; the others are merged into it."""
    best = dict(views[-1])
    for view in reversed(views[:-1]):
        for nid, d in view.items():
            old = best.get(nid)
            if old is None or d.age <= old.age:
                best[nid] = d
    return best


class PendingReplies(Generic[T]):
    """The requests of one layer whose reply is still awaited, with their deadlines.

    ``take`` returns what was kept with the request, or None for a reply that nobody awaits or
    that came after its deadline; those are counted in ``late``."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.late = 0
        self._due: dict[NodeId, tuple[T, float]] = {}

    def expect(self, partner: NodeId, now: float, kept: T) -> None:
        self._due[partner] = (kept, now + self.timeout_s)

    def prune(self, now: float) -> list[tuple[NodeId, T]]:
        """Forget the requests whose deadline has passed (a reply to them would be late); return
        them, (partner, kept)."""
        expired = [(q, p[0]) for q, p in self._due.items() if p[1] <= now]
        for q, _ in expired:
            del self._due[q]
        return expired

    def take(self, partner: NodeId, now: float) -> T | None:
        entry = self._due.pop(partner, None)
        if entry is None or entry[1] < now:
            self.late += 1
            return None
        return entry[0]

    def __len__(self) -> int:
        return len(self._due)

    def entries(self) -> list[tuple[NodeId, T, float]]:
        """The awaited replies as (partner, kept, deadline), in the order they were asked."""
        return [(partner, kept, due) for partner, (kept, due) in self._due.items()]

    def restore(self, entries: list[tuple[NodeId, T, float]], late: int) -> None:
        """Await exactly ``entries`` (as :meth:`entries` gives them), with ``late`` counted."""
        self._due = {partner: (kept, due) for partner, kept, due in entries}
        self.late = late


class DuplicateFilter:
    """The event ids a node has seen, the ``capacity`` most recent (LRU)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, event_id: str) -> bool:
        return event_id in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, event_id: str) -> None:
        self._seen[event_id] = None
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)

    def ids(self) -> list[str]:
        """The ids remembered, the least recent first."""
        return list(self._seen)

    def restore(self, ids: Iterable[str]) -> None:
        """Remember exactly ``ids`` (the least recent first)."""
        self._seen = OrderedDict.fromkeys(ids)
