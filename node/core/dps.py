"""DPS: content-based publish/subscribe over trees of semantic groups, leader-based
(Anceaume, Datta, Gradinariu, Simon, Virgillito, ICDCS 2006; spec
../shared/design/protocols/dps.md).

Theory of operation

A subscription (a topic string: a plain topic ``t`` is the equality ``topic = 't'``, spec §5.1;
a content filter is ``?price>=10&symbol*='a'``, node/core/content.py) joins the tree of one of
its attributes (``join_attr_policy``), in the **semantic group** whose label is its normalised
constraint on that attribute. The groups of an attribute form a tree ordered by containment
under a root group labelled ``top`` whose leader, the tree's **owner**, created the tree. An event
(``?price=42&symbol='acgtacg'``, or a plain topic) is published into the tree of every attribute
it carries and visits only the groups whose label matches it: a subtree whose root does not
match is skipped (safe because a parent's label always contains its children's).

Leader-based communication (spec §4.4): each group has one leader that keeps the full member
list, its parent group (label and leader) and its children (label, creation order and leader).
A subscriber locates the tree (§4.2), then sends FIND_GROUP to the root's leader (``traversal:
root``) or to a tree contact (``generic``: the walk goes up until a group's label contains the
subscription's, then down). At each leader ``decide`` (node/core/semantic_tree.py, §4.3) says:
an equal child exists (SUBSCRIBE_TO: the subscriber JOINs it), descend into the tightest child
that contains the label, or create the group here (CREATE_GROUP: the subscriber becomes the new
group's leader, adopting the children its label contains; the parent is blocked until
GROUP_CREATED comes back, buffering what arrives, and unblocked after ``create_timeout_steps``
in any case). Publication (§4.4.2, §4.5): the event goes to the root's leader (``root``) or
starts at the publisher's own group (``generic``, going up as well); a leader whose label
matches sends it to every member (GROUP_EVENT) and to the leader of every child whose label
matches (``parent_side_filter``), never back where it came from (nor to a member that published
it). With ``generic`` a publisher starts at every group it leads in the tree, else at its own
group's leader (one whose label matches if it has one); a node outside the tree starts at the
root. Since a node forwards only its first copy, it routes every group it leads at once: a
neighbouring group led here too is routed in the same step, and a group reached by way of
another group goes down only (a group is on the traversal's path exactly when its label matches,
every ancestor's label containing it).

Locating a tree (§4.2, choice, not in paper): the node's **seed** is its lowest-id bootstrap
contact (``nodes.contacts: seed`` gives every node the same one). LOCATE_TREE goes to the seed,
which keeps the owner directory: it answers with the tree's owner and up to ``tree_contacts``
recent subscribers of the tree, or, for a subscriber when there is no tree, grants it the
creation (and tells any other asker to retry after ``locate_retry_steps`` until the owner's
announcement comes); a publisher of an attribute without a tree drops the event
(``pub_tree_missing``). The seed serialises tree creation, so trees are never duplicated.

Choices (spec §4.0, each a parameter): ``step_ms``; ``tick_steps`` (how often timeouts are
checked; subscriptions issued at a tick, so a node's first subscriptions go out at a random
phase within its first tick); ``find_timeout_steps`` (a subscription not joined by then is
retried from the start, for ever: retries are counted); ``create_timeout_steps``;
``parent_side_filter``; ``group_on``; ``join_attr_policy`` (``random``, ``first``);
``tree_contacts``. Group creation order (the ``decide`` tie-break) is (creation time in ms,
creator id). A leader that unsubscribes stays the group's leader as a relay.

Not yet built (so not in the config): the epidemic variants (§4.6), co-leaders and self-healing
(§4.7), leave handoff, duplicate-group merges (duplicates cannot arise without concurrent
creation at different leaders, which the blocking prevents here).

Invariants (``validate``): a group this node leads lists it as leader and member; every child's
label is properly contained in its group's label (the safety invariant pruning relies on).
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from .content import TOP, Constraint, Subscription, Top, Value, contains, matches, parse_canon, parse_event, parse_filter, value_type
from .registry import ProtocolSpec, register_protocol
from .semantic_tree import decide
from .stack import Dissemination, Layer, Stack
from .types import (
    Action,
    Descriptor,
    EventMsg,
    LayerSnapshot,
    LocalProtocolError,
    Message,
    NodeId,
    RemoteProtocolError,
    Send,
    Signal,
    Topic,
)

LAYER = "dps"
DOWN, UP = 0, 1


@dataclass
class DpsConfig:
    traversal: Literal["root", "generic"] = "root"
    """root: every FIND_GROUP and PUBLISH starts at the root and goes down; generic: at a tree
    contact (a publisher's own group), going up and down (spec §4.3)."""
    step_ms: float = 200.0
    """Wall length of one step of the paper's simulator (spec §6.6)."""
    tick_steps: int = 5
    """Steps between the checks of timeouts and new subscriptions (choice)."""
    find_timeout_steps: int = 30
    """A subscription not joined after this long is retried from the start (spec T_find_timeout)."""
    create_timeout_steps: int = 10
    """A parent stays blocked for a child's creation at most this long (spec T_create_timeout)."""
    locate_retry_steps: int = 5
    """A node told that a tree is being created asks again after this long (choice)."""
    parent_side_filter: bool = True
    """A parent sends an event only to the children whose label matches it (spec §4.5)."""
    group_on: Literal["interval", "first_predicate"] = "interval"
    """The label of a subscription on its join attribute: the intersection of its predicates on
    it, or the first predicate alone (spec §2.2)."""
    join_attr_policy: Literal["random", "first"] = "random"
    """Which attribute's tree a subscription joins (spec §2.4)."""
    tree_contacts: int = 3
    """Recent subscribers of a tree the seed hands out as contacts (spec C_tree)."""
    seen_capacity: int = 100_000
    """Event ids remembered for duplicate suppression, LRU (spec SEEN_LRU)."""

    __pydantic_config__ = {"extra": "forbid"}

    def __post_init__(self) -> None:
        if self.step_ms <= 0 or min(self.tick_steps, self.find_timeout_steps, self.create_timeout_steps,
                                    self.locate_retry_steps, self.tree_contacts, self.seen_capacity) < 1:
            raise ValueError("step_ms must be positive and every count and timeout at least 1")

    @property
    def step_s(self) -> float:
        return self.step_ms / 1000.0


def tree_key(name: str, kind: str) -> str:
    return f"{name}:{kind}"


def _bare(d: Descriptor) -> Descriptor:
    return Descriptor(d.node_id, d.addr)


@dataclass(eq=False, slots=True)
class GroupRef:
    """A group as its neighbours know it: id, label, creation order and leader."""

    gid: str
    label: Constraint
    seq: int
    leader: Descriptor


@dataclass(eq=False)
class Membership:
    """A group this node belongs to (as its leader or as a member)."""

    ref: GroupRef
    tree: str
    subs: set[str] = field(default_factory=set)
    """This node's subscriptions grouped here (none for the owner's root group)."""
    members: dict[NodeId, Descriptor] = field(default_factory=dict)
    """Leader only: every member, the leader included."""
    parent: GroupRef | None = None
    children: dict[str, GroupRef] = field(default_factory=dict)
    blocked_until: float | None = None
    block_req: int = 0
    buffered: list[tuple[NodeId, Message]] = field(default_factory=list)

    @property
    def gid(self) -> str:
        return self.ref.gid


@dataclass(eq=False)
class PendingSub:
    sub: Subscription
    tree: str
    label: Constraint
    state: Literal["locate", "find", "joined"] = "locate"
    req: int = 0
    since: float = 0.0
    gid: str = ""


class Dps(Layer):
    """Tree location, group membership and the group tree's maintenance (no timer-driven
    gossip: the tick only checks timeouts and issues new subscriptions)."""

    name = LAYER

    def __init__(self, config: DpsConfig, rng: random.Random) -> None:
        super().__init__()
        self.config = config
        self.rng = rng
        self.seed: Descriptor | None = None
        self.owners: dict[str, Descriptor] = {}
        """Per tree, its root's leader as this node knows it."""
        self.contacts: dict[str, list[Descriptor]] = {}
        self.groups: dict[str, Membership] = {}
        self.subs: dict[str, PendingSub] = {}
        self.held: dict[str, list[EventMsg]] = {}
        """Events waiting for their tree to be located, per tree."""
        self.locating: dict[str, int] = {}
        # seed state
        self.directory: dict[str, Descriptor] = {}
        self.granted: dict[str, tuple[NodeId, float]] = {}
        self.recent: dict[str, deque[Descriptor]] = {}
        self._req = 0
        self._seq = 0
        self.counts = {"retries": 0, "pub_tree_missing": 0, "stale": 0, "buffered": 0}
        self.route: DpsRoute  # the stack's rule, set by ``build``: where held and buffered events go

    @property
    def period(self) -> float:
        return self.config.tick_steps * self.config.step_s

    @property
    def me(self) -> Descriptor:
        return _bare(self.stack.me)

    def bootstrap(self, contacts: Iterable[Descriptor]) -> None:
        found = sorted(contacts, key=lambda d: d.node_id)
        self.seed = _bare(found[0]) if found and found[0].node_id < self.stack.node_id else self.me

    def _next_req(self) -> int:
        self._req += 1
        return self._req

    def _signal(self, dst: Descriptor, kind: str, now: float, topics: Iterable[str] = (),
                entries: Iterable[Descriptor] = (), values: Iterable[int] = ()) -> list[Action]:
        """A message to ``dst``; to this node itself, handled at once."""
        msg = Signal(LAYER, kind, self.me, tuple(entries), tuple(topics), tuple(values))
        if dst.node_id == self.stack.node_id:
            return self.on_message(dst.node_id, msg, now)
        return [Send(dst.node_id, dst.addr, msg)]

    # --- subscriptions --------------------------------------------------------------------------

    def tick(self, now: float) -> list[Action]:
        out: list[Action] = []
        step = self.config.step_s
        for text in sorted(self.stack.me.topics - self.subs.keys()):
            out += self._issue(text, now)
        for text in sorted(self.subs.keys() - self.stack.me.topics):
            out += self._leave(text, now)
        for text, p in sorted(self.subs.items()):
            if p.state != "joined" and now - p.since >= self.config.find_timeout_steps * step:
                self.counts["retries"] += 1
                out += self._start(text, p, now)
        for m in list(self.groups.values()):
            if m.blocked_until is not None and now >= m.blocked_until:
                out += self._unblock(m, now)
        for tree in sorted(self.held.keys() - self.owners.keys()):
            out += self._locate(tree, now, create=False)
        for tree, (_, until) in list(self.granted.items()):
            if now >= until:
                del self.granted[tree]
        return out

    def _issue(self, text: str, now: float) -> list[Action]:
        try:
            sub = parse_filter(text, self.config.group_on)
        except ValueError as e:
            raise LocalProtocolError(f"subscription {text!r}: {e}") from None
        attr = sub.join_attribute(self.config.join_attr_policy, self.rng)
        tree = tree_key(*attr)
        p = self.subs[text] = PendingSub(sub, tree, sub.labels[attr])
        return self._start(text, p, now)

    def _start(self, text: str, p: PendingSub, now: float) -> list[Action]:
        p.since, p.req = now, self._next_req()
        if p.tree not in self.owners:
            p.state = "locate"
            return self._locate(p.tree, now, create=True)
        p.state = "find"
        return self._signal(self._entry(p.tree), "find", now, (p.tree, text, ""), (self.me,), (p.req, UP))

    def _entry(self, tree: str) -> Descriptor:
        """Where a FIND_GROUP starts: the root's leader, or (generic) a random tree contact."""
        if self.config.traversal == "generic":
            mine = [m.ref.leader for m in self.groups.values() if m.tree == tree]
            pool = mine or self.contacts.get(tree, [])
            if pool:
                return self.rng.choice(pool)
        return self.owners[tree]

    def _leave(self, text: str, now: float) -> list[Action]:
        p = self.subs.pop(text)
        m = self.groups.get(p.gid)
        if m is None:
            return []
        m.subs.discard(text)
        if m.subs or m.ref.leader.node_id == self.stack.node_id:
            return []  # a leader stays as the group's relay (choice)
        del self.groups[m.gid]
        return self._signal(m.ref.leader, "leave", now, (m.gid,))

    def _locate(self, tree: str, now: float, create: bool) -> list[Action]:
        if tree in self.locating:
            return []
        assert self.seed is not None
        self.locating[tree] = req = self._next_req()
        return self._signal(self.seed, "locate", now, (tree,), (), (req, int(create)))

    # --- messages -------------------------------------------------------------------------------

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        if not isinstance(msg, Signal):
            raise RemoteProtocolError(f"dps takes signals, not {type(msg).__name__}")
        handler = _HANDLERS.get(msg.kind)
        if handler is None:
            raise RemoteProtocolError(f"dps: unknown message kind {msg.kind!r}")
        try:
            return handler(self, msg, now)
        except (IndexError, ValueError, KeyError) as e:
            raise RemoteProtocolError(f"dps {msg.kind}: malformed ({e})") from None

    def _on_locate(self, msg: Signal, now: float) -> list[Action]:
        tree, (req, create) = msg.topics[0], msg.values[:2]
        owner = self.directory.get(tree)
        asker = msg.sender
        if owner is not None:
            recent = self.recent.setdefault(tree, deque(maxlen=self.config.tree_contacts))
            contacts = [d for d in recent if d.node_id != asker.node_id]
            if create:
                recent.append(asker)
            return self._signal(asker, "found", now, (tree,), (owner, *contacts), (req,))
        holder = self.granted.get(tree)
        if holder is not None and holder[0] != asker.node_id:
            return self._signal(asker, "wait", now, (tree,), (), (req,))
        if create:
            self.granted[tree] = (asker.node_id, now + self.config.find_timeout_steps * self.config.step_s)
        return self._signal(asker, "missing", now, (tree,), (), (req, int(create)))

    def _on_found(self, msg: Signal, now: float) -> list[Action]:
        tree = msg.topics[0]
        if self.locating.get(tree) != msg.values[0]:
            self.counts["stale"] += 1
            return []
        del self.locating[tree]
        self.owners[tree] = msg.entries[0]
        self.contacts[tree] = list(msg.entries[1:])
        return self._tree_known(tree, now)

    def _tree_known(self, tree: str, now: float) -> list[Action]:
        out: list[Action] = []
        for text, p in sorted(self.subs.items()):
            if p.tree == tree and p.state == "locate":
                out += self._start(text, p, now)
        for event in self.held.pop(tree, []):
            out += self.route.send_into(tree, event, now)
        return out

    def _on_wait(self, msg: Signal, now: float) -> list[Action]:
        tree = msg.topics[0]
        if self.locating.get(tree) == msg.values[0]:
            del self.locating[tree]  # the pending subscriptions retry at their timeout
            for p in self.subs.values():
                if p.tree == tree and p.state == "locate":
                    p.since = min(p.since, now - (self.config.find_timeout_steps - self.config.locate_retry_steps) * self.config.step_s)
        return []

    def _on_missing(self, msg: Signal, now: float) -> list[Action]:
        tree, (req, create) = msg.topics[0], msg.values[:2]
        if self.locating.get(tree) != req:
            self.counts["stale"] += 1
            return []
        del self.locating[tree]
        dropped = self.held.pop(tree, [])
        self.counts["pub_tree_missing"] += len(dropped)
        if not create or tree in self.owners:
            return []
        self._new_group(tree, TOP, now)  # the tree: a root group labelled top, led by its owner
        self.owners[tree] = self.me
        assert self.seed is not None
        return [*self._signal(self.seed, "announce", now, (tree,), (self.me,)), *self._tree_known(tree, now)]

    def _on_announce(self, msg: Signal, now: float) -> list[Action]:
        tree = msg.topics[0]
        self.directory[tree] = msg.entries[0]
        self.granted.pop(tree, None)
        self.recent.setdefault(tree, deque(maxlen=self.config.tree_contacts)).append(msg.entries[0])
        return []

    def _new_group(self, tree: str, label: Constraint, now: float, parent: GroupRef | None = None,
                   children: Iterable[GroupRef] = ()) -> Membership:
        self._seq += 1
        seq = int(now * 1000) * 1_000_000 + self.stack.node_id
        gid = f"{tree}:{label.canon()}@{self.stack.node_id}.{self._seq}"
        m = Membership(GroupRef(gid, label, seq, self.me), tree, members={self.stack.node_id: self.me},
                       parent=parent, children={c.gid: c for c in children})
        self.groups[gid] = m
        return m

    def _led(self, gid: str) -> Membership | None:
        m = self.groups.get(gid)
        return m if m is not None and m.ref.leader.node_id == self.stack.node_id else None

    def _on_find(self, msg: Signal, now: float) -> list[Action]:
        tree, text, gid = msg.topics[:3]
        subscriber, (req, direction) = msg.entries[0], msg.values[:2]
        label = parse_filter(text, self.config.group_on).labels[_attr(tree)]
        mine = [m for m in self.groups.values() if m.tree == tree]
        led = [m for m in mine if m.ref.leader.node_id == self.stack.node_id]
        if gid:
            led = [m for m in led if m.gid == gid]
        elif direction == DOWN or self.config.traversal == "root":
            led = [m for m in led if isinstance(m.ref.label, Top)]
        if not led:
            if mine and not gid and self.config.traversal == "generic":  # a member passes it to its leader
                return self._signal(mine[0].ref.leader, "find", now, (tree, text, ""), msg.entries, msg.values)
            self.counts["stale"] += 1
            return self._signal(subscriber, "retry", now, (text,), (), (req,))
        g = led[0]
        if direction == UP and not contains(g.ref.label, label):
            if g.parent is None:
                return self._signal(subscriber, "retry", now, (text,), (), (req,))
            return self._signal(g.parent.leader, "find", now, (tree, text, g.parent.gid), msg.entries, (req, UP))
        if g.blocked_until is not None:
            g.buffered.append((subscriber.node_id, msg))
            self.counts["buffered"] += 1
            return []
        if g.ref.label.canon() == label.canon():
            return self._signal(subscriber, "subscribe_to", now, (tree, text, g.gid), (g.ref.leader,), (req,))
        verdict, child, adopt = decide(list(g.children.values()), label)
        if verdict == "found":
            assert child is not None
            return self._signal(subscriber, "subscribe_to", now, (tree, text, child.gid), (child.leader,), (req,))
        if verdict == "descend":
            assert child is not None
            return self._signal(child.leader, "find", now, (tree, text, child.gid), msg.entries, (req, DOWN))
        g.blocked_until = now + self.config.create_timeout_steps * self.config.step_s
        g.block_req = req
        topics = [tree, text, g.gid, g.ref.label.canon()]
        values = [req, g.ref.seq]
        for c in adopt:
            topics += [c.gid, c.label.canon()]
            values.append(c.seq)
        return self._signal(subscriber, "create", now, topics, (g.ref.leader, *(c.leader for c in adopt)), values)

    def _pending(self, text: str, req: int) -> PendingSub | None:
        p = self.subs.get(text)
        if p is None or p.state != "find" or p.req != req:
            self.counts["stale"] += 1
            return None
        return p

    def _on_retry(self, msg: Signal, now: float) -> list[Action]:
        p = self._pending(msg.topics[0], msg.values[0])
        if p is None:
            return []
        p.req = self._next_req()  # from the root this time
        return self._signal(self.owners[p.tree], "find", now, (p.tree, msg.topics[0], ""), (self.me,), (p.req, DOWN))

    def _on_subscribe_to(self, msg: Signal, now: float) -> list[Action]:
        tree, text, gid = msg.topics[:3]
        p = self._pending(text, msg.values[0])
        if p is None:
            return []
        m = self.groups.get(gid)
        if m is not None:  # already in that group for another subscription
            m.subs.add(text)
            p.state, p.gid = "joined", gid
            return []
        return self._signal(msg.entries[0], "join", now, (gid, text), (), (p.req,))

    def _on_join(self, msg: Signal, now: float) -> list[Action]:
        gid, text = msg.topics[:2]
        m = self._led(gid)
        if m is None:
            self.counts["stale"] += 1
            return self._signal(msg.sender, "retry", now, (text,), (), msg.values[:1])
        m.members[msg.sender.node_id] = msg.sender
        return self._signal(msg.sender, "join_ack", now, (m.tree, gid, m.ref.label.canon(), text), (self.me,),
                            (msg.values[0], m.ref.seq))

    def _on_join_ack(self, msg: Signal, now: float) -> list[Action]:
        tree, gid, canon, text = msg.topics[:4]
        p = self._pending(text, msg.values[0])
        if p is None:
            return []
        m = self.groups.setdefault(gid, Membership(GroupRef(gid, parse_canon(canon), msg.values[1], msg.entries[0]), tree))
        m.subs.add(text)
        p.state, p.gid = "joined", gid
        return []

    def _on_create(self, msg: Signal, now: float) -> list[Action]:
        tree, text, parent_gid, parent_canon = msg.topics[:4]
        p = self._pending(text, msg.values[0])
        if p is None:
            return []
        parent = GroupRef(parent_gid, parse_canon(parent_canon), msg.values[1], msg.entries[0])
        adopted = [GroupRef(msg.topics[i], parse_canon(msg.topics[i + 1]), msg.values[2 + (i - 4) // 2], msg.entries[1 + (i - 4) // 2])
                   for i in range(4, len(msg.topics), 2)]
        m = self._new_group(tree, p.label, now, parent, adopted)
        m.subs.add(text)
        p.state, p.gid = "joined", m.gid
        out = self._signal(parent.leader, "created", now, (parent_gid, m.gid, p.label.canon(), *(c.gid for c in adopted)),
                           (self.me,), (msg.values[0], m.ref.seq))
        for c in adopted:
            out += self._signal(c.leader, "pred_changed", now, (c.gid, m.gid, p.label.canon()), (self.me,), (m.ref.seq,))
        return out

    def _on_created(self, msg: Signal, now: float) -> list[Action]:
        parent_gid, gid, canon, *adopted = msg.topics
        m = self._led(parent_gid)
        if m is None:
            self.counts["stale"] += 1
            return []
        for a in adopted:
            m.children.pop(a, None)
        m.children[gid] = GroupRef(gid, parse_canon(canon), msg.values[1], msg.entries[0])
        return self._unblock(m, now) if m.block_req == msg.values[0] else []

    def _on_pred_changed(self, msg: Signal, now: float) -> list[Action]:
        gid, parent_gid, canon = msg.topics[:3]
        m = self._led(gid)
        if m is None:
            self.counts["stale"] += 1
            return []
        m.parent = GroupRef(parent_gid, parse_canon(canon), msg.values[0], msg.entries[0])
        return []

    def _on_leave(self, msg: Signal, now: float) -> list[Action]:
        m = self._led(msg.topics[0])
        if m is not None and msg.sender.node_id != self.stack.node_id:
            m.members.pop(msg.sender.node_id, None)
        return []

    def _unblock(self, m: Membership, now: float) -> list[Action]:
        m.blocked_until = None
        held, m.buffered = m.buffered, []
        out: list[Action] = []
        for src, msg in held:
            if isinstance(msg, EventMsg):
                out += self.route.forward_in(m, msg, src, now)
            else:
                out += self.on_message(src, msg, now)
        return out

    def on_send_failed(self, dst: NodeId, msg: Message, now: float) -> list[Action]:
        return []  # a lost request is retried at its subscription's timeout

    # --- introspection --------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        led = [m for m in self.groups.values() if m.ref.leader.node_id == self.stack.node_id]
        return {**self.counts, "groups_led": len(led), "roots_led": sum(isinstance(m.ref.label, Top) for m in led),
                "members_led": sum(len(m.members) - 1 for m in led)}

    def links(self) -> set[NodeId]:
        out: set[NodeId] = set()
        for m in self.groups.values():
            out.add(m.ref.leader.node_id)
            out.update(m.members)
            out.update(c.leader.node_id for c in m.children.values())
            if m.parent is not None:
                out.add(m.parent.leader.node_id)
        out.discard(self.stack.node_id)
        return out

    def snapshot(self) -> list[LayerSnapshot]:
        per_topic: dict[Topic, list[NodeId]] = {}
        for m in self.groups.values():
            peers = sorted(set(m.members) - {self.stack.node_id}) if m.members else [m.ref.leader.node_id]
            for text in m.subs:
                per_topic[text] = peers
        return [LayerSnapshot(LAYER, sorted(self.links()), per_topic)]

    def validate(self) -> None:
        me = self.stack.node_id
        for m in self.groups.values():
            if m.ref.leader.node_id == me and me not in m.members:
                raise LocalProtocolError(f"node {me} leads {m.gid} but is not among its members")
            for c in m.children.values():
                if not contains(m.ref.label, c.label) or c.label.canon() == m.ref.label.canon():
                    raise LocalProtocolError(f"child {c.gid} of {m.gid}: label not properly contained")


def _attr(tree: str) -> tuple[str, Any]:
    name, _, kind = tree.rpartition(":")
    return name, kind


_HANDLERS = MappingProxyType({
    "locate": Dps._on_locate, "found": Dps._on_found, "wait": Dps._on_wait, "missing": Dps._on_missing,
    "announce": Dps._on_announce, "find": Dps._on_find, "retry": Dps._on_retry,
    "subscribe_to": Dps._on_subscribe_to, "join": Dps._on_join, "join_ack": Dps._on_join_ack,
    "create": Dps._on_create, "created": Dps._on_created, "pred_changed": Dps._on_pred_changed,
    "leave": Dps._on_leave,
})


class DpsRoute(Dissemination):
    """Publication routing over the groups (spec §4.4.2, §4.5, leader-based)."""

    name = "dps-route"

    def __init__(self, layer: Dps, config: DpsConfig) -> None:
        self.layer, self.config = layer, config
        self._parsed: OrderedDict[str, dict[str, Value]] = OrderedDict()

    def attrs(self, event: EventMsg) -> dict[str, Value]:
        found = self._parsed.get(event.topic)
        if found is None:
            try:
                found = parse_event(event.topic)
            except ValueError as e:
                raise RemoteProtocolError(f"event {event.event_id}: {e}") from None
            self._parsed[event.topic] = found
            if len(self._parsed) > 4096:
                self._parsed.popitem(last=False)
        return found

    def subscribes(self, event: EventMsg) -> bool:
        attrs = self.attrs(event)
        return any(p.sub.matches(attrs) for p in self.layer.subs.values())

    def check_publish(self, topic: Topic) -> None:
        try:
            parse_event(topic)
        except ValueError as e:
            raise LocalProtocolError(f"publish {topic!r}: {e}") from None

    def targets(self, event: EventMsg, sender: NodeId | None) -> list[Descriptor]:
        out: dict[NodeId, Descriptor] = {}
        layer, me = self.layer, self.stack.node_id
        for name, v in self.attrs(event).items():
            tree = tree_key(name, value_type(v))
            mine = [m for m in layer.groups.values() if m.tree == tree]
            seen: set[str] = set()
            if sender is not None:
                for m in mine:
                    out.update((d.node_id, d) for d in self._arrived(m, v, event, sender, seen))
                continue
            # the publisher
            if tree not in layer.owners:
                layer.held.setdefault(tree, []).append(event)
                continue
            if self.config.traversal == "root" or not mine:
                root = layer.owners[tree]
                out[root.node_id] = root
                for m in mine:  # the root's copy would come back to a group led here as a duplicate
                    if m.ref.leader.node_id == me:
                        out.update((d.node_id, d) for d in self._route(m, v, event, True, None, seen))
                continue
            led = sorted((m for m in mine if m.ref.leader.node_id == me), key=lambda m: m.gid)
            # every group led here starts (a copy coming back would be a duplicate), else its own group's leader
            for m in led or [min(mine, key=lambda m: (not matches(m.ref.label, v), m.gid))]:
                out.update((d.node_id, d) for d in self._route(m, v, event, False, None, seen))
        out.pop(me, None)
        if sender is not None:
            out.pop(sender, None)
        return list(out.values())

    def _arrived(self, m: Membership, v: Value, event: EventMsg, sender: NodeId, seen: set[str]) -> list[Descriptor]:
        """A copy from ``sender`` at group ``m`` led here: from its parent, from one of its
        children, from a member (its publication), or by way of another group: then it goes
        down only (a later copy from the parent would be a duplicate; the group is on the
        traversal's path exactly when its label matches, every ancestor's label containing it)."""
        if m.ref.leader.node_id != self.stack.node_id:
            return []  # a member: a GROUP_EVENT ends here
        from_parent = m.parent is not None and sender == m.parent.leader.node_id
        child = next((c.gid for c in m.children.values() if c.leader.node_id == sender), None)
        if not from_parent and child is None and sender not in m.members:
            from_parent = True
        return self._route(m, v, event, from_parent, child, seen, sender)

    def _route(self, m: Membership, v: Value, event: EventMsg, from_parent: bool, from_child: str | None,
               seen: set[str], sender: NodeId | None = None) -> list[Descriptor]:
        """Where group ``m`` sends the event: its members and matching children if its label
        matches, and up to its parent (generic, unless it came from there). A neighbouring
        group led by this node too is routed here at once."""
        if m.gid in seen:
            return []
        seen.add(m.gid)
        layer, me = self.layer, self.stack.node_id
        if m.ref.leader.node_id != me:  # a member passes its own publication to its leader
            return [m.ref.leader]
        if m.blocked_until is not None:
            m.buffered.append((sender if sender is not None else me, event))
            layer.counts["buffered"] += 1
            return []
        out: list[Descriptor] = []
        if matches(m.ref.label, v):
            out += [d for d in m.members.values() if d.node_id != event.publisher]
            for c in m.children.values():
                if c.gid != from_child and (matches(c.label, v) or not self.config.parent_side_filter):
                    led = layer._led(c.gid)
                    out += self._route(led, v, event, True, None, seen) if led is not None else [c.leader]
        if self.config.traversal == "generic" and not from_parent and m.parent is not None:
            led = layer._led(m.parent.gid)
            out += self._route(led, v, event, False, m.gid, seen) if led is not None else [m.parent.leader]
        return out

    def forward_in(self, m: Membership, event: EventMsg, src: NodeId, now: float) -> list[Action]:
        """An event buffered at a blocked group, sent on once it is unblocked."""
        me = self.stack.node_id
        out: dict[NodeId, Descriptor] = {}
        for n, v in self.attrs(event).items():
            if tree_key(n, value_type(v)) == m.tree:
                found = self._route(m, v, event, False, None, set()) if src == me else self._arrived(m, v, event, src, set())
                out.update((d.node_id, d) for d in found)
        for k in (me, src):
            out.pop(k, None)
        return self.stack.send_copies(event, out.values())

    def send_into(self, tree: str, event: EventMsg, now: float) -> list[Action]:
        """A held event sent into a tree once it is located (at its root)."""
        root = self.layer.owners[tree]
        return self.stack.send_copies(event, [root] if root.node_id != self.stack.node_id else [])


def build(me: Descriptor, config: DpsConfig, rng: random.Random, shared: dict[str, Any]) -> Stack:
    layer = Dps(config, rng)
    layer.route = DpsRoute(layer, config)
    return Stack(me, config, rng, [layer], layer.route, seen_capacity=config.seen_capacity)


register_protocol(ProtocolSpec(
    "dps", DpsConfig, build,
    cycle_s=lambda c: c.step_ms / 1000.0,
    reply_timeout_s=lambda c: c.find_timeout_steps * c.step_ms / 1000.0,
    contacts="seed",
))
