"""PolderCast: per-topic rings plus CYCLON and VICINITY shortcuts (Setty, van Steen, Vitenberg,
Voulgaris; Middleware 2012). Spec: ../shared/design/protocols/poldercast.md (§ numbers below).

Theory of operation

Three gossip layers, each with its own timer (period ``cycle_ms``, random first phase):

- CYCLON (§5.1, :mod:`node.core.cyclon`): uniform random links; keeps everything connected.
- VICINITY (§5.2): ``vicinity_view`` links to nodes sharing topics, ranked by
  ``score(x, c) = (max over shared topics of x's priority, number of shared topics, random)``;
  each cycle the oldest entry (or a random CYCLON entry when the view is empty) is the partner;
  the partner gets the ``vicinity_gossip`` best candidates for it from the union of all views.
- RINGS (§5.3): for each subscribed topic the ``ring_size/2`` nearest successors and predecessors
  by ring id, recomputed from the union of all views at every tick and after every merge; each
  cycle the oldest ring neighbour q is sent, per common topic, the known subscribers around q's
  id (at most ``ring_gossip``).

Ages grow once per tick of their layer; the partner is the oldest entry and is removed at once
(proactive removal); it comes back only if it replies (VICINITY, RINGS) or by CYCLON's own rule.

Topic priority (§4, choice): ``ring_size - min(ring_size, |succ_t ∪ pred_t|)``: topics still
missing ring neighbours are favoured by VICINITY. Profiles carry the non-zero priorities.

Dissemination (§5.4, RingCast): a node forwards an event once, on its first copy, to at most
``fanout`` nodes: coming from its t-successor it sends to its t-predecessor (and vice versa) plus
``fanout - 1`` random shortcuts; coming from elsewhere (or publishing) it sends to both ring
neighbours plus ``fanout - 2`` shortcuts. Shortcuts are nodes of the ``shortcut_source`` views
whose profile lists the topic, never the sender or the ring targets. Only subscribers are
sent events, so the relay traffic is 0; a copy of a topic the node does not subscribe to is
delivered as "stray" and not forwarded.

Ring ids (choice, not in paper): the first 8 bytes of BLAKE2b(node id), so every node, backend
and the analysis compute the same 64-bit id from a node id without carrying it.

Ring failover (``ring_failover``, spec option, off by default): a failed event send to a ring
neighbour drops it from every ring and sends the copy to the next neighbour on that side.

Ring ages (choice, ``ring_ages``): RINGS picks its partner by age (LRU) among its ring
neighbours. If the union of views (§4: youngest copy wins) also set the ring neighbours' ages,
every CYCLON or VICINITY sighting would make a ring neighbour young again and the LRU choice
would keep missing it; by default ring neighbours keep the RINGS layer's own ages and only take
the fresher profile.

Invariants (``validate``): the layer views hold no self entry and respect their sizes; every
ring slot refers to a node in ``rings_nbr`` subscribed (per its profile) to that topic, ordered
nearest first; the duplicate filter is bounded.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .base import Protocol, register_protocol
from .cyclon import LAYER as CYCLON, Cyclon, CyclonConfig
from .types import (
    Action, Deliver, Descriptor, EventMsg, Gossip, LayerSnapshot, LocalProtocolError, Message,
    NodeId, NodeSnapshot, Published, RemoteProtocolError, Send, SetTimer, Topic,
)

VICINITY, RINGS = "vicinity", "rings"
SPACE = 1 << 64


_TOPIC_BIT: dict[Topic, int] = {}
_MASKS: dict[frozenset[Topic], int] = {}


def topic_mask(topics: frozenset[Topic]) -> int:
    """A profile's topic set as an int bitset, memoized per set (profiles repeat): intersecting
    two subscribers of thousands of topics is then one C-level AND and a popcount instead of
    thousands of hash lookups. Bits are handed out per process on first sight."""
    mask = _MASKS.get(topics)
    if mask is None:
        if len(_MASKS) >= 1_000_000:
            _MASKS.clear()
        mask = _MASKS[topics] = _bits(topics)
    return mask


def _bits(topics: Iterable[Topic]) -> int:
    mask = 0
    for t in topics:
        bit = _TOPIC_BIT.get(t)
        if bit is None:
            bit = _TOPIC_BIT[t] = len(_TOPIC_BIT)
        mask |= 1 << bit
    return mask


def _same(a: object, b: object) -> bool:
    return a is b or a == b


@functools.lru_cache(maxsize=None)
def ring_id(node_id: int) -> int:
    return int.from_bytes(hashlib.blake2b(node_id.to_bytes(8, "big"), digest_size=8).digest(), "big")


@dataclass
class PolderCastConfig:
    cyclon: CyclonConfig = field(default_factory=CyclonConfig)
    """ℓ_cyc = 20, g_cyc = 10 (paper §6)."""
    vicinity_view: int = 20
    """ℓ_vic (paper default 20)."""
    vicinity_gossip: int = 10
    """g_vic (paper default 10)."""
    ring_size: int = 4
    """ℓ_ring: ring entries per topic, half successors and half predecessors (paper: 4)."""
    ring_gossip: int = 10
    """g_ring: profiles per RINGS message (paper default 10)."""
    fanout: int = 2
    """f: forwards per node per event, at most (paper: typically 2; f >= 2)."""
    shortcut_source: Literal["both", "cyclon", "vicinity"] = "both"
    """Where shortcut targets come from (Fig. 8 variants; PolderCast uses both)."""
    use_vicinity: bool = True
    """false: the 'PolderCast without VICINITY' variant of Fig. 5."""
    priority_mode: Literal["max", "sum"] = "max"
    """VICINITY's first ranking key over shared topics: the max or the sum of priorities (choice)."""
    cycle_ms: float = 1000.0
    """Gossip period of the VICINITY and RINGS layers (CYCLON has its own, cyclon.cycle_ms)."""
    timeout_ms: float = 500.0
    """A VICINITY or RINGS reply later than this is dropped (choice: cycle / 2)."""
    seen_capacity: int = 100_000
    """Event ids remembered for duplicate suppression, LRU (choice)."""
    ring_failover: bool = False
    """On a failed event send to the ring successor or predecessor, drop that neighbour and send
    to the next one on that side (spec §2 parameter, not in paper; false = paper-faithful: no
    failure detection on the data path)."""
    ring_ages: Literal["own", "union"] = "own"
    """Ages of RINGS neighbours (choice, not in paper): "own" = the RINGS layer's ages, while
    profiles are refreshed from younger copies in the other views; "union" = the spec's union
    rule literally (the youngest copy's age), which resets ring ages and starves LRU partner
    choice on heavy-tailed workloads (2K social E1: 57% rings incomplete at cycle 59)."""

    __pydantic_config__ = {"extra": "forbid"}

    def __post_init__(self) -> None:
        if self.fanout < 2:
            raise ValueError("fanout must be at least 2 (paper §5.4)")
        if self.ring_size < 2 or self.ring_size % 2:
            raise ValueError("ring_size must be even and at least 2")
        if min(self.vicinity_view, self.vicinity_gossip, self.ring_gossip) < 1:
            raise ValueError("view and gossip sizes must be positive")
        if self.cycle_ms <= 0 or self.timeout_ms <= 0:
            raise ValueError("cycle_ms and timeout_ms must be positive")


class PolderCast(Protocol):
    DISSEMINATION_PARAMS = frozenset({"fanout", "shortcut_source", "ring_failover"})

    def __init__(self, me: Descriptor, config: PolderCastConfig, rng: random.Random) -> None:
        super().__init__(me, config, rng)
        self.rid = ring_id(me.node_id)
        self.cyclon = Cyclon(me, config.cyclon, rng)
        self.vicinity: dict[NodeId, Descriptor] = {}
        self.rings_nbr: dict[NodeId, Descriptor] = {}
        self.succ: dict[Topic, list[NodeId]] = {}
        self.pred: dict[Topic, list[NodeId]] = {}
        self.pending: dict[tuple[str, NodeId], float] = {}
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.published = 0
        self.late_replies = 0
        self._holes: set[Topic] = set(me.topics)  # topics whose slots need a full recompute
        self._prio: dict[Topic, int] = {}  # the non-zero topic priorities
        self._considered: dict[NodeId, frozenset[Topic]] = {}  # newcomers of the last ring update
        self._refresh_priorities()

    # --- lifecycle and timers -----------------------------------------------------------------

    def start(self, now: float, contacts: Sequence[Descriptor]) -> list[Action]:
        self.active = True
        self.cyclon.me = self.me
        self.cyclon.bootstrap(list(contacts))
        period = self.config.cycle_ms / 1000.0
        timers = [SetTimer(CYCLON, self.cyclon.first_tick(now)), SetTimer(RINGS, now + self.rng.uniform(0, period))]
        if self.config.use_vicinity:
            timers.append(SetTimer(VICINITY, now + self.rng.uniform(0, period)))
        return timers

    def subscribe(self, topic: Topic, now: float) -> list[Action]:
        super().subscribe(topic, now)
        self.succ.setdefault(topic, [])
        self.pred.setdefault(topic, [])
        self._holes.add(topic)
        self._refresh_priorities()
        return []

    def unsubscribe(self, topic: Topic, now: float) -> list[Action]:
        super().unsubscribe(topic, now)
        self.succ.pop(topic, None)
        self.pred.pop(topic, None)
        self._rebuild_rings_nbr()
        self._refresh_priorities()
        return []

    def on_timer(self, name: str, now: float) -> list[Action]:
        if not self.active:
            return []
        self.pending = {k: d for k, d in self.pending.items() if d > now}
        if name == CYCLON:
            self.cyclon.me = self.me
            return [*self.cyclon.tick(now), SetTimer(CYCLON, now + self.cyclon.period)]
        period = self.config.cycle_ms / 1000.0
        if name == VICINITY:
            return [*self._vicinity_tick(now), SetTimer(VICINITY, now + period)]
        if name == RINGS:
            return [*self._rings_tick(now), SetTimer(RINGS, now + period)]
        raise LocalProtocolError(f"unknown timer {name!r}")

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        if not self.active:
            return []
        if isinstance(msg, EventMsg):
            return self._on_event(src, msg)
        if msg.layer == CYCLON:
            self.cyclon.me = self.me
            return list(self.cyclon.on_gossip(src, msg, now))
        if msg.layer == VICINITY and self.config.use_vicinity:
            limit = self.config.vicinity_gossip
        elif msg.layer == RINGS:
            limit = self.config.ring_gossip
        else:
            raise RemoteProtocolError(f"gossip for unknown layer {msg.layer!r}")
        if len(msg.entries) > limit:
            raise RemoteProtocolError(f"{msg.layer} message with {len(msg.entries)} entries (limit {limit})")
        if msg.reply:
            deadline = self.pending.pop((msg.layer, src), None)
            if deadline is None or deadline < now:
                self.late_replies += 1
                return []
        fresh = msg.sender.aged(0)
        if msg.layer == VICINITY:
            union = self._youngest(self.cyclon.view, self.vicinity, self.rings_nbr)
            reply = None if msg.reply else self._vicinity_select(fresh, union, exclude={e.node_id for e in msg.entries})
            self._vicinity_merge(union, [*msg.entries, fresh])
        else:
            reply = None if msg.reply else self._rings_select(fresh)
            self._recompute_rings([*msg.entries, fresh])
        if reply is None:
            return []
        return [Send(src, msg.sender.addr, Gossip(msg.layer, self.me.aged(0), tuple(reply), reply=True))]

    # --- views --------------------------------------------------------------------------------

    def _union(self) -> list[Descriptor]:
        """CYCLON ∪ VICINITY ∪ RINGS, one entry per id (the youngest)."""
        return list(self._youngest(self.cyclon.view, self.vicinity, self.rings_nbr).values())

    @staticmethod
    def _youngest(*views: dict[NodeId, Descriptor]) -> dict[NodeId, Descriptor]:
        """The views merged, one entry per id: the youngest copy, the earlier view's on a tie.
        The last view (the largest: RINGS) is copied whole; the others are merged into it."""
        best = dict(views[-1])
        for view in reversed(views[:-1]):
            for nid, d in view.items():
                old = best.get(nid)
                if old is None or d.age <= old.age:
                    best[nid] = d
        return best

    def _rank(self, target: Descriptor, candidates: Iterable[Descriptor], k: int) -> list[Descriptor]:
        """The k candidates best for ``target``: highest priority of a shared topic (max or sum,
        ``priority_mode``), then most shared topics, then a random tie-break.

        Topic sets are compared as bitsets (``topic_mask``). The tie-break is drawn only where it
        decides: candidates are grouped by their first two keys, whole groups are taken best
        first, and the group that does not fit is sampled uniformly (the same distribution as a
        fresh random key per candidate)."""
        tid, by_max = target.node_id, self.config.priority_mode == "max"
        wanted = topic_mask(target.topics)
        prio = dict(target.priorities)
        # max mode: the target's topics by priority as bitsets, highest first; a candidate's first
        # key is the first level it shares a topic with
        levels: dict[int, set[Topic]] = {}
        for t, p in prio.items():
            levels.setdefault(p, set()).add(t)
        ladder = [(p, _bits(ts)) for p, ts in sorted(levels.items(), reverse=True)]
        prioritized = _bits(prio)  # most candidates share none of these: skip the ladder
        groups: dict[tuple[int, int], list[Descriptor]] = {}
        for c in candidates:  # the hottest loop of the simulator: kept flat
            ct = c.topics
            cm = _MASKS.get(ct)
            if cm is None:
                cm = topic_mask(ct)
            n = (wanted & cm).bit_count()
            if not n or c.node_id == tid:
                continue
            first = 0  # priority keys are target topics, so a topic of ct in prio is shared
            if prioritized & cm:
                if by_max:
                    for p, level in ladder:
                        if level & cm:
                            first = p
                            break
                else:
                    first = sum(p for t, p in prio.items() if t in ct) if len(prio) < len(ct) \
                        else sum(prio[t] for t in ct if t in prio)
            key = (first, n)
            group = groups.get(key)
            if group is None:
                groups[key] = [c]
            else:
                group.append(c)
        best: list[Descriptor] = []
        for key in sorted(groups, reverse=True):
            group, room = groups[key], k - len(best)
            if len(group) > room:
                best += self.rng.sample(group, room)
                break
            self.rng.shuffle(group)
            best += group
        return best

    # --- VICINITY (§5.2) ----------------------------------------------------------------------

    def _vicinity_tick(self, now: float) -> list[Send]:
        for nid, d in self.vicinity.items():
            self.vicinity[nid] = d.aged(d.age + 1)
        if self.vicinity:
            oldest = max(d.age for d in self.vicinity.values())
            q = self.vicinity.pop(self.rng.choice([n for n, d in self.vicinity.items() if d.age == oldest]))
        elif self.cyclon.view:
            q = self.rng.choice(list(self.cyclon.view.values()))
        else:
            return []
        candidates = [d for d in self._union() if d.node_id != q.node_id] + [self.me.aged(0)]
        entries = self._rank(q, candidates, self.config.vicinity_gossip)
        self.pending[(VICINITY, q.node_id)] = now + self.config.timeout_ms / 1000.0
        return [Send(q.node_id, q.addr, Gossip(VICINITY, self.me.aged(0), tuple(entries)))]

    def _vicinity_select(self, requester: Descriptor, union: dict[NodeId, Descriptor],
                         exclude: set[NodeId]) -> list[Descriptor]:
        candidates = [d for d in union.values() if d.node_id not in exclude] + [self.me.aged(0)]
        return self._rank(requester, candidates, self.config.vicinity_gossip)

    def _vicinity_merge(self, union: dict[NodeId, Descriptor], received: list[Descriptor]) -> None:
        """VICINITY becomes the best of all views and ``received`` (youngest copy of each)."""
        pool = dict(union)
        for d in received:
            old = pool.get(d.node_id)
            if old is None or d.age < old.age:
                pool[d.node_id] = d
        pool.pop(self.node_id, None)
        best = self._rank(self.me, pool.values(), self.config.vicinity_view)
        self.vicinity = {d.node_id: d for d in best}

    # --- RINGS (§5.3) -------------------------------------------------------------------------

    def _rings_tick(self, now: float) -> list[Send]:
        for nid, d in self.rings_nbr.items():
            self.rings_nbr[nid] = d.aged(d.age + 1)
        self._recompute_rings()
        if self.rings_nbr:
            oldest = max(d.age for d in self.rings_nbr.values())
            q = self._drop_ring_neighbour(self.rng.choice([n for n, d in self.rings_nbr.items() if d.age == oldest]))
        else:
            sharing = [d for d in (self.vicinity or self.cyclon.view).values() if d.topics & self.me.topics]
            if not sharing:
                return []
            q = self.rng.choice(sharing)
        entries = self._rings_select(q)
        self.pending[(RINGS, q.node_id)] = now + self.config.timeout_ms / 1000.0
        return [Send(q.node_id, q.addr, Gossip(RINGS, self.me.aged(0), tuple(entries)))]

    def _rings_select(self, q: Descriptor) -> list[Descriptor]:
        """Per common topic, the known subscribers just below and just above q's ring id."""
        common = self.me.topics & q.topics
        shared = _bits(common)
        known = [d for d in self._union() if d.node_id != q.node_id and topic_mask(d.topics) & shared]
        known.append(self.me.aged(0))
        chosen: dict[NodeId, Descriptor] = {}
        for d in self._nearest(known, ring_id(q.node_id), common):
            chosen[d.node_id] = d
        out = list(chosen.values())
        if len(out) > self.config.ring_gossip:
            out = self.rng.sample(out, self.config.ring_gossip)
        return out

    def _nearest(self, members: list[Descriptor], center: int, topics: frozenset[Topic]) -> list[Descriptor]:
        """For each topic, the ring_size/2 members with the nearest ids above ``center`` and the
        ring_size/2 nearest below (circularly); one sort per direction for all topics."""
        half = self.config.ring_size // 2
        picked: list[Descriptor] = []
        for distance in (lambda d: (ring_id(d.node_id) - center) % SPACE,
                         lambda d: (center - ring_id(d.node_id)) % SPACE):
            room = dict.fromkeys(topics, half)
            unfilled = len(room)
            for d in sorted(members, key=distance):
                hit = False
                for t in d.topics & topics:
                    if room[t]:
                        room[t] -= 1
                        unfilled -= not room[t]
                        hit = True
                if hit:
                    picked.append(d)
                    if not unfilled:
                        break
        return picked

    def _recompute_rings(self, received: Sequence[Descriptor] = ()) -> None:
        """Each topic's ring slots become its ``ring_size/2`` nearest successors and predecessors
        among CYCLON ∪ VICINITY ∪ RINGS ∪ ``received`` (the youngest copy of each profile).

        Incremental, with the result of recomputing every topic from scratch: a topic's slots
        already hold the nearest of every node seen since they were last computed (everything
        not kept was farther), so only newcomers can enter them. Topics with a hole (a removed
        neighbour, a new subscription, a profile that gained or lost the topic) are recomputed
        over the whole pool. This keeps the cost of a merge proportional to the message, not to
        the subscriber's RINGS view, which reaches thousands on social workloads."""
        own, nbr, mine = self.config.ring_ages == "own", self.rings_nbr, self.me.topics
        refreshed: dict[NodeId, Descriptor] = {}
        newcomers: dict[NodeId, Descriptor] = {}
        for d in (*self._youngest(self.cyclon.view, self.vicinity).values(), *received):
            x = d.node_id
            if x == self.node_id:
                continue
            if x in nbr:
                # A fresher copy brings the newer profile; with ring_ages "own" a ring neighbour
                # keeps the age RINGS gave it, so LRU partner choice still cycles through the
                # ring instead of being reset by CYCLON/VICINITY copies.
                cur = refreshed.get(x, nbr[x])
                # (identity first: comparing equal profiles of heavy subscribers is O(topics))
                if d.age < cur.age and (not own or not _same(d.priorities, cur.priorities) or not _same(d.topics, cur.topics)):
                    refreshed[x] = d.aged(cur.age) if own else d
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
                if t not in holes and (self._place(self.succ[t], x, (ring_id(x) - self.rid) % SPACE, 1)
                                       | self._place(self.pred[t], x, (self.rid - ring_id(x)) % SPACE, -1)):
                    changed.add(t)
        if changed:
            self.rings_nbr = {n: nbr[n] if n in nbr else newcomers[n]
                              for slots in (*self.succ.values(), *self.pred.values()) for n in slots}
        self._refresh_priorities(holes | changed)

    def _drop_ring_neighbour(self, node: NodeId) -> Descriptor:
        """Remove ``node`` from RINGS and from every ring slot; its rings get refilled at the next
        update. Returns its descriptor."""
        gone = self.rings_nbr.pop(node)
        for t in gone.topics & self.me.topics:  # its slots are all in topics of its profile
            for slots in (self.succ[t], self.pred[t]):
                if node in slots:
                    slots.remove(node)
                    self._holes.add(t)
        return gone

    def _place(self, slots: list[NodeId], x: NodeId, distance: int, sign: int) -> bool:
        """Put x into a nearest-first side of a ring if it is nearer than the farthest; True if
        the side changed."""
        half = self.config.ring_size // 2
        if x in slots:
            return False
        at = len(slots)
        while at and (sign * (ring_id(slots[at - 1]) - self.rid)) % SPACE > distance:
            at -= 1
        if at >= half:
            return False
        slots.insert(at, x)
        del slots[half:]
        return True

    def _fill_holes(self, holes: set[Topic], newcomers: dict[NodeId, Descriptor]) -> None:
        """Recompute the slots of ``holes`` over the whole pool."""
        half, me = self.config.ring_size // 2, self.rid
        members = [d for d in (*self.rings_nbr.values(), *newcomers.values()) if not d.topics.isdisjoint(holes)]
        for slots, distance in ((self.succ, lambda d: (ring_id(d.node_id) - me) % SPACE),
                                (self.pred, lambda d: (me - ring_id(d.node_id)) % SPACE)):
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

    def _rebuild_rings_nbr(self) -> None:
        self.rings_nbr = {n: self.rings_nbr[n] for slots in (*self.succ.values(), *self.pred.values()) for n in slots}

    def _topic_priority(self, t: Topic) -> int:
        size = self.config.ring_size
        succ, pred = self.succ.get(t, ()), self.pred.get(t, ())
        if len(succ) + len(pred) >= size and set(succ).isdisjoint(pred):
            return 0  # both sides full with distinct neighbours: no need
        return size - min(size, len(set(succ) | set(pred)))

    def _refresh_priorities(self, topics: Iterable[Topic] | None = None) -> None:
        """Update the priorities of ``topics`` (all when None) and the profile that carries them."""
        changed = topics is None
        if changed:
            self._prio, topics = {}, self.me.topics
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
            self.me = Descriptor(self.me.node_id, self.me.addr, self.me.topics, 0, tuple(self._prio.items()))

    # --- dissemination (§5.4) -----------------------------------------------------------------

    def publish(self, topic: Topic, payload: bytes, now: float) -> list[Action]:
        if not self.active:
            raise LocalProtocolError("publish on a node that has left")
        if topic not in self.me.topics:
            raise LocalProtocolError(f"node {self.node_id} publishes on {topic!r} without subscribing (paper §2)")
        self.published += 1
        event = EventMsg(f"{self.node_id}-{self.published}", topic, payload, self.node_id, 0)
        self._remember(event.event_id)
        return [Published(event), *self._forward(event, None)]

    def _on_event(self, src: NodeId, msg: EventMsg) -> list[Action]:
        first = msg.event_id not in self.seen
        subscribed = msg.topic in self.me.topics
        actions: list[Action] = [Deliver(msg, src, first, subscribed)]
        if first:
            self._remember(msg.event_id)
            if subscribed:
                actions += self._forward(msg, src)
        return actions

    def _forward(self, e: EventMsg, sender: NodeId | None) -> list[Action]:
        t, f = e.topic, self.config.fanout
        succ = next(iter(self.succ.get(t, ())), None)
        pred = next(iter(self.pred.get(t, ())), None)
        if sender is not None and sender == succ:
            targets, k = [pred], f - 1
        elif sender is not None and sender == pred:
            targets, k = [succ], f - 1
        else:
            targets, k = [succ, pred], f - 2
        targets = list(dict.fromkeys(n for n in targets if n is not None))
        source = self.config.shortcut_source
        views = ([self.cyclon.view] if source in ("both", "cyclon") else []) + \
                ([self.vicinity] if source in ("both", "vicinity") else [])
        excluded = {self.node_id, sender, *targets}
        pool = sorted({d.node_id: d for v in views for d in v.values()
                       if t in d.topics and d.node_id not in excluded}.values(), key=lambda d: d.node_id)
        shortcuts = self.rng.sample(pool, min(k, len(pool))) if k > 0 else []
        out = EventMsg(e.event_id, e.topic, e.payload, e.publisher, e.hops + 1)
        sends = [Send(n, self._addr(n), out) for n in targets]
        return sends + [Send(d.node_id, d.addr, out) for d in shortcuts]

    def on_send_failed(self, dst: NodeId, msg: Message, now: float) -> list[Action]:
        if not (self.config.ring_failover and self.active and isinstance(msg, EventMsg)):
            return []
        t = msg.topic
        sides = [s for s in (self.succ.get(t), self.pred.get(t)) if s and s[0] == dst]
        if not sides:
            return []  # a shortcut, or a neighbour already replaced
        self._drop_ring_neighbour(dst)
        nexts = dict.fromkeys(side[0] for side in sides if side)
        return [Send(n, self._addr(n), msg) for n in nexts]

    def _addr(self, node: NodeId) -> str:
        d = self.rings_nbr.get(node) or self.vicinity.get(node) or self.cyclon.view.get(node)
        if d is None:
            raise LocalProtocolError(f"ring neighbour {node} has no descriptor")
        return d.addr

    def _remember(self, event_id: str) -> None:
        self.seen[event_id] = None
        if len(self.seen) > self.config.seen_capacity:
            self.seen.popitem(last=False)

    # --- introspection ------------------------------------------------------------------------

    def snapshot(self) -> NodeSnapshot:
        return NodeSnapshot(self.node_id, sorted(self.me.topics), [
            LayerSnapshot(CYCLON, list(self.cyclon.view)),
            LayerSnapshot(VICINITY, list(self.vicinity)),
            LayerSnapshot(RINGS, list(self.rings_nbr)),
            LayerSnapshot("rings.succ", [], {t: list(v) for t, v in self.succ.items() if v}),
            LayerSnapshot("rings.pred", [], {t: list(v) for t, v in self.pred.items() if v}),
        ])

    def validate(self) -> None:
        self.cyclon.validate()
        if self.node_id in self.vicinity or self.node_id in self.rings_nbr:
            raise LocalProtocolError(f"node {self.node_id} has itself in a view")
        if len(self.vicinity) > self.config.vicinity_view:
            raise LocalProtocolError("VICINITY view over its size")
        half = self.config.ring_size // 2
        for t in self.me.topics:
            for slots, dist in ((self.succ.get(t, []), lambda n: (ring_id(n) - self.rid) % SPACE),
                                (self.pred.get(t, []), lambda n: (self.rid - ring_id(n)) % SPACE)):
                if len(slots) > half or [dist(n) for n in slots] != sorted(dist(n) for n in slots):
                    raise LocalProtocolError(f"ring slots of {t!r} too many or out of order")
                for n in slots:
                    if n not in self.rings_nbr or t not in self.rings_nbr[n].topics:
                        raise LocalProtocolError(f"ring slot {n} of {t!r} without a matching profile")
        if len(self.seen) > self.config.seen_capacity:
            raise LocalProtocolError("duplicate filter over capacity")


register_protocol("poldercast", PolderCast, PolderCastConfig)
