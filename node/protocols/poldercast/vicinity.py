"""VICINITY: links to the nodes whose profiles rank best for this node's topics (PolderCast §5.2;
spec ../shared/design/protocols/poldercast.md).

Theory of operation

State: ``view``, at most ``view_size`` descriptors, each with an age in cycles.

Each cycle: age every entry; the oldest entry is the partner (ties at random) and is removed at
once (proactive removal: it comes back if it replies); with an empty view a random entry of the
peer-sampling layer is the partner. The partner is sent the ``gossip_size`` candidates from the
union of the node's views that rank best *for it* (paper §5: "merges its views from all three
modules"; not the node's own profile, which the sender field carries). The partner merges
first, then answers with the best candidates for the requester from its union after the merge
(paper: "Finally, q responds"), leaving out those just received (choice: they carry no news).
A merge makes the view the ``view_size`` best of the union and what was received.

Ages (paper §4; spec §4, §5.0 rule 1): VICINITY keeps its own ages. A neighbour that stays in the
view keeps its age (with the freshest profile of any copy), zeroed only when a request or reply
comes straight from it; a node new to the view enters with the age of the youngest copy it came
from (spec choice); entries sent keep their ages.

Ranking (``rank``): highest topic priority of a shared topic (``priority_mode``: the max, or
the sum, over shared topics: a choice), then most shared topics, then a uniform random
tie-break; candidates sharing no topic are never ranked.

Invariants: no self entry, at most ``view_size`` entries, non-negative ages.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from node.kit.stack import ExchangeLayer, LayerState
from node.kit.types import Action, Descriptor, Gossip, LocalProtocolError, NodeId, Topic
from node.kit.views import View, age_all, pick_oldest

LAYER = "vicinity"
Priorities = tuple[tuple[Topic, int], ...]
Ladder = list[tuple[int, int]]


class TopicBits:
    """Profiles' topic sets as int bitsets, memoized per set (profiles repeat): intersecting two
    subscribers of thousands of topics is then one C-level AND and a popcount instead of
    thousands of hash lookups. Bits are handed out on first sight; one instance is shared by
    the cores of one driver (``shared``), and a pickled core starts with an empty memo."""

    MAX_MASKS = 1_000_000
    MAX_LADDERS = 20_000

    def __init__(self) -> None:
        self.bit: dict[Topic, int] = {}
        self.masks: dict[frozenset[Topic], int] = {}
        self.ladders: dict[int, tuple[Priorities, Ladder, int]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def mask(self, topics: frozenset[Topic]) -> int:
        mask = self.masks.get(topics)
        if mask is None:
            if len(self.masks) >= self.MAX_MASKS:
                self.masks.clear()
            mask = self.masks[topics] = self.bits(topics)
        return mask

    def ladder(self, priorities: Priorities) -> tuple[Ladder, int]:
        """A profile's topic priorities as (priority, bitset) levels, highest first, and the
        bitset of all its prioritized topics; memoized per priorities tuple (a profile's copies
        share it; the entry keeps it alive, so its id is not reused while cached)."""
        hit = self.ladders.get(id(priorities))
        if hit is not None and hit[0] is priorities:
            return hit[1], hit[2]
        levels: dict[int, set[Topic]] = {}
        for t, p in priorities:
            levels.setdefault(p, set()).add(t)
        ladder = [(p, self.bits(ts)) for p, ts in sorted(levels.items(), reverse=True)]
        prioritized = self.bits(t for t, _ in priorities)
        if len(self.ladders) >= self.MAX_LADDERS:
            self.ladders.clear()
        self.ladders[id(priorities)] = (priorities, ladder, prioritized)
        return ladder, prioritized

    def bits(self, topics: Iterable[Topic]) -> int:
        mask = 0
        for t in topics:
            bit = self.bit.get(t)
            if bit is None:
                bit = self.bit[t] = len(self.bit)
            mask |= 1 << bit
        return mask


Key = int
"""A candidate's first two ranking keys as one int, (priority << 32) | shared topics: ordered as
the pair, and no tuple per candidate (most keys are small ints, which Python does not allocate)."""
_UNSEEN: Any = object()


def rank(target: Descriptor, candidates: Iterable[Descriptor], k: int, rng: random.Random, bits: TopicBits,
         priority_mode: str = "max", keys: dict[frozenset[Topic], Key | None] | None = None) -> list[Descriptor]:
    """The k candidates best for ``target``: highest priority of a shared topic (max or sum,
    ``priority_mode``), then most shared topics, then a random tie-break.

    Topic sets are compared as bitsets. The tie-break is drawn only where it decides: candidates
    are grouped by their first two keys, whole groups are taken best first, and the group that
    does not fit is sampled uniformly (the same distribution as a fresh random key per
    candidate). ``keys``: each candidate profile's first two keys for this target (None: no
    topic shared), kept by a caller that ranks for the same target profile again."""
    tid, by_max = target.node_id, priority_mode == "max"
    wanted = bits.mask(target.topics)
    prio = {} if by_max else dict(target.priorities)
    # max mode: a candidate's first key is the first level of the ladder it shares a topic with;
    # most candidates share none of the prioritized topics and skip the ladder
    ladder, prioritized = bits.ladder(target.priorities)
    masks, known = bits.masks, {} if keys is None else keys
    groups: dict[Key, list[Descriptor]] = {}
    for c in candidates:  # the hottest loop of the simulator: kept flat
        ct = c.topics
        key = known.get(ct, _UNSEEN)
        if key is _UNSEEN:
            cm = masks.get(ct)
            if cm is None:
                cm = bits.mask(ct)
            n = (wanted & cm).bit_count()
            first = 0  # priority keys are target topics, so a topic of ct in prio is shared
            if n and prioritized & cm:
                if by_max:
                    for p, level in ladder:
                        if level & cm:
                            first = p
                            break
                else:
                    first = sum(p for t, p in prio.items() if t in ct) if len(prio) < len(ct) \
                        else sum(prio[t] for t in ct if t in prio)
            key = known[ct] = (first << 32) | n if n else None
        if key is None or c.node_id == tid:
            continue
        group = groups.get(key)
        if group is None:
            groups[key] = [c]
        else:
            group.append(c)
    best: list[Descriptor] = []
    for key in sorted(groups, reverse=True):
        group, room = groups[key], k - len(best)
        if len(group) > room:
            best += rng.sample(group, room)
            break
        rng.shuffle(group)
        best += group
    return best


class Vicinity(ExchangeLayer):
    """The VICINITY layer. ``sampling``: the layer whose view supplies a partner when this view
    is empty."""

    name = LAYER
    MAX_OWN_KEYS = 4096

    def __init__(self, *, view_size: int, gossip_size: int, period_s: float, timeout_s: float, bits: TopicBits,
                 priority_mode: str = "max", sampling: str = "cyclon") -> None:
        super().__init__(max_entries=gossip_size, timeout_s=timeout_s)
        self.view_size, self.gossip_size, self.period_s = view_size, gossip_size, period_s
        self.bits, self.priority_mode, self.sampling = bits, priority_mode, sampling
        self._own_keys: dict[frozenset[Topic], Key | None] = {}
        self._own_keys_for: Descriptor | None = None

    @property
    def period(self) -> float:
        return self.period_s

    def import_state(self, state: LayerState) -> None:
        super().import_state(state)
        self._own_keys, self._own_keys_for = {}, None  # a cache, not state

    def rank(self, target: Descriptor, candidates: Iterable[Descriptor], k: int,
             keys: dict[frozenset[Topic], Key | None] | None = None) -> list[Descriptor]:
        return rank(target, candidates, k, self.stack.rng, self.bits, self.priority_mode, keys)

    def _keys_for_me(self) -> dict[frozenset[Topic], Key | None]:
        """rank's keys for this node's own profile: each merge ranks much the same pool as the
        last, for the same profile. Dropped when the profile changes (its topics or
        priorities) and when they number ``MAX_OWN_KEYS``."""
        me, keys = self.stack.me, self._own_keys
        if me is not self._own_keys_for or len(keys) >= self.MAX_OWN_KEYS:
            keys.clear()
            self._own_keys_for = me
        return keys

    def exchange(self, now: float) -> list[Action]:
        stack = self.stack
        age_all(self.view)
        if self.view:
            q = self.view.pop(pick_oldest(self.view, stack.rng))
        elif sampled := stack.view(self.sampling):
            q = stack.rng.choice(list(sampled.values()))
        else:
            return []
        return [self.request(q, self.rank(q, stack.union().values(), self.gossip_size), now)]

    def on_request(self, src: NodeId, msg: Gossip, now: float) -> list[Descriptor]:
        self._merge(msg)
        exclude = {e.node_id for e in msg.entries}
        candidates = [d for d in self.stack.union().values() if d.node_id not in exclude]
        return self.rank(msg.sender, candidates, self.gossip_size)

    def on_reply(self, msg: Gossip, kept: Any, now: float) -> None:
        self._merge(msg)

    def _merge(self, msg: Gossip) -> None:
        """The view becomes the best of all views and ``msg``'s entries and sender (the youngest
        copy of each profile); a neighbour that stays keeps its VICINITY age, but the sender's
        becomes 0."""
        own, sender = self.view, msg.sender.aged(0)
        pool = self.stack.union()
        for d in (*msg.entries, sender):
            old = pool.get(d.node_id)
            if old is None or d.age < old.age:
                pool[d.node_id] = d
        pool.pop(self.stack.node_id, None)
        view: View = {}
        for d in self.rank(self.stack.me, pool.values(), self.view_size, self._keys_for_me()):
            x, mine = d.node_id, own.get(d.node_id)
            view[x] = sender if x == sender.node_id else d if mine is None or mine.age == d.age else d.aged(mine.age)
        self.view = view

    def validate(self) -> None:
        super().validate()
        if len(self.view) > self.view_size:
            raise LocalProtocolError("VICINITY view over its size")
