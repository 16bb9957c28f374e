"""SpiderCast: one undirected overlay in which every node K-covers each of its topics (Chockler,
Melamed, Tock, Vitenberg, DEBS 2007; spec ../shared/design/protocols/spidercast.md), and the
paper's comparison overlays built by the same code.

Theory of operation

A node knows other nodes and their interests from its membership (``nodes.contacts: all``: every
node with its subscriptions, the paper's full membership; ``random`` with ``bootstrap_contacts``
= p% of the nodes: its static partial view). Two independent tasks keep links, each with its own
neighbour set, target ``L`` and quarantine: greedy coverage (``kg``) links to the known node that
shares the most of the node's still under-covered topics, random coverage (``kr``) to a random
known node that shares at least one (Fig. 5, with the spec's fix: coverage is counted over the
current neighbours). Each loop iteration (every ``loop_ms``) a task with an under-covered topic
and fewer than ``Lmax = K · |interest|`` links sends one ``connect`` (to a node it was redirected
to first, FIFO); a covered task, or one above ``Lmax``, asks one neighbour that advertises more
links than its target, the one whose loss hurts coverage least, to ``disconnect`` (Fig. 2). A
node accepts a connect below ``Lmax + margin`` links, otherwise redirects the requester to the
neighbour with room that shares most of its interest; it accepts a disconnect if above its
target or still covered without the requester (Fig. 4). Degree and target travel on every
control message and on heartbeats (the ``heartbeat`` layer, every ``heartbeat_ms``); a neighbour
silent for ``suspect_ms``, or one a send to fails, is dropped (a failed send also takes the node
out of the membership until it speaks again). ``adaptive_k`` is §3.3.1's scheme (Kr from 0 up to
``kr_max`` for nodes that greedy coverage leaves at degree Kg).

The degree the paper reports is the number of distinct neighbours over both tasks: ``view``.

Dissemination (not in the paper, spec §5): relay-free flooding: a publisher (subscribed to the
topic) and every subscriber at its first copy send the event to each neighbour, of either task,
whose interest holds the topic, but the sender; a copy at a node without the topic (a stale
interest) is delivered as a stray and not forwarded.

The comparison overlays (spec §4.12; registered as their own protocols, same config):
``similarity``: a task linking to the known nodes sharing the most topics (``x`` links) and a
task linking to uniformly random nodes (``y`` links), each "covered" once it has its count;
``random_overlay``: ``x`` + ``y`` uniformly random links; ``ring_per_topic``: per topic, links
to the next and the previous subscriber by id around a ring, from the full membership, kept
static (no messages; duplicate links merged). The double-degree overlay is ``similarity`` with
``x: 20``.

Choices not in the paper, as named parameters: ``loop_ms`` (CONNECT_TIMEOUT, 100 ms; a removed
link is handled at the next iteration, not at once), ``quarantine_ms`` (a node sent a connect or
a disconnect, or that refused one, is not chosen again for this long), ``heartbeat_ms`` /
``suspect_ms``, ``margin`` (the paper: "e.g. 5"), ``redirect_rule`` (code: a neighbour with
degree < target + margin may be suggested; prose: degree < target), ``exclude_all_neighbors``
(selection also skips the other task's neighbours), ``kr_max``, ``seen_capacity``. The initial
target is Lmax; a refused disconnect is answered ``disconnect_reject`` (the paper: silence); a
connect or connect-ok from a current neighbour only refreshes its record; ties are broken
uniformly at random by the node's random source.

Membership as the nodes learn it: the contacts a node joins with (for ``all``, the same list for
every node is indexed once per process: ``shared``), the nodes whose connects and redirects name
them, less the nodes a send to failed. A later join's contacts are the live nodes.

Invariants (``validate``): no self link, ``|neighbors_k| ≤ Lmax_k + margin`` per task.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from node.kit.registry import ProtocolSpec, register_protocol
from node.kit.stack import Dissemination, Layer, Stack
from node.kit.types import Action, Descriptor, EventMsg, LayerSnapshot, LocalProtocolError, Message, NodeId, RemoteProtocolError, Send, Signal, Topic

LAYER, HEARTBEAT = "spidercast", "heartbeat"
CONNECT, CONNECT_OK, REDIRECT = "connect", "connect_ok", "redirect"
DISCONNECT, DISCONNECT_OK, DISCONNECT_REJECT, LEAVE = "disconnect", "disconnect_ok", "disconnect_reject", "leave"
BEAT = "beat"
GREEDY, RANDOM_COVERAGE, SIMILAR, RANDOM_NODE = 0, 1, 2, 3
"""Task kinds (on the wire as a control message's first value)."""
DIRECTORIES = "spidercast.directories"
"""``shared`` key: the membership indexes of the contact lists a process has seen."""


@dataclass
class SpiderCastConfig:
    kg: int = 3
    """Greedy coverage K (the paper: 3)."""
    kr: int = 0
    """Random coverage K (the paper: 0; 1 for Zipf α = 2)."""
    margin: int = 5
    """Links accepted above Lmax (the paper: 'a small constant, e.g. 5')."""
    adaptive_k: bool = False
    """§3.3.1: start at (kg, 0); a node left at degree kg by greedy coverage raises Kr up to kr_max."""
    kr_max: int = 3
    """Largest Kr adaptive_k reaches (the prose's check allows 4: spec §9.6)."""
    x: int = 10
    """similarity: links to the most similar nodes; random_overlay: random links (with y)."""
    y: int = 0
    """similarity: random links beside the x similar ones; random_overlay: more random links."""
    loop_ms: float = 100.0
    """CONNECT_TIMEOUT: time between maintenance iterations (choice; not in the paper)."""
    quarantine_ms: float = 1000.0
    """A node sent a (dis)connect, or that refused one, is not chosen again for this long (choice)."""
    heartbeat_ms: float = 1000.0
    """Heartbeats to every neighbour, with each task's degree and target (choice)."""
    suspect_ms: float = 3000.0
    """A neighbour silent this long is dropped (choice)."""
    redirect_rule: Literal["code", "prose"] = "code"
    """A neighbour a redirect may name: degree < target + margin (code) or degree < target (prose)."""
    exclude_all_neighbors: bool = False
    """Selection also skips the other task's neighbours (choice; the paper: same task only)."""
    seen_capacity: int = 100_000
    """Event ids remembered for duplicate suppression, LRU (choice)."""

    __pydantic_config__ = {"extra": "forbid"}

    def __post_init__(self) -> None:
        if min(self.kg, self.kr, self.margin, self.x, self.y, self.kr_max) < 0:
            raise ValueError("kg, kr, margin, x, y and kr_max must be >= 0")
        if min(self.loop_ms, self.quarantine_ms, self.heartbeat_ms, self.suspect_ms) <= 0:
            raise ValueError("loop_ms, quarantine_ms, heartbeat_ms and suspect_ms must be positive")
        if self.seen_capacity < 1:
            raise ValueError("seen_capacity must be >= 1")


# --- membership --------------------------------------------------------------------------------

class Directory:
    """The nodes of a contact list and their interests as bit masks, for vectorised selection."""

    def __init__(self, contacts: Sequence[Descriptor]) -> None:
        rows = sorted({d.node_id: d for d in contacts}.values(), key=lambda d: d.node_id)
        self.descriptors = rows
        self.ids = np.array([d.node_id for d in rows], dtype=np.int64)
        self.row = {d.node_id: i for i, d in enumerate(rows)}
        self.bit = {t: i for i, t in enumerate(sorted({t for d in rows for t in d.topics}))}
        self.words = max(1, math.ceil(len(self.bit) / 64))
        self.masks = np.zeros((len(rows), self.words), dtype=np.uint64)
        self.members: dict[Topic, list[NodeId]] = {}
        """Per topic, its members' ids in ascending order."""
        for i, d in enumerate(rows):
            self.masks[i] = self.mask(d.topics)
            for t in d.topics:
                self.members.setdefault(t, []).append(d.node_id)

    def mask(self, topics: frozenset[Topic] | set[Topic]) -> npt.NDArray[np.uint64]:
        out = np.zeros(self.words, dtype=np.uint64)
        for t in topics:
            b = self.bit.get(t)
            if b is not None:
                out[b >> 6] |= np.uint64(1 << (b & 63))
        return out

    def overlaps(self, topics: frozenset[Topic] | set[Topic]) -> npt.NDArray[np.int64]:
        """Per row, how many of ``topics`` the node has."""
        counts: npt.NDArray[np.int64] = np.bitwise_count(self.masks & self.mask(topics)).sum(axis=1, dtype=np.int64)
        return counts


def directory(contacts: Sequence[Descriptor], shared: dict[str, Any]) -> Directory:
    """The index of ``contacts``, built once per list object in a process (every node of a
    full-membership run joins with the same list); the last few are kept."""
    memo: dict[int, tuple[Sequence[Descriptor], Directory]] = shared.setdefault(DIRECTORIES, {})
    hit = memo.get(id(contacts))
    if hit is not None and hit[0] is contacts:
        return hit[1]
    made = Directory(contacts)
    if len(memo) >= 4:
        del memo[next(iter(memo))]
    memo[id(contacts)] = (contacts, made)
    return made


# --- tasks -------------------------------------------------------------------------------------

@dataclass(slots=True)
class Neighbor:
    desc: Descriptor
    degree: int
    target: int
    heard: float


@dataclass
class Task:
    """One link-keeping task: its K, how it selects, its neighbours, target and quarantine."""

    kind: int
    k: int
    select: Literal["greedy", "coverage", "similar", "random"]
    neighbors: dict[NodeId, Neighbor] = field(default_factory=dict)
    target: int = 0
    redirects: list[Descriptor] = field(default_factory=list)
    quarantine: dict[NodeId, float] = field(default_factory=dict)
    covered_once: bool = False

    @property
    def counted(self) -> bool:
        """Baseline tasks: 'covered' once they have k links (spec §4.12)."""
        return self.select in ("similar", "random")

    def lmax(self, topics: frozenset[Topic]) -> int:
        return self.k if self.counted else self.k * len(topics)

    def uncovered(self, topics: frozenset[Topic], without: NodeId | None = None) -> int:
        """calcKUncovered (Fig. 3): topics covered by fewer than k neighbours (``without`` left out)."""
        links = [n for nid, n in self.neighbors.items() if nid != without]
        if self.counted:
            return max(0, self.k - len(links))
        return sum(1 for t in topics if sum(1 for n in links if t in n.desc.topics) < self.k)

    def uncovered_topics(self, topics: frozenset[Topic]) -> set[Topic]:
        return {t for t in topics if sum(1 for n in self.neighbors.values() if t in n.desc.topics) < self.k}


TASKS: Mapping[str, tuple[tuple[int, str, Literal["greedy", "coverage", "similar", "random"]], ...]] = MappingProxyType({
    "spidercast": ((GREEDY, "kg", "greedy"), (RANDOM_COVERAGE, "kr", "coverage")),
    "similarity": ((SIMILAR, "x", "similar"), (RANDOM_NODE, "y", "random")),
    "random_overlay": ((RANDOM_NODE, "x+y", "random"),),
})
"""Per protocol, its tasks: (kind, the config field of its K, how it selects)."""


class CoverageLinks(Layer):
    """Both tasks of a node, its membership and the control protocol (Figs. 2-5)."""

    name = LAYER

    def __init__(self, config: SpiderCastConfig, protocol: str, shared: dict[str, Any]) -> None:
        super().__init__()
        self.config = config
        self.shared = shared
        self.tasks: dict[int, Task] = {}
        for kind, param, select in TASKS[protocol]:
            k = config.x + config.y if param == "x+y" else int(getattr(config, param))
            self.tasks[kind] = Task(kind, k, select)
        if config.adaptive_k and protocol == "spidercast":
            self.tasks[RANDOM_COVERAGE].k = 0
        self.adapting = config.adaptive_k and protocol == "spidercast"
        self.members: Directory | None = None
        self.learned: dict[NodeId, Descriptor] = {}
        """Nodes known beyond the directory, or with an interest newer than the directory's."""
        self.gone: set[NodeId] = set()
        """Nodes a send to failed: out of the membership until they speak again."""

    @property
    def period(self) -> float:
        return self.config.loop_ms / 1000.0

    def bootstrap(self, contacts: Sequence[Descriptor]) -> None:
        self.members = directory(contacts, self.shared)
        topics = self.stack.topics
        for task in self.tasks.values():
            task.target = task.lmax(topics)

    def refresh(self) -> None:
        self.view = {nid: n.desc for task in self.tasks.values() for nid, n in task.neighbors.items()}

    def degree(self) -> int:
        return len(self.view)

    # --- the maintenance loop (Fig. 2) ------------------------------------------------------

    def tick(self, now: float) -> list[Action]:
        out: list[Action] = []
        topics = self.stack.topics
        for task in self.tasks.values():
            if task.k <= 0:
                continue
            lmax = task.lmax(topics)
            uc = task.uncovered(topics)
            gap = 0
            if uc > 0:
                task.target = lmax
                gap = task.target - len(task.neighbors)
                if gap > 0:
                    out += self._connect(task, now)
            else:
                self._covered(task)
            if uc == 0 or gap < 0:
                out += self._disconnect(task, lmax, now)
        return out

    def _covered(self, task: Task) -> None:
        """First K-coverage of a task; adaptive Kr (§3.3.1)."""
        first = not task.covered_once
        task.covered_once = True
        if not self.adapting or not first:
            return
        r = self.tasks[RANDOM_COVERAGE]
        if task.kind == GREEDY and self.degree() == task.k:
            r.k, r.covered_once = 1, False
        elif task.kind == RANDOM_COVERAGE and r.k > 0:
            if self.degree() < len(self.stack.topics) and r.k < self.config.kr_max:
                r.k, r.covered_once = r.k + 1, False
            else:
                self.adapting = False

    def _connect(self, task: Task, now: float) -> list[Action]:
        target = None
        while task.redirects and target is None:
            d = task.redirects.pop(0)
            if d.node_id not in task.neighbors and d.node_id != self.stack.node_id and d.node_id not in self.gone:
                target = d
        if target is None:
            target = self._select(task, now)
        if target is None:
            return []
        task.quarantine[target.node_id] = now + self.config.quarantine_ms / 1000.0
        return [self._signal(target, CONNECT, task, full=True)]

    def _disconnect(self, task: Task, lmax: int, now: float) -> list[Action]:
        task.target = min(lmax, len(task.neighbors))
        over = len(task.neighbors) - task.target
        m = self._disconnect_candidate(task, now)
        if m is None:
            return []
        if over > 0 or task.uncovered(self.stack.topics, without=m.desc.node_id) == 0:
            task.quarantine[m.desc.node_id] = now + self.config.quarantine_ms / 1000.0
            return [self._signal(m.desc, DISCONNECT, task)]
        return []

    def _disconnect_candidate(self, task: Task, now: float) -> Neighbor | None:
        """disconnectCandidate (Fig. 3): among neighbours with degree > target (not quarantined),
        one whose loss leaves the fewest topics under-covered, ties at random."""
        topics, least = self.stack.topics, math.inf
        best: list[Neighbor] = []
        for nid, n in task.neighbors.items():
            if n.degree <= n.target or task.quarantine.get(nid, 0.0) > now:
                continue
            u = task.uncovered(topics, without=nid)
            if u < least:
                best, least = [n], u
            elif u == least:
                best.append(n)
        return self.stack.rng.choice(best) if best else None

    # --- selection (Fig. 5, fixed; §4.12 for the baselines) ---------------------------------

    def _select(self, task: Task, now: float) -> Descriptor | None:
        """nextGreedyCoverageNode / nextRandomCoverageNode (Fig. 5, fixed), nextSimilarityNode,
        nextRandomNode: among known nodes but this one, the task's neighbours, the quarantined
        and the gone; uniformly among the best (greedy, similar) or among all that qualify."""
        members = self.members
        if members is None:
            return None
        topics = self.stack.topics
        task.quarantine = {n: until for n, until in task.quarantine.items() if until > now}
        blocked = {self.stack.node_id, *self.gone, *task.neighbors, *task.quarantine}
        if self.config.exclude_all_neighbors:
            blocked.update(self.view)
        wanted: frozenset[Topic] | set[Topic] = topics
        if task.select in ("greedy", "coverage"):
            wanted = task.uncovered_topics(topics)
        if task.select == "random":
            score = np.ones(len(members.ids), dtype=np.int64)
        else:
            score = members.overlaps(wanted)
        score[[members.row[n] for n in blocked | self.learned.keys() if n in members.row]] = 0
        extra = {nid: 1 if task.select == "random" else len(d.topics & wanted)
                 for nid, d in self.learned.items() if nid not in blocked}
        if task.select in ("greedy", "similar"):
            best = max(int(score.max(initial=0)), max(extra.values(), default=0))
            hits = np.flatnonzero(score == best) if best > 0 else np.zeros(0, dtype=np.int64)
            more = sorted(nid for nid, v in extra.items() if v == best > 0)
        else:
            hits = np.flatnonzero(score > 0)
            more = sorted(nid for nid, v in extra.items() if v > 0)
        total = len(hits) + len(more)
        if total == 0:
            return None
        i = self.stack.rng.randrange(total)
        if i < len(hits):
            return members.descriptors[int(hits[i])]
        return self.learned[more[i - len(hits)]]

    # --- messages (Fig. 4) ------------------------------------------------------------------

    def _signal(self, dst: Descriptor, kind: str, task: Task, *, full: bool = False,
                entries: tuple[Descriptor, ...] = ()) -> Send:
        me = self.stack.me
        sender = me if full else Descriptor(me.node_id, me.addr)
        values = (task.kind, len(task.neighbors), task.target)
        return Send(dst.node_id, dst.addr, Signal(LAYER, kind, sender, entries, (), values))

    def learn(self, d: Descriptor) -> None:
        """A node that spoke, with its interest if the message carried it."""
        self.gone.discard(d.node_id)
        if not d.topics:
            return
        members = self.members
        row = members.row.get(d.node_id) if members is not None else None
        if row is not None and members is not None and members.descriptors[row].topics == d.topics:
            self.learned.pop(d.node_id, None)
        else:
            self.learned[d.node_id] = d

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        if not isinstance(msg, Signal) or not msg.values or msg.sender.node_id != src:
            raise RemoteProtocolError("spidercast takes signals that name their task and come from their sender")
        task = self.tasks.get(msg.values[0])
        if task is None or len(msg.values) != 3:
            raise RemoteProtocolError(f"spidercast {msg.kind!r} for an unknown task or without (task, degree, target)")
        self.learn(msg.sender)
        n = task.neighbors.get(src)
        if n is not None:
            n.heard, n.degree, n.target = now, msg.values[1], msg.values[2]
        kind = msg.kind
        if kind == CONNECT:
            return self._on_connect(task, msg, now)
        if kind == CONNECT_OK:
            return self._on_connect_ok(task, msg, now)
        if kind == REDIRECT:
            if msg.entries:
                m = msg.entries[0]
                if m.node_id != self.stack.node_id and m.node_id not in task.neighbors and \
                        all(d.node_id != m.node_id for d in task.redirects):
                    task.redirects.append(m)
                    self.learn(m)
            return []
        if kind == DISCONNECT:
            return self._on_disconnect(task, msg)
        if kind in (DISCONNECT_OK, LEAVE):
            self._remove(task, src)
            return []
        if kind == DISCONNECT_REJECT:
            task.quarantine[src] = now + self.config.quarantine_ms / 1000.0
            return []
        raise RemoteProtocolError(f"spidercast message of unknown kind {kind!r}")

    def _accepts(self, task: Task) -> bool:
        return len(task.neighbors) < task.lmax(self.stack.topics) + self.config.margin

    def _add(self, task: Task, msg: Signal, now: float) -> None:
        task.neighbors[msg.sender.node_id] = Neighbor(msg.sender, msg.values[1], msg.values[2], now)
        lmax = task.lmax(self.stack.topics)
        if task.target < lmax and len(task.neighbors) < task.target + self.config.margin:
            task.target += 1
        self.refresh()

    def _on_connect(self, task: Task, msg: Signal, now: float) -> list[Action]:
        src = msg.sender
        if src.node_id in task.neighbors:
            return [self._signal(src, CONNECT_OK, task, full=True)]
        if self._accepts(task):
            self._add(task, msg, now)
            return [self._signal(src, CONNECT_OK, task, full=True)]
        slack = self.config.margin if self.config.redirect_rule == "code" else 0
        room = [n for nid, n in task.neighbors.items() if n.degree < n.target + slack and nid != src.node_id]
        suggestion: tuple[Descriptor, ...] = ()
        if room:
            best = max(len(n.desc.topics & src.topics) for n in room)
            suggestion = (self.stack.rng.choice([n for n in room if len(n.desc.topics & src.topics) == best]).desc,)
        return [self._signal(src, REDIRECT, task, entries=suggestion)]

    def _on_connect_ok(self, task: Task, msg: Signal, now: float) -> list[Action]:
        if msg.sender.node_id in task.neighbors:
            return []
        if self._accepts(task):
            self._add(task, msg, now)
            return []
        return [self._signal(msg.sender, LEAVE, task)]

    def _on_disconnect(self, task: Task, msg: Signal) -> list[Action]:
        src = msg.sender
        if src.node_id not in task.neighbors:
            return [self._signal(src, DISCONNECT_OK, task)]
        uc = task.uncovered(self.stack.topics, without=src.node_id)
        if len(task.neighbors) > task.target or uc == 0:
            self._remove(task, src.node_id)
            if uc == 0:
                task.target = len(task.neighbors)
            return [self._signal(src, DISCONNECT_OK, task)]
        return [self._signal(src, DISCONNECT_REJECT, task)]

    def _remove(self, task: Task, node: NodeId) -> None:
        if task.neighbors.pop(node, None) is not None:
            self.refresh()

    def drop(self, node: NodeId, gone: bool) -> None:
        """Remove ``node`` from every task (suspected, or a send to it failed: ``gone``)."""
        for task in self.tasks.values():
            task.neighbors.pop(node, None)
            task.redirects = [d for d in task.redirects if d.node_id != node]
        if gone:
            self.gone.add(node)
        self.refresh()

    def on_send_failed(self, dst: NodeId, msg: Message, now: float) -> list[Action]:
        self.drop(dst, gone=True)
        return []

    def goodbye(self) -> list[Action]:
        """An orderly leave: ``leave`` to every neighbour of every task."""
        return [self._signal(n.desc, LEAVE, task) for task in self.tasks.values() for n in task.neighbors.values()]

    # --- introspection ----------------------------------------------------------------------

    def snapshot(self) -> list[LayerSnapshot]:
        per_task = {f"task{k}": sorted(t.neighbors) for k, t in sorted(self.tasks.items())}
        return [LayerSnapshot(self.name, sorted(self.view), per_task)]

    def validate(self) -> None:
        super().validate()
        topics = self.stack.topics
        for task in self.tasks.values():
            if self.stack.node_id in task.neighbors:
                raise LocalProtocolError("spidercast: a self link")
            if len(task.neighbors) > task.lmax(topics) + self.config.margin:
                raise LocalProtocolError(f"spidercast task {task.kind}: {len(task.neighbors)} links, "
                                         f"above Lmax + margin = {task.lmax(topics) + self.config.margin}")


class Heartbeats(Layer):
    """Every ``heartbeat_ms`` a beat to each neighbour with every task's degree and target;
    a neighbour silent for ``suspect_ms`` is dropped (spec §4.2)."""

    name = HEARTBEAT

    def __init__(self, config: SpiderCastConfig, links: CoverageLinks) -> None:
        super().__init__()
        self.config = config
        self.links = links

    @property
    def period(self) -> float:
        return self.config.heartbeat_ms / 1000.0

    def tick(self, now: float) -> list[Action]:
        links = self.links
        deadline = now - self.config.suspect_ms / 1000.0
        for task in links.tasks.values():
            for nid in [nid for nid, n in task.neighbors.items() if n.heard < deadline]:
                task.neighbors.pop(nid)
        links.refresh()
        me = self.stack.me
        bare = Descriptor(me.node_id, me.addr)
        out: list[Action] = []
        for d in links.view.values():  # the (task, degree, target) of the tasks that hold d
            values = tuple(v for k, t in sorted(links.tasks.items()) if d.node_id in t.neighbors
                           for v in (k, len(t.neighbors), t.target))
            out.append(Send(d.node_id, d.addr, Signal(HEARTBEAT, BEAT, bare, (), (), values)))
        return out

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        if not isinstance(msg, Signal) or msg.kind != BEAT or len(msg.values) % 3:
            raise RemoteProtocolError("heartbeats carry (task, degree, target) triples")
        tasks = self.links.tasks
        for i in range(0, len(msg.values), 3):
            task = tasks.get(msg.values[i])
            n = task.neighbors.get(src) if task is not None else None
            if n is not None:
                n.degree, n.target, n.heard = msg.values[i + 1], msg.values[i + 2], now
        return []

    def on_send_failed(self, dst: NodeId, msg: Message, now: float) -> list[Action]:
        self.links.drop(dst, gone=True)
        return []

    def snapshot(self) -> list[LayerSnapshot]:
        return []


class RingPerTopic(Layer):
    """RingPT (spec §4.12): per topic, the next and the previous subscriber by id around the
    ring of the topic's members in the node's membership; static, no messages."""

    name = "ring_per_topic"

    def __init__(self, shared: dict[str, Any]) -> None:
        super().__init__()
        self.shared = shared

    def bootstrap(self, contacts: Sequence[Descriptor]) -> None:
        members = directory(contacts, self.shared)
        me = self.stack.node_id
        view: dict[NodeId, Descriptor] = {}
        for t in sorted(self.stack.topics):
            ring = members.members.get(t)
            if not ring:
                continue
            after, before = ring[bisect_right(ring, me) % len(ring)], ring[(bisect_left(ring, me) - 1) % len(ring)]
            for nid in (after, before):
                if nid != me:  # a ring of this node alone
                    view[nid] = members.descriptors[members.row[nid]]
        self.view = view


class InterestFlood(Dissemination):
    """Relay-free flooding over the overlay (spec §5): to every neighbour with the event's topic."""

    name = "interest_flood"

    def check_publish(self, topic: Topic) -> None:
        if topic not in self.stack.topics:
            raise LocalProtocolError(f"SpiderCast publishers have the topic they publish on in their interest ({topic!r})")

    def relays(self, event: EventMsg) -> bool:
        return event.topic in self.stack.topics  # a stray copy is delivered, not forwarded

    def targets(self, event: EventMsg, sender: NodeId | None) -> list[Descriptor]:
        return [d for d in self.stack.union().values() if event.topic in d.topics and d.node_id != sender]


class SpiderCastStack(Stack):
    """A stack whose graceful leave tells every neighbour (spec §4.9)."""

    def leave(self, now: float) -> list[Action]:
        links = self.layers.get(LAYER)
        bye = links.goodbye() if isinstance(links, CoverageLinks) else []
        super().leave(now)
        return list(bye)


def builder(protocol: str) -> Any:
    def build(me: Descriptor, config: SpiderCastConfig, rng: random.Random, shared: dict[str, Any]) -> Stack:
        if protocol == "ring_per_topic":
            return Stack(me, config, rng, [RingPerTopic(shared)], InterestFlood(), seen_capacity=config.seen_capacity)
        links = CoverageLinks(config, protocol, shared)
        return SpiderCastStack(me, config, rng, [links, Heartbeats(config, links)], InterestFlood(),
                               seen_capacity=config.seen_capacity)
    return build


for _name in ("spidercast", "similarity", "random_overlay", "ring_per_topic"):
    register_protocol(ProtocolSpec(
        _name, SpiderCastConfig, builder(_name),
        cycle_s=lambda c: c.loop_ms / 1000.0,
        reply_timeout_s=lambda c: c.loop_ms / 1000.0,
    ))
