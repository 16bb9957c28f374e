"""DPS: content-based publish/subscribe over trees of semantic groups, leader-based or epidemic,
self-healing
(Anceaume, Datta, Gradinariu, Simon, Virgillito, ICDCS 2006; spec
../shared/design/protocols/dps.md).

Theory of operation

A subscription (a topic string: a plain topic ``t`` is the equality ``topic = 't'``, spec §5.1;
a content filter is ``?price>=10&symbol*='a'``, node/protocols/dps/content.py) joins the tree of one of
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
subscription's, then down). At each leader ``decide`` (node/protocols/dps/semantic_tree.py, §4.3) says:
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
The tree's root leader, once known, is trusted for ``owner_ttl_steps`` after the last word of
it; a publication or FIND_GROUP for the root after that locates the tree again first (the spec
locates per publication; nothing tells a node far from the root that its leader changed).
With ``seed_backups`` (ours, 0 by default) every node greets the seed once; the seed copies its
directory to the first ``seed_backups`` nodes it heard from and names them to every node; a node
whose send to the seed fails turns to the first live backup, which serves from then on (a grant
the dead seed gave that was not announced yet may be given again).

Self-healing (§4.7.1): each group's leader keeps ``co_leaders`` co-leaders (its earliest
members; a root group without members takes its children's leaders and co-leaders as routers)
and sends them its state after every change (SYNC). Failures are detected by failed sends (the
transport's, as gRPC's UNAVAILABLE; spec §4.1; in the simulator only under
``sim.failure_detection: oracle``) and by probes left unanswered (``probe_misses``, the paper's
heartbeats): leaders probe their co-leaders and the leaders
of the neighbouring groups every U[``fd_min_steps``, ``fd_max_steps``] steps (the answers carry
the parent's parent and the children's children, the distance-2 entries), co-leaders probe their
leader, a member that heard nothing from its group for ``silence_steps`` probes its leader, and
a publisher probes the root's leader of each tree it published into from outside since its last
round (choice: such a publisher is nobody's neighbour, and would otherwise send into a dead root
for ever).
A dead leader is replaced by its first live co-leader with the next epoch (a neighbour that
finds it dead tells the co-leader, then sends it what it could not deliver); the new leader
announces itself to the members and neighbouring groups (and, for a root, to the seed as the
tree's owner). A group that lost every contact is bridged: its parent adopts its children, its
children reattach to their grandparent (else to the root). Members of a group that is gone
subscribe again. A publisher whose root's leader is gone locates the tree again.

Epidemic communication (``comm: epidemic``, §4.6): no leaders; every member decides (FIND_GROUP,
JOIN) and routes, from partial views: a groupview of ``view_size`` members and up to
``group_contacts`` contacts of the parent group and of each child group. A joiner gets a sample
of its contact's views; membership changes (a member added or gone, a new child, a new parent)
are gossiped to ``sub_fanout`` members; members shuffle groupview samples and probe one contact
of each neighbouring group per failure-detection period (the answers refresh the contacts and
bring the distance-2 groups). An event is gossiped inside a matching group to ``fanout``
members, a node that forwarded it c times forwarding a later copy with probability
p0 / (1 + c), at most ``max_forwards`` times; between groups only entry nodes forward (spec
ENTRY_ONLY): the tree-entry node to ``next_fanout`` contacts of each matching child (and of the
parent, generic), other entry nodes to one. A root group has ``root_replicas`` members, its
owner and routers taken from its children's contacts. A dead entry leaves every view; a
neighbouring group with no contact left is bridged as in the leader-based variant. With
``repair_window_steps`` (ours, 0 = off), shuffles carry the ids of the events the sender saw in
the group over that window, and the partner sends the ones it lacks (anti-entropy).

Choices (spec §4.0, each a parameter): ``step_ms``; ``tick_steps`` (how often timeouts are
checked; subscriptions issued at a tick, so a node's first subscriptions go out at a random
phase within its first tick); ``find_timeout_steps`` (a subscription not joined by then is
retried from the start, for ever: retries are counted); ``create_timeout_steps``;
``parent_side_filter``; ``group_on``; ``join_attr_policy`` (``random``, ``first``);
``tree_contacts``; ``co_leaders``, ``fd_min_steps``, ``fd_max_steps``, ``silence_steps``;
``seed_backups``; ``repair_window_steps``. Group
creation order (the ``decide`` tie-break) is (creation time in ms, creator id). A leader that
unsubscribes stays the group's leader as a relay. A node probed ``probe_misses`` (1)
rounds running without a word from it in between (any message counts) is suspected, as a failed
send makes it: with ``sim.failure_detection: heartbeat`` (the paper's setting, sends to the dead
lost silently) that is the only way a death is found.

Not yet built (so not in the config): leave handoff and dissolving an emptied group,
duplicate-group merges (leader-based, duplicates cannot arise without concurrent creation at
different leaders, which the blocking prevents; epidemic, two members may create equal groups
concurrently: both stay, siblings that each receive what matches, spec §4.6.2's "harmless"
case), ``decay_mode: hop``, ``down_mode: all_receivers``, a tree whose root group lost every
member (its children have nowhere to reattach).

Modules: this one holds the config and the layer (tree location, membership, maintenance,
healing); ``dps_groups`` the group references and the signal fields that carry them;
``dps_route`` the publication routing (the stack's dissemination rule).

Invariants (``validate``): a group this node leads lists it as leader and member; every child's
label is properly contained in its group's label (the safety invariant pruning relies on).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from itertools import islice
from types import MappingProxyType
from typing import Any

from node.kit.messages import from_signal, to_signal
from node.kit.registry import ProtocolSpec, register_protocol
from node.kit.stack import Layer, Stack
from node.kit.types import Action, Descriptor, EventMsg, LayerSnapshot, LocalProtocolError, Message, NodeId, RemoteProtocolError, Send, Signal, Topic
from node.protocols.dps.config import DpsConfig
from node.protocols.dps.content import TOP, Constraint, Top, contains, parse_filter
from node.protocols.dps.groups import GroupRef, Membership, PendingSub, bare, merged, tree_attr, tree_key, with_contacts, without
from node.protocols.dps.messages import (
    LAYER,
    Announce,
    Create,
    Created,
    Directory,
    Find,
    Found,
    Group,
    Hello,
    Join,
    JoinAck,
    Leader,
    Leave,
    Locate,
    Missing,
    Ping,
    Pong,
    PredChanged,
    Reattach,
    Retry,
    Rumor,
    RumorAdd,
    RumorPred,
    RumorRemove,
    RumorSucc,
    Seeds,
    Shuffle,
    SubscribeTo,
    Sync,
    Takeover,
    Wait,
    opt,
    ref_or_none,
)
from node.protocols.dps.messages import GroupState as PongState
from node.protocols.dps.route import DpsRoute
from node.protocols.dps.semantic_tree import decide


class Dps(Layer):
    """Tree location, group membership, the group tree's maintenance and its self-healing
    (the tick checks timeouts, issues new subscriptions and runs the failure detector)."""

    name = LAYER

    def __init__(self, config: DpsConfig, rng: random.Random) -> None:
        super().__init__()
        self.config = config
        self.rng = rng
        self.seed: Descriptor | None = None
        self.owners: dict[str, Descriptor] = {}
        """Per tree, its root's leader as this node knows it."""
        self.owner_heard: dict[str, float] = {}
        """Per tree, when this node last had word of its root's leader (``owner_ttl_steps``)."""
        self.contacts: dict[str, list[Descriptor]] = {}
        self.groups: dict[str, Membership] = {}
        self.subs: dict[str, PendingSub] = {}
        self.held: dict[str, list[EventMsg]] = {}
        """Events waiting for their tree to be located, per tree."""
        self.locating: dict[str, int] = {}
        self.suspected: dict[NodeId, float] = {}
        """Nodes a send to failed, and when (crash-stop: not chosen again for ``suspect_steps``)."""
        self.unanswered: dict[NodeId, int] = {}
        """The probe round of the first probe a node has not answered yet (``probe_misses``)."""
        self.rounds = 0
        self.published_into: set[str] = set()
        """Trees this node sent a publication into at their root since its last probe round: the
        root's leader is probed too (a publisher outside a tree is nobody's neighbour there)."""
        self.next_probe = 0.0
        self.epidemic = config.comm == "epidemic"
        self.rumors: OrderedDict[str, int] = OrderedDict()
        """Epidemic: membership changes seen, and how often this node forwarded each."""
        self.backup_seeds: list[Descriptor] = []
        """Where to locate trees once the seed is gone, in order (``seed_backups``)."""
        # seed state (a backup's directory is a copy)
        self.directory: dict[str, Descriptor] = {}
        self.granted: dict[str, tuple[NodeId, float]] = {}
        self.recent: dict[str, deque[Descriptor]] = {}
        self.askers: dict[NodeId, Descriptor] = {}
        """Nodes heard from, in order (backup seeds are chosen among them)."""
        self.told: dict[NodeId, int] = {}
        """The version of ``backup_seeds`` each node heard from was told."""
        self._backups_version = 0
        self._greeted = False
        self._req = 0
        self._seq = 0
        self.counts = dict.fromkeys(("retries", "pub_tree_missing", "stale", "buffered", "suspected", "takeovers",
                                     "promoted", "reattached", "adopted", "resubscribed", "repaired", "relocated", "received"), 0)
        self.route: DpsRoute  # the stack's rule, set by ``build``: where held and buffered events go

    @property
    def period(self) -> float:
        return self.config.tick_steps * self.config.step_s

    @property
    def me(self) -> Descriptor:
        return bare(self.stack.me)

    def bootstrap(self, contacts: Iterable[Descriptor]) -> None:
        found = sorted(contacts, key=lambda d: d.node_id)
        self.seed = bare(found[0]) if found and found[0].node_id < self.stack.node_id else self.me

    def _next_req(self) -> int:
        self._req += 1
        return self._req

    def _send(self, dst: Descriptor, msg: Any, now: float) -> list[Action]:
        """A message (one of node/protocols/dps/messages.py) to ``dst``; to this node itself,
        handled at once."""
        sig = to_signal(msg)
        if dst.node_id == self.stack.node_id:
            return self.on_message(dst.node_id, sig, now)
        return [Send(dst.node_id, dst.addr, sig)]

    def leads(self, m: Membership) -> bool:
        """Whether this node decides and routes for ``m``: its leader, or any epidemic member."""
        return self.epidemic or m.ref.leader.node_id == self.stack.node_id

    def backs(self, m: Membership) -> bool:
        return not self.epidemic and any(d.node_id == self.stack.node_id for d in m.ref.backups)

    def pick(self, r: GroupRef) -> Descriptor:
        """Where a message for group ``r`` goes: its leader, or (epidemic) one of its contacts."""
        if not self.epidemic or not r.backups:
            return r.leader
        return self.rng.choice(r.contacts)

    def _out(self, m: Membership) -> GroupRef:
        """Group ``m`` as this node hands it out: its ref, or (epidemic) this node and a sample
        of its groupview as contacts."""
        if not self.epidemic:
            return m.ref
        k = min(len(m.members), self.config.group_contacts - 1)
        sample = self.rng.sample(sorted(m.members.values(), key=lambda d: d.node_id), k)
        return GroupRef(m.gid, m.ref.label, m.ref.seq, self.me, tuple(sample))

    def led(self, gid: str) -> Membership | None:
        m = self.groups.get(gid)
        return m if m is not None and self.leads(m) else None

    def _alive(self, node: NodeId, now: float) -> bool:
        at = self.suspected.get(node)
        return at is None or now - at > 2 * self.config.fd_max_steps * self.config.step_s

    # --- subscriptions --------------------------------------------------------------------------

    def tick(self, now: float) -> list[Action]:
        out: list[Action] = []
        step = self.config.step_s
        if self.config.seed_backups and not self._greeted and self.seed is not None and not self._serving():
            self._greeted = True  # the seed names its backups in return
            out += self._send(self.seed, Hello(self.me), now)
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
            out += self.locate(tree, now, create=False)
        for tree, (_, until) in list(self.granted.items()):
            if now >= until:
                del self.granted[tree]
        if now >= self.next_probe:
            self.next_probe = now + self.rng.randint(self.config.fd_min_steps, self.config.fd_max_steps) * step
            out += self._probe(now)
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
        entry = self._entry(p.tree, now)
        if entry is None:
            p.state = "locate"
            return self.locate(p.tree, now, create=True)
        p.state = "find"
        return self._send(entry, Find(self.me, p.tree, text, "", self.me, p.req, "up"), now)

    def _entry(self, tree: str, now: float) -> Descriptor | None:
        """Where a FIND_GROUP starts: the root's leader, or (generic) a random tree contact; None
        when the tree is to be located first."""
        if tree not in self.owners:
            return None
        if self.config.traversal == "generic":
            mine = [m.ref.leader for m in self.groups.values() if m.tree == tree]
            pool = mine or self.contacts.get(tree, [])
            if pool:
                return self.rng.choice(pool)
        return self.fresh_owner(tree, now)

    def fresh_owner(self, tree: str, now: float) -> Descriptor | None:
        """The root's leader of ``tree`` if this node had word of it within ``owner_ttl_steps``
        (or is in the root group itself); else None, its entry dropped to be located again."""
        owner = self.owners.get(tree)
        if owner is None or owner.node_id == self.stack.node_id \
                or now - self.owner_heard.get(tree, -math.inf) <= self.config.owner_ttl_steps * self.config.step_s \
                or any(m.tree == tree and isinstance(m.ref.label, Top) for m in self.groups.values()):
            return owner
        del self.owners[tree]
        self.counts["relocated"] += 1
        return None

    def _leave(self, text: str, now: float) -> list[Action]:
        p = self.subs.pop(text)
        m = self.groups.get(p.gid)
        if m is None:
            return []
        m.subs.discard(text)
        if m.subs or not self.epidemic and (self.leads(m) or self.backs(m)):
            return []  # a leader or co-leader stays as the group's relay (choice)
        del self.groups[m.gid]
        if self.epidemic:
            return self._rumor(m, RumorRemove(self.me, self.me), now, subject=self.me)
        return self._send(m.ref.leader, Leave(self.me, m.gid), now)

    def locate(self, tree: str, now: float, create: bool) -> list[Action]:
        if tree in self.locating:
            return []
        assert self.seed is not None
        self.locating[tree] = req = self._next_req()
        return self._send(self.seed, Locate(self.me, tree, req, create), now)

    # --- messages -------------------------------------------------------------------------------

    def on_message(self, src: NodeId, msg: Message, now: float) -> list[Action]:
        if not isinstance(msg, Signal) or msg.layer != LAYER:
            raise RemoteProtocolError(f"dps takes its own signals, not {type(msg).__name__}")
        self.counts["received"] += 1  # incoming control messages (event copies are the stack's events_received)
        self.unanswered.pop(src, None)  # any word is a heartbeat
        for tree, owner in self.owners.items():
            if owner.node_id == src:
                self.owner_heard[tree] = now
        return self._handle(from_signal(msg), now)

    def _handle(self, msg: Any, now: float) -> list[Action]:
        try:
            return _HANDLERS[type(msg)](self, msg, now)
        except (IndexError, ValueError, KeyError) as e:
            raise RemoteProtocolError(f"dps {type(msg).__name__}: malformed ({e})") from None

    def _on_locate(self, msg: Locate, now: float) -> list[Action]:
        tree, req, create = msg.tree, msg.req, msg.create
        owner = self.directory.get(tree)
        asker = msg.sender
        out = self._heard(asker, now)
        if owner is not None:
            recent = self.recent.setdefault(tree, deque(maxlen=self.config.tree_contacts))
            contacts = [d for d in recent if d.node_id != asker.node_id]
            if create:
                recent.append(asker)
            return out + self._send(asker, Found(self.me, tree, req, owner, tuple(contacts)), now)
        holder = self.granted.get(tree)
        if holder is not None and holder[0] != asker.node_id:
            return out + self._send(asker, Wait(self.me, tree, req), now)
        if create:
            self.granted[tree] = (asker.node_id, now + self.config.find_timeout_steps * self.config.step_s)
        return out + self._send(asker, Missing(self.me, tree, req, create), now)

    def _on_found(self, msg: Found, now: float) -> list[Action]:
        tree = msg.tree
        if self.locating.get(tree) != msg.req:
            self.counts["stale"] += 1
            return []
        del self.locating[tree]
        if not self._alive(msg.owner.node_id, now):
            return []  # the seed has not heard of the takeover yet: asked again at the next tick
        self.owners[tree], self.owner_heard[tree] = msg.owner, now
        self.contacts[tree] = list(msg.contacts)
        return self._tree_known(tree, now)

    def _tree_known(self, tree: str, now: float) -> list[Action]:
        out: list[Action] = []
        for text, p in sorted(self.subs.items()):
            if p.tree == tree and p.state == "locate":
                out += self._start(text, p, now)
        for event in self.held.pop(tree, []):
            out += self.route.send_into(tree, event, now)
        return out

    def _on_wait(self, msg: Wait, now: float) -> list[Action]:
        tree = msg.tree
        if self.locating.get(tree) == msg.req:
            del self.locating[tree]  # the pending subscriptions retry at their timeout
            for p in self.subs.values():
                if p.tree == tree and p.state == "locate":
                    p.since = min(p.since, now - (self.config.find_timeout_steps - self.config.locate_retry_steps) * self.config.step_s)
        return []

    def _on_missing(self, msg: Missing, now: float) -> list[Action]:
        tree, req, create = msg.tree, msg.req, msg.create
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
        return [*self._send(self.seed, Announce(self.me, tree, self.me), now), *self._tree_known(tree, now)]

    def _on_announce(self, msg: Announce, now: float) -> list[Action]:
        tree = msg.tree
        self.directory[tree] = msg.owner
        self.granted.pop(tree, None)
        self.recent.setdefault(tree, deque(maxlen=self.config.tree_contacts)).append(msg.owner)
        return self._heard(msg.sender, now, directory_changed=True)

    # --- backup seeds (``seed_backups``) ----------------------------------------------------------

    def _heard(self, d: Descriptor, now: float, directory_changed: bool = False) -> list[Action]:
        """Serving as the seed, from ``d``: the backups topped up from the nodes heard from (in
        order), given the directory if it or they changed, and whoever does not know them yet
        told who they are."""
        me = self.stack.node_id
        if not self.config.seed_backups:
            return []
        if d.node_id == me:
            return self._copy_directory(now) if directory_changed else []
        self.seed = self.me  # asked as the seed: any seed before is gone
        self.askers.setdefault(d.node_id, bare(d))
        out: list[Action] = []
        backups = [b for b in self.backup_seeds if b.node_id != me and self._alive(b.node_id, now)]
        taken = {me, *(b.node_id for b in backups)}
        more = (a for k, a in self.askers.items() if k not in taken and self._alive(k, now))
        backups += islice(more, max(0, self.config.seed_backups - len(backups)))
        changed = backups != self.backup_seeds
        if changed:
            self.backup_seeds = backups
            self._backups_version += 1
        if changed or directory_changed:
            out += self._copy_directory(now)
        for a in list(self.askers.values()) if changed else [self.askers[d.node_id]]:
            if self.told.get(a.node_id) != self._backups_version:
                self.told[a.node_id] = self._backups_version
                out += self._send(a, Seeds(self.me, tuple(backups)), now)
        return out

    def _on_hello(self, msg: Hello, now: float) -> list[Action]:
        return self._heard(msg.sender, now)

    def _copy_directory(self, now: float) -> list[Action]:
        """The directory of trees, to every backup seed."""
        if not self.config.seed_backups:
            return []
        trees = sorted(self.directory)
        out: list[Action] = []
        for b in self.backup_seeds:
            out += self._send(b, Directory(self.me, tuple(trees), tuple(self.directory[t] for t in trees),
                                           tuple(self.backup_seeds)), now)
        return out

    def _serving(self) -> bool:
        return self.seed is not None and self.seed.node_id == self.stack.node_id

    def _on_seeds(self, msg: Seeds, now: float) -> list[Action]:
        if self._serving():
            self.counts["stale"] += 1  # from a seed before: this node chooses its own backups
            return []
        self.backup_seeds = list(msg.backups)
        return []

    def _on_directory(self, msg: Directory, now: float) -> list[Action]:
        if self._serving():
            self.counts["stale"] += 1  # serving already: its own directory is newer
            return []
        self.directory = dict(zip(msg.trees, msg.owners))
        self.backup_seeds = list(msg.backups)
        return []

    def _seed_lost(self, now: float) -> list[Action]:
        """The seed is gone: the first live backup serves. The trees this node owns are announced
        to it (an announcement may have gone down with the seed); pending locates are asked
        again, at the next tick for held events, at their timeouts for subscriptions."""
        live = [b for b in self.backup_seeds if self._alive(b.node_id, now)]
        if not live:
            return []
        self.seed = self.me if live[0].node_id == self.stack.node_id else live[0]
        self.locating.clear()
        out: list[Action] = []
        for tree, owner in sorted(self.owners.items()):
            if owner.node_id == self.stack.node_id:
                out += self._send(self.seed, Announce(self.me, tree, self.me), now)
        return out

    def _new_group(self, tree: str, label: Constraint, now: float, parent: GroupRef | None = None,
                   children: Iterable[GroupRef] = ()) -> Membership:
        self._seq += 1
        seq = int(now * 1000) * 1_000_000 + self.stack.node_id
        gid = f"{tree}:{label.canon()}@{self.stack.node_id}.{self._seq}"
        m = Membership(GroupRef(gid, label, seq, self.me), tree, members={} if self.epidemic else {self.stack.node_id: self.me},
                       parent=parent, children={c.gid: c for c in children}, joined=now)
        self.groups[gid] = m
        return m

    def _on_find(self, msg: Find, now: float) -> list[Action]:
        tree, text, gid = msg.tree, msg.text, msg.gid
        subscriber, req, direction = msg.subscriber, msg.req, msg.direction
        label = parse_filter(text, self.config.group_on).labels[tree_attr(tree)]
        mine = [m for m in self.groups.values() if m.tree == tree]
        led = [m for m in mine if self.leads(m)]
        if gid:
            led = [m for m in led if m.gid == gid]
        elif direction == "down" or self.config.traversal == "root":
            led = [m for m in led if isinstance(m.ref.label, Top)]
        if not led:
            if mine and not gid and self.config.traversal == "generic":  # a member passes it to its leader
                return self._send(mine[0].ref.leader, Find(self.me, tree, text, "", subscriber, req, direction), now)
            self.counts["stale"] += 1
            return self._send(subscriber, Retry(self.me, text, req), now)
        g = led[0]
        if direction == "up" and not contains(g.ref.label, label):
            if g.parent is None:
                return self._send(subscriber, Retry(self.me, text, req), now)
            return self._send(self.pick(g.parent), Find(self.me, tree, text, g.parent.gid, subscriber, req, "up"), now)
        if g.blocked_until is not None:
            g.buffered.append((subscriber.node_id, msg))
            self.counts["buffered"] += 1
            return []
        if g.ref.label.canon() == label.canon():
            return self._send(subscriber, SubscribeTo(self.me, text, req, Group.of(self._out(g))), now)
        verdict, child, adopt = decide(list(g.children.values()), label)
        if verdict == "found":
            assert child is not None
            return self._send(subscriber, SubscribeTo(self.me, text, req, Group.of(child)), now)
        if verdict == "descend":
            assert child is not None
            return self._send(self.pick(child), Find(self.me, tree, text, child.gid, subscriber, req, "down"), now)
        g.blocked_until = now + self.config.create_timeout_steps * self.config.step_s
        g.block_req = req
        create = Create(self.me, tree, text, req, Group.of(self._out(g)), opt(g.parent), tuple(Group.of(c) for c in adopt))
        return self._send(subscriber, create, now)

    def _pending(self, text: str, req: int) -> PendingSub | None:
        p = self.subs.get(text)
        if p is None or p.state != "find" or p.req != req:
            self.counts["stale"] += 1
            return None
        return p

    def _on_retry(self, msg: Retry, now: float) -> list[Action]:
        p = self._pending(msg.text, msg.req)
        if p is None:
            return []
        p.req = self._next_req()  # from the root this time
        owner = self.fresh_owner(p.tree, now)
        if owner is None:
            p.state = "locate"
            return self.locate(p.tree, now, create=True)
        return self._send(owner, Find(self.me, p.tree, msg.text, "", self.me, p.req, "down"), now)

    def _on_subscribe_to(self, msg: SubscribeTo, now: float) -> list[Action]:
        text, req, group = msg.text, msg.req, msg.group.ref()
        p = self._pending(text, req)
        if p is None:
            return []
        m = self.groups.get(group.gid)
        if m is not None:  # already in that group for another subscription
            m.subs.add(text)
            p.state, p.gid = "joined", group.gid
            return []
        return self._send(self.pick(group), Join(self.me, group.gid, text, p.req), now)

    def _on_join(self, msg: Join, now: float) -> list[Action]:
        gid, text = msg.gid, msg.text
        m = self.led(gid)
        if m is None:
            self.counts["stale"] += 1
            return self._send(msg.sender, Retry(self.me, text, msg.req), now)
        if not self.epidemic:
            m.members[msg.sender.node_id] = msg.sender
            out = self._send(msg.sender, JoinAck(self.me, m.tree, text, msg.req, Group.of(m.ref), None, (), ()), now)
            return out + self._changed(m, now)
        group = Group.of(self._out(m))
        ack = JoinAck(self.me, m.tree, text, msg.req, group, opt(m.parent), tuple(Group.of(c) for c in m.children.values()),
                      tuple(self._sample(m, self.config.view_size)))
        self._add_member(m, msg.sender)
        return self._send(msg.sender, ack, now) + self._rumor(m, RumorAdd(self.me, msg.sender), now, subject=msg.sender)

    def _on_join_ack(self, msg: JoinAck, now: float) -> list[Action]:
        tree, text, req, group, parent = msg.tree, msg.text, msg.req, msg.group.ref(), ref_or_none(msg.parent)
        children, sample = [c.ref() for c in msg.children], msg.sample
        p = self._pending(text, req)
        if p is None:
            return []
        m = self.groups.get(group.gid)
        if m is None:
            m = self.groups[group.gid] = Membership(group, tree, heard=now, joined=now)
            if self.epidemic:
                m.ref = GroupRef(group.gid, group.label, group.seq, self.me)
                m.parent, m.children = parent, {c.gid: c for c in children}
                for d in [*group.contacts, *sample]:
                    self._add_member(m, d)
        m.subs.add(text)
        p.state, p.gid = "joined", group.gid
        return []

    def _on_create(self, msg: Create, now: float) -> list[Action]:
        tree, text, req, parent = msg.tree, msg.text, msg.req, msg.parent.ref()
        grandparent, adopted = ref_or_none(msg.grandparent), [c.ref() for c in msg.adopted]
        p = self._pending(text, req)
        if p is None:
            return []
        m = self._new_group(tree, p.label, now, parent, adopted)
        m.grandparent = grandparent
        m.subs.add(text)
        p.state, p.gid = "joined", m.gid
        out = self._send(msg.sender, Created(self.me, parent.gid, req, Group.of(self._out(m)), tuple(c.gid for c in adopted)), now)
        for c in adopted:
            out += self._send(self.pick(c), PredChanged(self.me, c.gid, Group.of(self._out(m)), opt(parent)), now)
        return out

    def _on_created(self, msg: Created, now: float) -> list[Action]:
        parent_gid, req, new, adopted = msg.parent_gid, msg.req, msg.new.ref(), msg.adopted
        m = self.led(parent_gid)
        if m is None:
            self.counts["stale"] += 1
            return []
        for a in adopted:
            m.children.pop(a, None)
            m.grandchildren.pop(a, None)
        m.children[new.gid] = new
        out = self._unblock(m, now) if m.block_req == req else []
        if self.epidemic:
            return out + self._rumor(m, RumorSucc(self.me, adopted, Group.of(new)), now)
        return out + self._changed(m, now)

    def _on_pred_changed(self, msg: PredChanged, now: float) -> list[Action]:
        gid, parent, grandparent = msg.gid, msg.parent.ref(), ref_or_none(msg.grandparent)
        m = self.led(gid)
        if m is None:
            self.counts["stale"] += 1
            return []
        m.parent, m.grandparent = parent, grandparent
        if self.epidemic:
            return self._rumor(m, RumorPred(self.me, Group.of(parent), opt(grandparent)), now)
        return self._changed(m, now)

    def _on_leave(self, msg: Leave, now: float) -> list[Action]:
        m = None if self.epidemic else self.led(msg.gid)
        if m is not None and msg.sender.node_id != self.stack.node_id:
            m.members.pop(msg.sender.node_id, None)
            return self._changed(m, now)
        return []

    def _unblock(self, m: Membership, now: float) -> list[Action]:
        m.blocked_until = None
        held, m.buffered = m.buffered, []
        out: list[Action] = []
        for src, msg in held:
            if isinstance(msg, EventMsg):
                out += self.route.forward_in(m, msg, src, now)
            else:
                out += self._handle(msg, now)
        return out

    # --- co-leaders -----------------------------------------------------------------------------

    def _changed(self, m: Membership, now: float) -> list[Action]:
        """After a change of a led group: its co-leaders filled (``_fill``) and sent the
        leader's state (spec GROUP_STATE_SYNC)."""
        if self.epidemic:
            return []
        out = self._announce(m, now) if self._fill(m, now) else []
        state = Sync(self.me, m.tree, Group.of(m.ref), opt(m.parent), opt(m.grandparent),
                     tuple(Group.of(c) for c in m.children.values()), tuple(m.members.values()))
        for d in m.ref.backups:
            out += self._send(d, state, now)
        return out

    def _fill(self, m: Membership, now: float) -> bool:
        """Whether the co-leaders of led group ``m`` changed: the suspected ones dropped, then
        filled up to ``co_leaders`` from its members in join order (a root group: from its
        children's leaders and co-leaders too, as routers)."""
        backups = [d for d in m.ref.backups if self._alive(d.node_id, now)]
        taken = {self.stack.node_id, *(d.node_id for d in backups)}
        pool = [d for d in m.members.values() if d.node_id not in taken]
        if isinstance(m.ref.label, Top):
            pool += [d for c in m.children.values() for d in c.contacts if d.node_id not in taken]
        fresh = [d for d in pool if self._alive(d.node_id, now)][:max(0, self.config.co_leaders - len(backups))]
        if not fresh and len(backups) == len(m.ref.backups):
            return False
        self.counts["promoted"] += len(fresh)
        m.ref = GroupRef(m.gid, m.ref.label, m.ref.seq, m.ref.leader, tuple(backups + fresh), m.ref.epoch)
        return True

    def _announce(self, m: Membership, now: float) -> list[Action]:
        """The group's leader and co-leaders, to its members and neighbouring groups (spec
        LEADER_CHANGE); a root group's new leader is the tree's owner at the seed too."""
        out: list[Action] = []
        msg = Leader(self.me, Group.of(m.ref))
        to = {d.node_id: d for d in m.members.values()}
        for r in [m.parent, *m.children.values()]:
            if r is not None:
                to[r.leader.node_id] = r.leader
        for d in to.values():  # this node too, where it leads a neighbouring group
            out += self._send(d, msg, now)
        if isinstance(m.ref.label, Top) and self.owners.get(m.tree) != self.me and self.leads(m):
            self.owners[m.tree] = self.me
            assert self.seed is not None
            out += self._send(self.seed, Announce(self.me, m.tree, self.me), now)
        return out

    def _on_sync(self, msg: Sync, now: float) -> list[Action]:
        tree, ref, parent, grandparent = msg.tree, msg.group.ref(), ref_or_none(msg.parent), ref_or_none(msg.grandparent)
        children, members = [c.ref() for c in msg.children], msg.members
        m = self.groups.get(ref.gid)
        if self.epidemic:  # an invitation into a root group, as a router
            if m is None:
                m = self.groups[ref.gid] = Membership(GroupRef(ref.gid, ref.label, ref.seq, self.me), tree, heard=now)
            for c in children:
                m.children.setdefault(c.gid, c)
            for d in members:
                self._add_member(m, d)
            return []
        if m is not None and ref.epoch < m.ref.epoch:
            self.counts["stale"] += 1
            return []
        if m is None:
            m = self.groups[ref.gid] = Membership(ref, tree, heard=now)  # a router of a root group
        m.ref, m.parent, m.grandparent = ref, parent, grandparent
        m.children = {c.gid: c for c in children}
        m.members = {d.node_id: d for d in members}
        m.heard = now
        return []

    def _on_leader(self, msg: Leader, now: float) -> list[Action]:
        return self._learn(msg.group.ref(), now)

    def _learn(self, ref: GroupRef, now: float) -> list[Action]:
        """A group's leader and co-leaders as of ``ref.epoch``: wherever this node refers to
        that group (an older epoch is ignored); epidemic: fresh contacts of a neighbouring group."""
        if self.epidemic:
            k = self.config.group_contacts
            for m in self.groups.values():
                if m.parent is not None and m.parent.gid == ref.gid:
                    m.parent = merged(m.parent, ref, k)
                if ref.gid in m.children:
                    m.children[ref.gid] = merged(m.children[ref.gid], ref, k)
            return []
        out: list[Action] = []
        for m in list(self.groups.values()):
            if m.gid == ref.gid and (ref.epoch > m.ref.epoch or ref.epoch == m.ref.epoch and not self.leads(m)):
                was_leading = self.leads(m)
                m.ref = GroupRef(m.gid, m.ref.label, m.ref.seq, ref.leader, ref.backups, ref.epoch)
                m.heard = now
                if was_leading and not self.leads(m):  # a takeover while this node was thought gone
                    out += self._changed_hands(m)
                if isinstance(m.ref.label, Top):
                    self.owners[m.tree], self.owner_heard[m.tree] = ref.leader, now
            changed = False
            if m.parent is not None and m.parent.gid == ref.gid and ref.epoch >= m.parent.epoch and m.parent.contacts != ref.contacts:
                m.parent = GroupRef(ref.gid, m.parent.label, m.parent.seq, ref.leader, ref.backups, ref.epoch)
                changed = True
            c = m.children.get(ref.gid)
            if c is not None and ref.epoch >= c.epoch and c.contacts != ref.contacts:
                m.children[ref.gid] = GroupRef(ref.gid, c.label, c.seq, ref.leader, ref.backups, ref.epoch)
                changed = True
            if changed and self.leads(m):
                out += self._changed(m, now)  # the co-leaders' replicas (a root's router may come from a child's co-leaders)
        return out

    def _changed_hands(self, m: Membership) -> list[Action]:
        """This node led ``m`` and another took over: it stays a member if it subscribed here."""
        if not m.subs and not self.backs(m):
            del self.groups[m.gid]
        return []

    # --- failure detection and self-healing (spec §4.7.1) ---------------------------------------

    def _probe(self, now: float) -> list[Action]:
        """Leaders probe their co-leaders and neighbouring groups' leaders (asking a child for
        its children, the parent for its parent); co-leaders probe their leader; a member that
        has heard nothing for ``silence_steps`` probes its leader. A probe that cannot be sent
        is a suspicion (``on_send_failed``)."""
        out = self._silent(now)
        for tree in sorted(self.published_into):
            owner = self.owners.get(tree)
            if owner is not None and owner.node_id != self.stack.node_id:
                out += self._ping(owner, Ping(self.me, "", False, ()), now)
        self.published_into.clear()
        if self.epidemic:
            return out + self._gossip_views(now)
        silence = self.config.silence_steps * self.config.step_s
        for m in list(self.groups.values()):
            if self.leads(m):
                if len(m.ref.backups) < self.config.co_leaders:
                    out += self._changed(m, now)
                for d in m.ref.backups:
                    out += self._ping(d, Ping(self.me, m.gid, False, ()), now)
                if m.parent is not None:
                    out += self._ping(m.parent.leader, Ping(self.me, m.parent.gid, False, (m.gid,)), now)
                elif not isinstance(m.ref.label, Top):
                    out += self._reattach(m, now)
                for c in m.children.values():
                    out += self._ping(c.leader, Ping(self.me, c.gid, True, ()), now)
            elif self.backs(m) or now - m.heard >= silence:
                m.heard = max(m.heard, now - silence / 2)
                out += self._ping(m.ref.leader, Ping(self.me, m.gid, False, ()), now)
        return out

    def _ping(self, dst: Descriptor, msg: Ping | Shuffle, now: float) -> list[Action]:
        """A message that asks for an answer (a probe, a shuffle), counted until ``dst`` is
        heard from (``_silent``)."""
        if dst.node_id != self.stack.node_id:
            self.unanswered.setdefault(dst.node_id, self.rounds)
        return self._send(dst, msg, now)

    def _silent(self, now: float) -> list[Action]:
        """Heartbeat detection: the nodes probed ``probe_misses`` rounds running without a word
        back are suspected, as a failed send would make them."""
        self.rounds += 1
        misses = self.config.probe_misses
        silent = sorted(n for n, first in self.unanswered.items() if misses and self.rounds - first >= misses)
        out: list[Action] = []
        for dead in silent:
            out += self.suspect(dead, now)
        return out

    def _on_ping(self, msg: Ping, now: float) -> list[Action]:
        """A probe of group ``gid``; from a child group, naming it (``child``): the answer says
        whether this node lists it, so that a child its parent lost track of reattaches."""
        gid, want_children = msg.gid, msg.want_children
        child = msg.child[0] if msg.child else ""
        m = self.groups.get(gid)
        if m is None:
            return self._send(msg.sender, Pong(self.me, gid, child, None), now)
        state = PongState(Group.of(self._out(m)), opt(m.parent),
                          tuple(Group.of(c) for c in m.children.values()) if want_children else (),
                          not child or not self.leads(m) or child in m.children)
        return self._send(msg.sender, Pong(self.me, gid, child, state), now)

    def _on_pong(self, msg: Pong, now: float) -> list[Action]:
        gid, child, state = msg.gid, msg.child, msg.state
        if state is None:
            if gid:  # a publisher's probe of a root names no group
                self.counts["stale"] += 1
            return []
        ref, parent, children, listed = state.group.ref(), ref_or_none(state.parent), [c.ref() for c in state.children], state.listed
        out = self._learn(ref, now)
        mine = self.led(child) if child else None
        if not listed and mine is not None and mine.parent is not None and mine.parent.gid == gid:
            out += self._send(msg.sender, Reattach(self.me, mine.tree, gid, Group.of(self._out(mine))), now)
        for m in self.groups.values():
            if m.gid == gid:
                m.heard = now
            if m.parent is not None and m.parent.gid == gid:
                m.grandparent = parent
            if gid in m.children:
                m.grandchildren[gid] = children
        return out

    def on_send_failed(self, dst: NodeId, msg: Message, now: float) -> list[Action]:
        return self.suspect(dst, now)

    def suspect(self, dead: NodeId, now: float) -> list[Action]:
        """A send to ``dead`` failed: every group that refers to it is repaired. A lost
        request is retried at its subscription's timeout."""
        for tree, owner in list(self.owners.items()):
            if owner.node_id == dead and not any(m.tree == tree and isinstance(m.ref.label, Top) for m in self.groups.values()):
                del self.owners[tree]  # located again at the next publication or retry
        if self._alive(dead, now):
            self.counts["suspected"] += 1
        self.suspected[dead] = now
        self.unanswered.pop(dead, None)
        out = self._seed_lost(now) if self.seed is not None and self.seed.node_id == dead else []
        if self.epidemic:
            return out + self._suspect_epidemic(dead, now)
        # the repairs below are no-ops where done already
        for m in list(self.groups.values()):
            if self.leads(m):
                changed = m.members.pop(dead, None) is not None or any(d.node_id == dead for d in m.ref.backups)
                if m.parent is not None and dead in {d.node_id for d in m.parent.contacts}:
                    out += self._parent_lost(m, dead, now)
                for c in [c for c in m.children.values() if dead in {d.node_id for d in c.contacts}]:
                    out += self._child_lost(m, c, dead, now)
                if changed:
                    out += self._changed(m, now)
            elif m.ref.leader.node_id == dead:
                out += self._leader_lost(m, now)
            elif any(d.node_id == dead for d in m.ref.backups):
                m.ref = without(m.ref, dead)
        return out

    def _leader_lost(self, m: Membership, now: float) -> list[Action]:
        """The group's leader is gone: the first live co-leader takes over (told so if it is
        not this node); a member of a group with no co-leader left subscribes again."""
        ref = without(m.ref, m.ref.leader.node_id)
        live = [d for d in ref.backups if self._alive(d.node_id, now)]
        if not live:
            self.counts["resubscribed"] += len(m.subs)
            del self.groups[m.gid]
            out: list[Action] = []
            for text in sorted(m.subs):
                p = self.subs.get(text)
                if p is not None:
                    out += self._start(text, p, now)
            return out
        if live[0].node_id == self.stack.node_id:
            return self.take_over(m, now)
        m.ref = GroupRef(ref.gid, ref.label, ref.seq, live[0], tuple(live[1:]), ref.epoch)
        return self._send(live[0], Takeover(self.me, m.gid, ref.epoch), now)

    def take_over(self, m: Membership, now: float) -> list[Action]:
        """This co-leader leads ``m`` from now on, with the next epoch (spec §4.7.1 step 1)."""
        self.counts["takeovers"] += 1
        old = m.ref.leader.node_id
        m.members.pop(old, None)
        if m.subs:
            m.members.setdefault(self.stack.node_id, self.me)
        rest = tuple(d for d in m.ref.backups if d.node_id not in (self.stack.node_id, old))
        m.ref = GroupRef(m.gid, m.ref.label, m.ref.seq, self.me, rest, m.ref.epoch + 1)
        return [*self._announce(m, now), *self._changed(m, now)]

    def _on_takeover(self, msg: Takeover, now: float) -> list[Action]:
        """A neighbour found this group's leader gone: a co-leader takes over (trusting it:
        crash-stop; a leader wrongly suspected steps down on the higher epoch)."""
        m = self.groups.get(msg.gid)
        if m is None or not self.backs(m) or m.ref.epoch > msg.epoch:
            if m is not None:
                return self._send(msg.sender, Leader(self.me, Group.of(m.ref)), now)
            self.counts["stale"] += 1
            return []
        return self.suspect(m.ref.leader.node_id, now)

    def _parent_lost(self, m: Membership, dead: NodeId, now: float) -> list[Action]:
        """A contact of the parent group is gone: its co-leader stands in, or, with the whole
        group gone, ``m`` reattaches to its grandparent (spec §4.7.1 step 4)."""
        assert m.parent is not None
        m.parent, stood_in = self._stand_in(m.parent, dead, now)
        if m.parent is None:
            return self._reattach(m, now)
        return self._takeover(m.parent, now) if stood_in else []

    def _stand_in(self, r: GroupRef, dead: NodeId, now: float) -> tuple[GroupRef | None, bool]:
        """Neighbouring group ``r`` without ``dead``, and whether its first live co-leader now
        stands in for a dead leader (to be told, ``_takeover``, once the ref is stored); None
        when no contact is left."""
        r = without(r, dead)
        if r.leader.node_id != dead:
            return r, False
        live = [d for d in r.backups if self._alive(d.node_id, now)]
        return (with_contacts(r, live), True) if live else (None, False)

    def _takeover(self, r: GroupRef, now: float) -> list[Action]:
        return self._send(r.leader, Takeover(self.me, r.gid, r.epoch), now)

    def _reattach(self, m: Membership, now: float) -> list[Action]:
        """An orphaned group asks its grandparent, else the tree's root, to take it as a child
        (repeated at each probe until a PRED_CHANGED answers)."""
        gp = m.grandparent
        live = [d for d in gp.contacts if self._alive(d.node_id, now)] if gp is not None else []
        to = self.rng.choice(live) if live else self.owners.get(m.tree)
        if to is None:
            return self.locate(m.tree, now, create=False)
        if to.node_id == self.stack.node_id:
            return []
        gid = gp.gid if gp is not None and to in gp.contacts else ""
        return self._send(to, Reattach(self.me, m.tree, gid, Group.of(self._out(m))), now)

    def _on_reattach(self, msg: Reattach, now: float) -> list[Action]:
        tree, gid, child = msg.tree, msg.gid, msg.child.ref()
        m = self.led(gid) if gid else next((g for g in self.groups.values() if g.tree == tree and self.leads(g)
                                              and isinstance(g.ref.label, Top)), None)
        if m is None or not contains(m.ref.label, child.label) or m.ref.label.canon() == child.label.canon():
            self.counts["stale"] += 1
            return []
        self.counts["reattached"] += 1
        m.children[child.gid] = child
        out = self._send(self.pick(child), PredChanged(self.me, child.gid, Group.of(self._out(m)), opt(m.parent)), now)
        return out + (self._rumor(m, RumorSucc(self.me, (), Group.of(child)), now) if self.epidemic else self._changed(m, now))

    def _child_lost(self, m: Membership, c: GroupRef, dead: NodeId, now: float) -> list[Action]:
        """A contact of child group ``c`` is gone: its co-leader stands in, or, with the whole
        group gone, its children become ``m``'s (spec §4.7.1 step 3)."""
        c2, stood_in = self._stand_in(c, dead, now)
        if c2 is not None:
            m.children[c.gid] = c2
            return self._takeover(c2, now) if stood_in else []
        return self._adopt(m, c, now) + self._changed(m, now)

    def _adopt(self, m: Membership, c: GroupRef, now: float) -> list[Action]:
        """Child group ``c`` of ``m`` is gone: its children become ``m``'s."""
        del m.children[c.gid]
        out: list[Action] = []
        for g in m.grandchildren.pop(c.gid, []):
            if g.gid not in m.children and self._alive(g.leader.node_id, now):
                self.counts["adopted"] += 1
                m.children[g.gid] = g
                out += self._send(self.pick(g), PredChanged(self.me, g.gid, Group.of(self._out(m)), opt(m.parent)), now)
                if self.epidemic:
                    out += self._rumor(m, RumorSucc(self.me, (c.gid,), Group.of(g)), now)
        return out

    # --- epidemic maintenance (spec §4.6.4, §4.7.2) ----------------------------------------------

    def _add_member(self, m: Membership, d: Descriptor) -> None:
        """``d`` into the groupview of ``m``, a random entry evicted if it is full."""
        if d.node_id == self.stack.node_id or d.node_id in m.members or not self._alive(d.node_id, self.stack.now):
            return
        if len(m.members) >= self.config.view_size:
            del m.members[self.rng.choice(sorted(m.members))]
        m.members[d.node_id] = bare(d)

    def _sample(self, m: Membership, k: int) -> list[Descriptor]:
        return self.rng.sample(sorted(m.members.values(), key=lambda d: d.node_id), min(k, len(m.members)))

    def _gossip_views(self, now: float) -> list[Action]:
        """Every member: a shuffle of groupview samples with a random member, a probe of one
        contact of the parent group (which answers with its parent) and of each child group
        (with its children: the distance-2 entries), a root short of replicas inviting its
        children's contacts as routers, an orphaned group reattaching."""
        out: list[Action] = []
        for m in list(self.groups.values()):
            if m.members:
                partner = self.rng.choice(sorted(m.members.values(), key=lambda d: d.node_id))
                sample = (self.me, *self._sample(m, self.config.view_size // 2 - 1))
                out += self._ping(partner, self.route.digest(m, now, False, sample), now)
            if m.parent is not None:
                out += self._ping(self.pick(m.parent), Ping(self.me, m.parent.gid, False, (m.gid,)), now)
            elif not isinstance(m.ref.label, Top):
                out += self._reattach(m, now)
            for c in list(m.children.values()):
                out += self._ping(self.pick(c), Ping(self.me, c.gid, True, ()), now)
            if isinstance(m.ref.label, Top) and len(m.members) < self.config.root_replicas - 1:
                pool = {d.node_id: d for c in m.children.values() for d in c.contacts
                        if d.node_id != self.stack.node_id and d.node_id not in m.members and self._alive(d.node_id, now)}
                for d in sorted(pool.values(), key=lambda d: d.node_id)[:self.config.root_replicas - 1 - len(m.members)]:
                    self.counts["promoted"] += 1
                    self._add_member(m, d)
                    invite = Sync(self.me, m.tree, Group.of(self._out(m)), None, None,
                                  tuple(Group.of(c) for c in m.children.values()), (self.me, *m.members.values()))
                    out += self._send(d, invite, now)
        return out

    def _on_shuffle(self, msg: Shuffle, now: float) -> list[Action]:
        m = self.groups.get(msg.gid)
        if m is None or not self.epidemic:
            self.counts["stale"] += 1
            return []
        out = self.route.repair(m, msg, now)
        if not msg.reply:  # a request: answered with a sample taken before the merge
            reply = self.route.digest(m, now, True, tuple(self._sample(m, self.config.view_size // 2)))
            out += self._send(msg.sender, reply, now)
        for d in msg.sample:
            self._add_member(m, d)
        return out

    def _rumor(self, m: Membership, change: RumorAdd | RumorRemove | RumorSucc | RumorPred, now: float,
               subject: Descriptor | None = None) -> list[Action]:
        """A membership change of group ``m`` gossiped to ``sub_fanout`` members (spec
        GOSSIP_SUB): ``add``/``remove`` a member (``subject``), ``succ`` (a new child and the
        children it adopted), ``pred`` (a new parent)."""
        self._seq += 1
        uid = f"{self.stack.node_id}.{self._seq}"
        self._seen_rumor(uid, 1)
        return self._spread(m, Rumor.of(self.me, m.gid, uid, change), now, exclude=subject.node_id if subject is not None else None)

    def _spread(self, m: Membership, msg: Rumor, now: float, exclude: NodeId | None) -> list[Action]:
        pool = sorted((d for d in m.members.values() if d.node_id != exclude), key=lambda d: d.node_id)
        out: list[Action] = []
        for d in self.rng.sample(pool, min(self.config.sub_fanout, len(pool))):
            out += self._send(d, msg, now)
        return out

    def _seen_rumor(self, uid: str, forwards: int) -> None:
        self.rumors[uid] = forwards
        self.rumors.move_to_end(uid)
        if len(self.rumors) > 10_000:
            self.rumors.popitem(last=False)

    def _on_rumor(self, msg: Rumor, now: float) -> list[Action]:
        gid, uid, change = msg.gid, msg.uid, msg.payload()
        m = self.groups.get(gid)
        if m is None or not self.epidemic:
            self.counts["stale"] += 1
            return []
        c = self.rumors.get(uid)
        if c is None:
            c = 0
            if isinstance(change, RumorAdd):
                self._add_member(m, change.subject)
            elif isinstance(change, RumorRemove):
                m.members.pop(change.subject.node_id, None)
            elif isinstance(change, RumorSucc):
                for gone in change.adopted:
                    m.children.pop(gone, None)
                    m.grandchildren.pop(gone, None)
                new = change.new.ref()
                if contains(m.ref.label, new.label) and new.label.canon() != m.ref.label.canon():
                    m.children[new.gid] = merged(m.children.get(new.gid), new, self.config.group_contacts)
            else:
                m.parent, m.grandparent = change.parent.ref(), ref_or_none(change.grandparent)
        if c >= self.config.max_forwards or self.rng.random() >= self.config.p0 / (1 + c):
            self._seen_rumor(uid, c)
            return []
        self._seen_rumor(uid, c + 1)
        return self._spread(m, dataclasses.replace(msg, sender=self.me), now, exclude=msg.sender.node_id)

    def _suspect_epidemic(self, dead: NodeId, now: float) -> list[Action]:
        """A dead entry leaves every view; a neighbouring group with no contact left is bridged
        as in the leader-based variant (spec §4.7.2); a root member that finds the tree's owner
        gone announces itself to the seed."""
        out: list[Action] = []
        for m in list(self.groups.values()):
            m.members.pop(dead, None)
            if m.parent is not None and dead in {d.node_id for d in m.parent.contacts}:
                rest = [d for d in m.parent.contacts if d.node_id != dead]
                m.parent = with_contacts(m.parent, rest) if rest else None
                if not rest:
                    out += self._reattach(m, now)
            for c in [c for c in m.children.values() if dead in {d.node_id for d in c.contacts}]:
                rest = [d for d in c.contacts if d.node_id != dead]
                if rest:
                    m.children[c.gid] = with_contacts(c, rest)
                else:
                    out += self._adopt(m, c, now)
            owner = self.owners.get(m.tree)
            if isinstance(m.ref.label, Top) and (owner is None or owner.node_id == dead):
                self.owners[m.tree] = self.me
                assert self.seed is not None
                out += self._send(self.seed, Announce(self.me, m.tree, self.me), now)
        return out

    # --- introspection --------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        led = [m for m in self.groups.values() if self.leads(m)]
        return {**self.counts, "groups_led": len(led), "roots_led": sum(isinstance(m.ref.label, Top) for m in led),
                "members_led": sum(len(m.members) - 1 for m in led),
                "co_leading": sum(self.backs(m) for m in self.groups.values())}

    def links(self) -> set[NodeId]:
        out: set[NodeId] = set()
        for m in self.groups.values():
            out.update(d.node_id for d in m.ref.contacts)
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
            if not self.epidemic and self.leads(m) and m.subs and me not in m.members:
                raise LocalProtocolError(f"node {me} leads {m.gid} but is not among its members")
            if any(d.node_id == m.ref.leader.node_id for d in m.ref.backups):
                raise LocalProtocolError(f"{m.gid}: its leader is among its co-leaders")
            for c in m.children.values():
                if not contains(m.ref.label, c.label) or c.label.canon() == m.ref.label.canon():
                    raise LocalProtocolError(f"child {c.gid} of {m.gid}: label not properly contained")


_HANDLERS: MappingProxyType[type, Callable[[Dps, Any, float], list[Action]]] = MappingProxyType({
    Locate: Dps._on_locate, Found: Dps._on_found, Wait: Dps._on_wait, Missing: Dps._on_missing,
    Announce: Dps._on_announce, Find: Dps._on_find, Retry: Dps._on_retry,
    SubscribeTo: Dps._on_subscribe_to, Join: Dps._on_join, JoinAck: Dps._on_join_ack,
    Create: Dps._on_create, Created: Dps._on_created, PredChanged: Dps._on_pred_changed,
    Leave: Dps._on_leave, Sync: Dps._on_sync, Leader: Dps._on_leader, Ping: Dps._on_ping,
    Pong: Dps._on_pong, Takeover: Dps._on_takeover, Reattach: Dps._on_reattach,
    Shuffle: Dps._on_shuffle, Rumor: Dps._on_rumor, Seeds: Dps._on_seeds, Directory: Dps._on_directory,
    Hello: Dps._on_hello,
})


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
