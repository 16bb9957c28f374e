"""RINGS: for each subscribed topic, the nearest subscribers by ring id on either side
(PolderCast §5.3; spec ../shared/design/protocols/poldercast.md).

Theory of operation

State: per subscribed topic t, ``succ[t]`` and ``pred[t]``: the ``ring_size/2`` nearest known
subscribers of t above and below this node's ring id (circularly), nearest first; ``view``: the
descriptors of every node in a ring slot, with RINGS's own ages.

Ring slots are recomputed from the union of all views at every tick and after every merge.
Each cycle: age every entry; the oldest ring neighbour q (ties at random) is the partner;
with no ring neighbour, a random node of the overlay layer (else the peer-sampling layer) that
shares a topic. q is sent, per topic it shares with this node, the ring_size/2 known
subscribers nearest q's ring id on either side; q answers the same way for the requester,
computing its reply before merging (spec: either order; this one never echoes the requester's
own entries back).

What goes when those candidates outnumber ``gossip_size`` (``selection``): ``random``
(default) is the paper's rule (§5.1: "it randomly picks g_ring of them"); ``nearest_first``
(this testbed's option) keeps each common ring's first successor and predecessor of q before
any second one, ties at random, since they are the likeliest to be q's true neighbours.

Removal of the partner (choice, ``removal``): the paper removes q from the view when the
exchange starts and re-inserts it when q replies, so that dead neighbours are purged. In the
paper's cycle-driven simulator the exchange is atomic; here it takes a round trip, and while it
is in flight q is missing from every ring slot it held: an event published or forwarded then
skips q, and in a topic whose only other subscriber is q it goes nowhere (the "RINGS gap").
``on_timeout`` (default) keeps q in its slots until its reply is overdue (seen at the next
tick), then removes it; ``on_initiate`` is the paper's rule to the letter.

Topic priority (§4, choice): ``ring_size - min(ring_size, |succ_t ∪ pred_t|)``, 0 once both
sides are full with distinct nodes; topics still missing ring neighbours are favoured by
VICINITY. The node's profile carries the non-zero priorities, in insertion order.

Ring ids (choice, not in paper): the first 8 bytes of BLAKE2b(node id), so every node, backend
and the analysis compute the same 64-bit id from a node id without carrying it.

Ages (paper §4; spec §4, §5.0 rule 1): RINGS keeps its own ages. Once per tick every entry
grows one older; a request or reply straight from a ring neighbour zeroes it; a fresher copy of
a ring neighbour seen in another view or in a message brings its newer profile and keeps the
RINGS age (were copies to set ages, every CYCLON or VICINITY sighting would make a ring
neighbour young again and LRU partner choice would keep missing it); a node new to RINGS enters
with the age of the youngest copy it came from (spec choice). Entries sent keep their ages.

What is sent (paper §5, "considering the union of views of all three modules"): known
subscribers of the common topics from the views, not this node's own profile (the message's
sender field carries it; the profile would only take one of the ``gossip_size`` places).

Invariants (``validate``): no self entry; every ring slot refers to a node of ``view``
subscribed (per its profile) to that topic; each side at most ``ring_size/2``, nearest first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from node.kit.stack import UNORDERED, ExchangeLayer, LayerState
from node.kit.types import Action, Descriptor, Gossip, LayerSnapshot, LocalProtocolError, NodeId, Topic
from node.kit.views import age_all, pick_oldest
from node.protocols.poldercast.vicinity import TopicBits

LAYER = "rings"
SPACE = 1 << 64


def ring_id(node_id: int) -> int:
    return int.from_bytes(hashlib.blake2b(node_id.to_bytes(8, "big"), digest_size=8).digest(), "big")


class RingIds(dict[int, int]):
    """``ring_id`` memoized (one instance shared by the cores of a driver; pickles empty)."""

    def __missing__(self, node_id: int) -> int:
        rid = self[node_id] = ring_id(node_id)
        return rid

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (RingIds, ())


def _same(a: object, b: object) -> bool:
    return a is b or a == b


@dataclass
class RingsState(LayerState):
    succ: dict[Topic, list[NodeId]] = field(default_factory=dict, metadata=UNORDERED)
    pred: dict[Topic, list[NodeId]] = field(default_factory=dict, metadata=UNORDERED)
    holes: set[Topic] = field(default_factory=set)
    """Topics whose slots need a full recompute."""
    prio: dict[Topic, int] = field(default_factory=dict, metadata=UNORDERED)
    """The non-zero topic priorities."""
    considered: dict[NodeId, frozenset[Topic]] = field(default_factory=dict, metadata=UNORDERED)
    """The newcomers of the last ring update, with their topics."""


class Rings(ExchangeLayer):
    """The RINGS layer. ``overlay`` and ``sampling``: the layers whose views supply a partner
    when no ring neighbour is known (the first non-empty one)."""

    name = LAYER

    def __init__(self, *, ring_size: int, gossip_size: int, period_s: float, timeout_s: float, bits: TopicBits,
                 ids: RingIds, removal: str = "on_timeout", overlay: str = "vicinity",
                 sampling: str = "cyclon", selection: str = "random") -> None:
        super().__init__(max_entries=gossip_size, timeout_s=timeout_s)
        self.ring_size, self.gossip_size, self.period_s = ring_size, gossip_size, period_s
        self.bits, self.ids, self.removal = bits, ids, removal
        self.overlay, self.sampling, self.selection = overlay, sampling, selection
        self.succ: dict[Topic, list[NodeId]] = {}
        self.pred: dict[Topic, list[NodeId]] = {}
        self.rid = 0
        self._holes: set[Topic] = set()  # topics whose slots need a full recompute
        self._prio: dict[Topic, int] = {}  # the non-zero topic priorities
        self._considered: dict[NodeId, frozenset[Topic]] = {}  # newcomers of the last ring update

    def bind(self, stack: Any) -> None:
        super().bind(stack)
        self.rid = self.ids[stack.node_id]
        self._holes = set(stack.me.topics)
        self._refresh_priorities()

    @property
    def period(self) -> float:
        return self.period_s

    def export_state(self) -> RingsState:
        return RingsState(**vars(super().export_state()), succ=self.succ, pred=self.pred, holes=self._holes,
                          prio=self._prio, considered=self._considered)

    def import_state(self, state: LayerState) -> None:
        assert isinstance(state, RingsState)
        super().import_state(state)
        self.succ, self.pred, self._holes, self._prio, self._considered = \
            state.succ, state.pred, state.holes, state.prio, state.considered

    def subscribed(self, topics: list[Topic]) -> None:
        for topic in topics:
            self.succ.setdefault(topic, [])
            self.pred.setdefault(topic, [])
        self._holes.update(topics)
        self._refresh_priorities(topics)  # only theirs change, and the profile is rebuilt once

    def unsubscribed(self, topic: Topic) -> None:
        self.succ.pop(topic, None)
        self.pred.pop(topic, None)
        self.view = {n: self.view[n] for slots in (*self.succ.values(), *self.pred.values()) for n in slots}
        self._refresh_priorities()

    # --- the exchange -------------------------------------------------------------------------

    def exchange(self, now: float) -> list[Action]:
        stack = self.stack
        age_all(self.view)
        self.recompute()
        if self.view:
            oldest = pick_oldest(self.view, stack.rng)
            q = self.view[oldest] if self.removal == "on_timeout" else self.drop(oldest)
            return [self.request(q, self.select(q), now, kept=True)]
        mine = stack.me.topics
        sharing = [d for d in (stack.view(self.overlay) or stack.view(self.sampling)).values() if d.topics & mine]
        if not sharing:
            return []
        q = stack.rng.choice(sharing)
        return [self.request(q, self.select(q), now, kept=False)]

    def on_timeout(self, partner: NodeId, kept: Any, now: float) -> None:
        if kept and self.removal == "on_timeout" and partner in self.view:
            self.drop(partner)  # the next recompute (this tick's) refills its slots

    def on_request(self, src: NodeId, msg: Gossip, now: float) -> list[Descriptor]:
        fresh = msg.sender.aged(0)
        reply = self.select(fresh)
        self.recompute([*msg.entries, fresh], contact=src)
        return reply

    def on_reply(self, msg: Gossip, kept: Any, now: float) -> None:
        self.recompute([*msg.entries, msg.sender.aged(0)], contact=msg.sender.node_id)

    def select(self, q: Descriptor) -> list[Descriptor]:
        """Per common topic, the known subscribers just below and just above q's ring id."""
        stack = self.stack
        common = stack.me.topics & q.topics
        shared, mask = self.bits.bits(common), self.bits.mask
        known = [d for d in stack.union().values() if d.node_id != q.node_id and mask(d.topics) & shared]
        rank: dict[NodeId, int] = {}  # best rank on a common ring (0: a first successor or predecessor)
        chosen: dict[NodeId, Descriptor] = {}
        for d, r in self._nearest(known, self.ids[q.node_id], common):
            rank[d.node_id] = min(r, rank.get(d.node_id, r))
            chosen[d.node_id] = d
        out = list(chosen.values())
        if len(out) <= self.gossip_size:
            return out
        if self.selection == "random":
            return stack.rng.sample(out, self.gossip_size)
        stack.rng.shuffle(out)  # ties at random
        return sorted(out, key=lambda d: rank[d.node_id])[:self.gossip_size]

    def _nearest(self, members: list[Descriptor], center: int, topics: frozenset[Topic]) -> list[tuple[Descriptor, int]]:
        """For each topic, the ring_size/2 members with the nearest ids above ``center`` and the
        ring_size/2 nearest below (circularly), each with its best rank on a ring (0: a first
        successor or predecessor); one sort per direction for all topics."""
        half, ids = self.ring_size // 2, self.ids
        picked: list[tuple[Descriptor, int]] = []
        for distance in (lambda d: (ids[d.node_id] - center) % SPACE,
                         lambda d: (center - ids[d.node_id]) % SPACE):
            room = dict.fromkeys(topics, half)
            unfilled = len(room)
            for d in sorted(members, key=distance):
                best = half
                for t in d.topics & topics:
                    if room[t]:
                        best = min(best, half - room[t])
                        room[t] -= 1
                        unfilled -= not room[t]
                if best < half:
                    picked.append((d, best))
                    if not unfilled:
                        break
        return picked

    # --- ring slots ---------------------------------------------------------------------------

    def recompute(self, received: Sequence[Descriptor] = (), contact: NodeId | None = None) -> None:
        """Each topic's ring slots become its ``ring_size/2`` nearest successors and predecessors
        among the union of all views and ``received`` (the youngest copy of each profile).
        ``contact``: the node ``received`` came from directly; a ring neighbour's entry becomes
        its last copy in ``received`` (its fresh profile, age 0: paper §4, rule 1).

        Incremental, with the result of recomputing every topic from scratch: a topic's slots
        already hold the nearest of every node seen since they were last computed (everything
        not kept was farther), so only newcomers can enter them. Topics with a hole (a removed
        neighbour, a new subscription, a profile that gained or lost the topic) are recomputed
        over the whole pool. This keeps the cost of a merge proportional to the message, not to
        the subscriber's RINGS view, which reaches thousands on social workloads."""
        stack, ids = self.stack, self.ids
        nbr, mine, me = self.view, stack.me.topics, stack.node_id
        refreshed: dict[NodeId, Descriptor] = {}
        newcomers: dict[NodeId, Descriptor] = {}
        for d in (*stack.union(without=self.name).values(), *received):
            x = d.node_id
            if x == me:
                continue
            if x in nbr and x == contact:
                refreshed[x] = d  # the sender's own copy comes last in received
            elif x in nbr:
                # a fresher copy brings the newer profile at the RINGS age
                cur = refreshed.get(x, nbr[x])
                # (identity first: comparing equal profiles of heavy subscribers is O(topics))
                if d.age < cur.age and (not _same(d.priorities, cur.priorities) or not _same(d.topics, cur.topics)):
                    refreshed[x] = d.aged(cur.age)
            elif x not in newcomers or d.age < newcomers[x].age:
                newcomers[x] = d
        holes, self._holes = self._holes & mine, set()
        seen, self._considered = self._considered, {x: d.topics for x, d in newcomers.items()}
        for x, d in refreshed.items():
            if not _same(d.topics, nbr[x].topics):
                holes |= (d.topics ^ nbr[x].topics) & mine
            nbr[x] = d
        for t in sorted(holes):
            self.succ.setdefault(t, [])
            self.pred.setdefault(t, [])
        if holes:
            self._fill_holes(holes, newcomers)
        changed = set(holes)
        for x, d in newcomers.items():
            if _same(seen.get(x), d.topics):
                continue  # considered at the last recompute: slots only got nearer since
            for t in d.topics & mine:
                if t not in holes and (self._place(self.succ[t], x, (ids[x] - self.rid) % SPACE, 1)
                                       | self._place(self.pred[t], x, (self.rid - ids[x]) % SPACE, -1)):
                    changed.add(t)
        if changed:
            self.view = {n: nbr[n] if n in nbr else newcomers[n]
                         for slots in (*self.succ.values(), *self.pred.values()) for n in slots}
        self._refresh_priorities(holes | changed)

    def drop(self, node: NodeId) -> Descriptor:
        """Remove ``node`` from RINGS and from every ring slot; its rings get refilled at the next
        update. Returns its descriptor."""
        gone = self.view.pop(node)
        for t in gone.topics & self.stack.me.topics:  # its slots are all in topics of its profile
            for slots in (self.succ[t], self.pred[t]):
                if node in slots:
                    slots.remove(node)
                    self._holes.add(t)
        return gone

    def _place(self, slots: list[NodeId], x: NodeId, distance: int, sign: int) -> bool:
        """Put x into a nearest-first side of a ring if it is nearer than the farthest; True if
        the side changed."""
        half, ids = self.ring_size // 2, self.ids
        if x in slots:
            return False
        at = len(slots)
        while at and (sign * (ids[slots[at - 1]] - self.rid)) % SPACE > distance:
            at -= 1
        if at >= half:
            return False
        slots.insert(at, x)
        del slots[half:]
        return True

    def _fill_holes(self, holes: set[Topic], newcomers: dict[NodeId, Descriptor]) -> None:
        """Recompute the slots of ``holes`` over the whole pool."""
        half, me, ids = self.ring_size // 2, self.rid, self.ids
        members = [d for d in (*self.view.values(), *newcomers.values()) if not d.topics.isdisjoint(holes)]
        for slots, distance in ((self.succ, lambda d: (ids[d.node_id] - me) % SPACE),
                                (self.pred, lambda d: (me - ids[d.node_id]) % SPACE)):
            for t in holes:
                slots[t] = []
            open_topics = set(holes)
            for d in sorted(members, key=distance):
                for t in d.topics & open_topics:
                    slots[t].append(d.node_id)
                    if len(slots[t]) == half:
                        open_topics.discard(t)
                if not open_topics:
                    break

    # --- topic priorities ---------------------------------------------------------------------

    def _topic_priority(self, t: Topic) -> int:
        size = self.ring_size
        succ, pred = self.succ.get(t, ()), self.pred.get(t, ())
        if len(succ) + len(pred) >= size and set(succ).isdisjoint(pred):
            return 0  # both sides full with distinct neighbours: no need
        return size - min(size, len(set(succ) | set(pred)))

    def _refresh_priorities(self, topics: Iterable[Topic] | None = None) -> None:
        """Update the priorities of ``topics`` (all when None) and the profile that carries them."""
        stack = self.stack
        changed = topics is None
        if topics is None:
            self._prio, topics = {}, stack.me.topics
        for t in topics:
            p = self._topic_priority(t)
            if p != self._prio.get(t, 0):
                changed = True
                if p:
                    self._prio[t] = p
                else:
                    del self._prio[t]
        if changed:
            # insertion order, not sorted: a heavy subscriber's profile is rebuilt at most merges
            me = stack.me
            stack.me = Descriptor(me.node_id, me.addr, me.topics, 0, tuple(self._prio.items()))

    # --- introspection ------------------------------------------------------------------------

    def snapshot(self) -> list[LayerSnapshot]:
        return [
            LayerSnapshot(LAYER, list(self.view)),
            LayerSnapshot(f"{LAYER}.succ", [], {t: list(v) for t, v in self.succ.items() if v}),
            LayerSnapshot(f"{LAYER}.pred", [], {t: list(v) for t, v in self.pred.items() if v}),
        ]

    def validate(self) -> None:
        super().validate()
        half, ids = self.ring_size // 2, self.ids
        for t in self.stack.me.topics:
            for slots, sign in ((self.succ.get(t, []), 1), (self.pred.get(t, []), -1)):
                distances = [(sign * (ids[n] - self.rid)) % SPACE for n in slots]
                if len(slots) > half or distances != sorted(distances):
                    raise LocalProtocolError(f"ring slots of {t!r} too many or out of order")
                for n in slots:
                    if n not in self.view or t not in self.view[n].topics:
                        raise LocalProtocolError(f"ring slot {n} of {t!r} without a matching profile")
