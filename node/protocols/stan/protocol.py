"""StaN: per-topic gossip overlays whose links are aligned so that they share physical links
(Matos, Felber, Oliveira, Pereira, Rivière, IEEE TPDS; spec ../shared/design/protocols/stan.md).

Theory of operation

Each topic t the node subscribes to has its own directed overlay: ``views[t]``, a list of
subscribers of t. The initial views are uniform samples of the topic's subscribers, sized so that
the overlay is connected with probability 0.99 (``nodes.contacts: per_topic``: each contact's
descriptor lists the topics it was drawn for; the view sizes never change afterwards: LVS is
constant). Every node ranks every other node q by a private weight WEIGHT_p(q) =
SHA-1(str(p) + "|" + str(q)), the same for every topic (Alg. 1). Each round, for each topic, it
sends a collect walk to a random member of ``views[t]``; each node the walk visits adds itself and
its own ``views[t]`` to the collected set and passes the walk on to a random member of its view
(``ttl`` more hops, decrementing the received ttl), the last one sends the set straight back to
the origin, which keeps the k lowest-weight candidates among the collected set and its current
view, itself excluded (Alg. 2, with the spec's two fixes). Because the weight ignores the topic,
a node drifts towards the same low-weight peers in every topic they share: logical links
(Σ_t |views[t]|, LVS) stay, distinct out-neighbours (PVS) fall.

Dissemination (not in the paper, spec §5): a node publishes on a topic it subscribes to; a
subscriber forwards its first copy to every member of ``views[topic]`` but the sender (``mode:
flood``) or to ``fanout`` random ones (``gossip``); later copies are duplicates. A copy that
reaches a non-subscriber (impossible in static runs) is delivered as a stray and not forwarded.
Walks and replies carry bare node ids and addresses: a node never tells its subscriptions to a
non-subscriber (pitfall 16).

Choices not in the paper, as named parameters: ``round_ms`` (1 s, compressed; the paper's
deployment used 30 s), ``ttl`` (5), ``rounds`` (8 optimisation rounds, then the views stay;
0 = no limit), ``optimise`` (false: the per-topic random overlays without StaN, the paper's
baseline), ``lockstep`` (every round starts at (k + 1/2) round periods on the driver's clock, the
first at least 1.5 periods after the node starts, so nodes that share a clock run rounds
together, as the paper's lock-step simulator does, and snapshots at whole periods fall between
rounds; without it, the first round at a random phase one to two periods after the start, so a
snapshot one period in sees the bootstrap views and every peer has joined before walks reach
it), ``walk_timeout_ms`` (a reply later than this is dropped and counted), ``snoop`` (off:
§4.7's snooping of walks: a node visited by a walk of t takes its origin into ``views[t]`` when
the origin weighs less than its heaviest member), ``mode``/``fanout``, ``seen_capacity``. The
walk's origin travels as the first entry of the walk (it needs an address to reply to);
``values`` carry (walk id, ttl) and, in a reply, the ids of nodes that turned out not to
subscribe.

Churn mode (spec §4.6, ``omp: cyclon``; the paper's runs are static): a CYCLON per topic among
its subscribers (the kit's, its shuffles carried as ``shuffle``/``shuffled`` signals of this
layer with bare entries) whose cache joins every reply's candidates; a neighbour a send to
fails is suspected for ``suspect_rounds``, dropped from every view and cache, and replaced at
once by the lightest live candidate (the latest collected ids, the cache). Without it a joiner
is never found: no walk collects a node that no one has in a view (pitfall 7).

Invariants (``validate``): no self entry, no duplicate, every view at its initial size (at most
that in churn mode), the CYCLON invariants.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from node.kit.registry import ProtocolSpec, register_protocol
from node.kit.stack import Dissemination, Layer, Stack
from node.kit.types import (
    Action,
    Descriptor,
    EventMsg,
    Gossip,
    LayerSnapshot,
    LocalProtocolError,
    Message,
    NodeId,
    RemoteProtocolError,
    Send,
    Signal,
    Topic,
)
from node.protocols.cyclon.layer import Cyclon, CyclonConfig

LAYER = "stan"
WALK, COLLECTED, SHUFFLE, SHUFFLED = "walk", "collected", "shuffle", "shuffled"
CANDIDATES = 64
"""Latest collected ids kept per topic for refilling a view after a failure (spec §3)."""
MAX_TTL = 10
"""A walk carries at most (ttl + 1)(1 + view size) ids; the codec refuses messages of more than
256 entries, so ttl is bounded."""


@dataclass
class StanConfig:
    round_ms: float = 1000.0
    """ROUND_PERIOD: time between a node's walk rounds (choice; the paper's deployment: 30 s)."""
    ttl: int = 5
    """Hops a collect walk makes after the first (choice; the paper: 'on the order of the diameter')."""
    rounds: int = 8
    """Optimisation rounds, then the views stay as they are (the paper runs 8; 0 = no limit)."""
    optimise: bool = True
    """false: no walks, the per-topic random overlays as bootstrapped (the paper's 'without StaN')."""
    lockstep: bool = True
    """Rounds at (k + 1/2) round periods on the driver's clock, the first at least 1.5 periods
    after the start (choice: the paper's lock-step rounds); false: at a random phase, the first
    one to two periods after the start."""
    walk_timeout_ms: float = 1000.0
    """A walk's reply later than this is dropped and counted (choice)."""
    snoop: bool = False
    """§4.7: a node a walk visits considers the walk's origin for its own view (off in the paper)."""
    omp: Literal["static", "cyclon"] = "static"
    """static: the bootstrap views only (the paper's static runs); cyclon: the churn mode of spec
    §4.6, a CYCLON per topic among its subscribers (cache = view size, shuffle half of it, one
    shuffle per round, for ever) whose cache joins every reply's candidates and refills views."""
    suspect_rounds: int = 10
    """A neighbour a send to failed is dropped from every view and cache and kept out of the
    candidates for this many rounds (churn mode, spec §4.6 rule 3)."""
    mode: Literal["flood", "gossip"] = "flood"
    """flood: forward to the whole view of the event's topic; gossip: to ``fanout`` random members."""
    fanout: int = 3
    """Members forwarded to in gossip mode."""
    seen_capacity: int = 100_000
    """Event ids remembered for duplicate suppression, LRU (choice)."""

    __pydantic_config__ = {"extra": "forbid"}

    def __post_init__(self) -> None:
        if self.round_ms <= 0 or self.walk_timeout_ms <= 0:
            raise ValueError("round_ms and walk_timeout_ms must be positive")
        if not 0 <= self.ttl <= MAX_TTL:
            raise ValueError(f"ttl must be in [0, {MAX_TTL}]")
        if self.rounds < 0 or self.fanout < 1 or self.seen_capacity < 1 or self.suspect_rounds < 0:
            raise ValueError("need rounds >= 0, fanout >= 1, seen_capacity >= 1, suspect_rounds >= 0")


def weight(p: NodeId, q: NodeId) -> int:
    """WEIGHT_p(q) (Alg. 1): SHA-1 of "p|q" as a 160-bit integer; lower is preferred."""
    return int.from_bytes(hashlib.sha1(f"{p}|{q}".encode()).digest(), "big")


class StanLinks(Layer):
    """One view per subscribed topic, optimised by collect walks. ``view`` is their union (the
    node's distinct out-neighbours: its physical links)."""

    name = LAYER

    def __init__(self, config: StanConfig) -> None:
        super().__init__()
        self.config = config
        self.views: dict[Topic, dict[NodeId, Descriptor]] = {}
        """Per topic, the members in ascending weight."""
        self.size: dict[Topic, int] = {}
        """Per topic, the view size from the bootstrap (the paper's k = |views[t]|)."""
        self.rounds_done = 0
        self.walks = 0
        self.pending: dict[int, tuple[Topic, float]] = {}
        """Walk id -> (topic, deadline) of the walks awaiting their reply."""
        self.late = 0
        """Replies that came after their deadline or that nobody awaited."""
        self.omp: dict[Topic, Cyclon] = {}
        """Churn mode: the per-topic CYCLON instances (not layers of the stack: this layer ticks them)."""
        self.candidates: dict[Topic, dict[NodeId, Descriptor]] = {}
        self.suspected: dict[NodeId, float] = {}
        """Node -> until when it is left out of the candidates."""
        self._weights: dict[NodeId, int] = {}

    @property
    def period(self) -> float:
        return self.config.round_ms / 1000.0

    @property
    def late_replies(self) -> int:
        return self.late

    def first_tick(self, now: float, rng: random.Random) -> float:
        if not self.config.lockstep:
            return super().first_tick(now, rng) + self.period
        return (math.floor(now / self.period) + 2.5) * self.period

    def weight(self, q: NodeId) -> int:
        w = self._weights.get(q)
        if w is None:
            if len(self._weights) >= 65_536:  # a bounded memo
                self._weights.clear()
            w = self._weights[q] = weight(self.stack.node_id, q)
        return w

    def public(self) -> Descriptor:
        """This node as walks name it: id and address, no subscriptions."""
        me = self.stack.me
        return Descriptor(me.node_id, me.addr)

    def bootstrap(self, contacts: Sequence[Descriptor]) -> None:
        me, mine = self.stack.node_id, self.stack.topics
        drawn: dict[Topic, list[Descriptor]] = {t: [] for t in sorted(mine)}
        for c in contacts:
            if c.node_id != me:
                for t in c.topics & mine:
                    drawn[t].append(Descriptor(c.node_id, c.addr))
        for t, members in drawn.items():
            self._set_view(t, members, len(members))
            self.size[t] = k = len(self.views[t])
            if self.config.omp == "cyclon" and k:
                cyc = self.omp[t] = Cyclon(CyclonConfig(view_size=k, shuffle_length=math.ceil(k / 2),
                                                        cycle_ms=self.config.round_ms, timeout_ms=self.config.walk_timeout_ms))
                cyc.max_entries = CANDIDATES  # peers size caches from their own n_t: take a larger peer's shuffle
                cyc.bind(self.stack)
                cyc.bootstrap(members)

    def _set_view(self, topic: Topic, candidates: Sequence[Descriptor], k: int) -> None:
        ranked = sorted({d.node_id: d for d in candidates}.values(), key=lambda d: (self.weight(d.node_id), d.node_id))
        self.views[topic] = {d.node_id: d for d in ranked[:k]}
        self.view = {d.node_id: d for v in self.views.values() for d in v.values()}

    def subscribed(self, topics: list[Topic]) -> None:
        for t in topics:
            self.views.setdefault(t, {})
            self.size.setdefault(t, 0)

    def unsubscribed(self, topic: Topic) -> None:
        self.views.pop(topic, None)
        self.size.pop(topic, None)
        self.omp.pop(topic, None)
        self.candidates.pop(topic, None)
        self.view = {d.node_id: d for v in self.views.values() for d in v.values()}

    # --- rounds -------------------------------------------------------------------------------

    def tick(self, now: float) -> list[Action]:
        for walk_id, (_, deadline) in list(self.pending.items()):
            if deadline <= now:  # its reply, if it comes, is counted late
                del self.pending[walk_id]
        for node in [n for n, until in self.suspected.items() if until <= now]:
            del self.suspected[node]
        sends: list[Action] = [self._as_signal(t, a) for t, cyc in self.omp.items() for a in cyc.tick(now)]
        config = self.config
        if not config.optimise or (config.rounds and self.rounds_done >= config.rounds):
            return sends
        self.rounds_done += 1
        rng, me = self.stack.rng, self.public()
        for t, view in self.views.items():
            if not view:
                continue
            q = rng.choice(list(view.values()))
            self.walks += 1
            self.pending[self.walks] = (t, now + config.walk_timeout_ms / 1000.0)
            sends.append(Send(q.node_id, q.addr, Signal(LAYER, WALK, me, (me,), (t,), (self.walks, config.ttl))))
        return sends

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        if not isinstance(msg, Signal) or len(msg.topics) != 1:
            raise RemoteProtocolError("stan takes signals of one topic")
        if msg.kind == WALK:
            return self._on_walk(msg)
        if msg.kind == COLLECTED:
            if not msg.values:
                raise RemoteProtocolError("a walk's reply carries its walk id")
            self._on_collected(msg, now)
            return []
        if msg.kind in (SHUFFLE, SHUFFLED):
            return self._on_shuffle(src, msg, now)
        raise RemoteProtocolError(f"stan message of unknown kind {msg.kind!r}")

    def _on_walk(self, msg: Signal) -> list[Action]:
        if len(msg.values) != 2 or not msg.entries or not 0 <= msg.values[1] <= MAX_TTL:
            raise RemoteProtocolError("a walk carries (walk id, ttl) and its origin first")
        origin, collected = msg.entries[0], {d.node_id: d for d in msg.entries[1:]}
        (t,), (walk_id, ttl) = msg.topics, msg.values
        view = self.views.get(t)
        me = self.public()
        if view is None:  # not (or no longer) a subscriber: answer at once, naming ourselves
            reply = Signal(LAYER, COLLECTED, me, tuple(collected.values()), (t,), (walk_id, me.node_id))
            return [Send(origin.node_id, origin.addr, reply)]
        collected[me.node_id] = me
        collected.update(view)
        if self.config.snoop and origin.node_id != me.node_id:
            self._snoop(t, origin)
        if ttl > 0 and view:
            q = self.stack.rng.choice(list(view.values()))
            walk = Signal(LAYER, WALK, me, (origin, *collected.values()), (t,), (walk_id, ttl - 1))
            return [Send(q.node_id, q.addr, walk)]
        reply = Signal(LAYER, COLLECTED, me, tuple(collected.values()), (t,), (walk_id,))
        return [Send(origin.node_id, origin.addr, reply)]

    def _snoop(self, topic: Topic, origin: Descriptor) -> None:
        view = self.views[topic]
        if origin.node_id in view:
            return
        k = self.size[topic]
        if len(view) < k or self.weight(origin.node_id) < self.weight(list(view)[-1]):
            self._set_view(topic, [*view.values(), origin], k)

    def _on_collected(self, msg: Signal, now: float) -> None:
        pending = self.pending.pop(msg.values[0], None)
        (t,) = msg.topics
        if pending is None or pending[1] < now or pending[0] != t:
            self.late += 1
            return
        view = self.views.get(t)
        if view is None:
            return
        me, absent = self.stack.node_id, set(msg.values[1:])
        collected = [d for d in msg.entries if d.node_id != me and d.node_id not in absent]
        if self.config.omp == "cyclon":
            cache = self.candidates.setdefault(t, {})
            cache.update((d.node_id, d) for d in collected)
            while len(cache) > CANDIDATES:
                del cache[next(iter(cache))]
        self._refill(t, [d for d in (*collected, *view.values(), *self._sampled(t)) if d.node_id not in absent])

    def _sampled(self, topic: Topic) -> list[Descriptor]:
        """Churn mode: the topic's CYCLON cache, bare (spec §4.6 rule 1)."""
        cyc = self.omp.get(topic)
        return [Descriptor(d.node_id, d.addr) for d in cyc.view.values()] if cyc else []

    def _refill(self, topic: Topic, candidates: Sequence[Descriptor]) -> None:
        """``views[topic]``: the ``size[topic]`` lightest of ``candidates`` not suspected."""
        self._set_view(topic, [d for d in candidates if d.node_id not in self.suspected], self.size[topic])

    def _on_shuffle(self, src: NodeId, msg: Signal, now: float) -> list[Action]:
        (t,) = msg.topics
        cyc = self.omp.get(t)
        if cyc is None:  # not in churn mode, or not subscribed to t: no reply, the shuffle times out
            return []
        gossip = Gossip(cyc.name, msg.sender, msg.entries, reply=msg.kind == SHUFFLED)
        return [self._as_signal(t, a) for a in cyc.on_message(src, gossip, now)]

    def _as_signal(self, topic: Topic, action: Action) -> Action:
        """A per-topic CYCLON's request or reply as a signal of this layer, every entry bare (a
        CYCLON entry of our own would carry our subscriptions)."""
        if not isinstance(action, Send) or not isinstance(action.msg, Gossip):
            return action
        g = action.msg
        entries = tuple(Descriptor(d.node_id, d.addr, frozenset(), d.age) for d in g.entries)
        return Send(action.dst, action.addr, Signal(LAYER, SHUFFLED if g.reply else SHUFFLE, self.public(), entries, (topic,)))

    def on_send_failed(self, dst: NodeId, msg: Message, now: float) -> list[Action]:
        self.failed(dst, now)
        return []

    def failed(self, node: NodeId, now: float) -> None:
        """A send to ``node`` failed: in churn mode, suspect it, drop it everywhere, refill the
        views it left from the candidates and the CYCLON caches (spec §4.6 rule 3)."""
        if self.config.omp != "cyclon":
            return
        self.suspected[node] = now + self.config.suspect_rounds * self.period
        for cyc in self.omp.values():
            cyc.view.pop(node, None)
        for t, view in self.views.items():
            self.candidates.get(t, {}).pop(node, None)
            if node in view:
                self._refill(t, [*view.values(), *self.candidates.get(t, {}).values(), *self._sampled(t)])

    # --- introspection ------------------------------------------------------------------------

    def snapshot(self) -> list[LayerSnapshot]:
        return [LayerSnapshot(self.name, sorted(self.view), {t: list(v) for t, v in sorted(self.views.items())})]

    def validate(self) -> None:
        super().validate()
        for t, view in self.views.items():
            short = len(view) != self.size[t] if self.config.omp == "static" else len(view) > self.size[t]
            if self.stack.node_id in view or short:
                raise LocalProtocolError(f"stan view of {t} has {len(view)} members (bootstrapped with {self.size[t]})")
        for cyc in self.omp.values():
            cyc.validate()


class TopicViewFlood(Dissemination):
    """Forward a first copy over the event topic's view (all of it, or ``fanout`` random members)."""

    name = "topic_view_flood"
    params = frozenset({"mode", "fanout"})

    def __init__(self, links: StanLinks) -> None:
        self.links = links

    def check_publish(self, topic: Topic) -> None:
        if topic not in self.stack.topics:
            raise LocalProtocolError(f"StaN publishers subscribe to the topic they publish on ({topic!r})")

    def relays(self, event: EventMsg) -> bool:
        return event.topic in self.stack.topics  # a stray copy is delivered, not forwarded

    def on_send_failed(self, dst: NodeId, event: EventMsg, now: float) -> list[Action]:
        self.links.failed(dst, now)
        return []

    def targets(self, event: EventMsg, sender: NodeId | None) -> list[Descriptor]:
        out = [d for d in self.links.views.get(event.topic, {}).values() if d.node_id != sender]
        config = self.links.config
        if config.mode == "gossip" and len(out) > config.fanout:
            out = self.stack.rng.sample(out, config.fanout)
        return out


def build(me: Descriptor, config: StanConfig, rng: random.Random, shared: dict[str, Any]) -> Stack:
    links = StanLinks(config)
    return Stack(me, config, rng, [links], TopicViewFlood(links), seen_capacity=config.seen_capacity)


register_protocol(ProtocolSpec(
    "stan", StanConfig, build,
    cycle_s=lambda c: c.round_ms / 1000.0,
    reply_timeout_s=lambda c: c.walk_timeout_ms / 1000.0,
    dissemination_params=TopicViewFlood.params,
    channels_follow_links=True,
))
