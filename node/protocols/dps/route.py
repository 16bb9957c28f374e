"""DPS's publication routing over the groups (spec ../shared/design/protocols/dps.md §4.4.2,
§4.5, §4.6.3): where a node sends an event it publishes or first receives, leader-based or
epidemic, and where a copy that could not be delivered goes instead."""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Protocol

from node.kit.stack import Dissemination
from node.kit.types import Action, Descriptor, EventMsg, LocalProtocolError, NodeId, RemoteProtocolError, Send, Topic
from node.protocols.dps.config import DpsConfig
from node.protocols.dps.content import Value, matches, parse_event, value_type
from node.protocols.dps.groups import GroupRef, Membership, PendingSub, tree_attr, tree_key
from node.protocols.dps.messages import Shuffle


class GroupState(Protocol):
    """What routing reads of the DPS layer (:class:`node.protocols.dps.protocol.Dps`)."""

    counts: dict[str, int]
    epidemic: bool
    groups: dict[str, Membership]
    held: dict[str, list[EventMsg]]
    owners: dict[str, Descriptor]
    published_into: set[str]
    rng: random.Random
    subs: dict[str, PendingSub]

    @property
    def me(self) -> Descriptor: ...
    def leads(self, m: Membership) -> bool: ...
    def led(self, gid: str) -> Membership | None: ...
    def pick(self, r: GroupRef) -> Descriptor: ...
    def locate(self, tree: str, now: float, create: bool) -> list[Action]: ...
    def fresh_owner(self, tree: str, now: float) -> Descriptor | None: ...
    def suspect(self, dead: NodeId, now: float) -> list[Action]: ...


class DpsRoute(Dissemination):
    """Publication routing over the groups (spec §4.4.2, §4.5, §4.6.3)."""

    name = "dps-route"
    later_events = 1024
    """Events held for their tree's location, buffered at a blocked group, sent again after a
    failed send or by the epidemic repair leave under this node's span of the event: of its
    latest 1,024 (instrumentation, not protocol)."""

    def __init__(self, layer: GroupState, config: DpsConfig) -> None:
        self.layer, self.config = layer, config
        self._parsed: OrderedDict[str, dict[str, Value]] = OrderedDict()
        self.forwards: OrderedDict[tuple[str, str], int] = OrderedDict()
        """Epidemic: how often this node gossiped each event inside each group."""
        self.recent: OrderedDict[str, tuple[EventMsg, float]] = OrderedDict()
        """Epidemic repair: the events this node published or received over the repair window,
        with when (first copies, in arrival order)."""

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
        if self.config.repair_window_steps and layer.epidemic:
            self._remember(event)
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
                root = layer.fresh_owner(tree, self.stack.now)
                if root is None:  # located again first: the root's copy goes at the answer
                    layer.held.setdefault(tree, []).append(event)
                else:
                    out[root.node_id] = root
                    layer.published_into.add(tree)
                for m in mine:  # the root's copy would come back to a group led here as a duplicate
                    if layer.leads(m):
                        out.update((d.node_id, d) for d in self._route(m, v, event, True, None, seen))
                continue
            led = sorted((m for m in mine if layer.leads(m)), key=lambda m: m.gid)
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
        layer = self.layer
        if m.ref.leader.node_id == sender:
            m.heard = self.stack.now
        if not layer.leads(m):
            return []  # a member (a stand-in is told to take over before a copy is sent to it)
        # a neighbouring group's copy comes from its leader, or an acting co-leader (epidemic: any
        # contact); a leader-based publisher routes only the groups it leads
        own = not layer.epidemic and sender == event.publisher

        def via(r: GroupRef) -> bool:
            return sender == r.leader.node_id if own else any(d.node_id == sender for d in r.contacts)

        from_parent = m.parent is not None and via(m.parent)
        child = next((c.gid for c in m.children.values() if via(c)), None)
        if not from_parent and child is None:
            if sender in m.members and layer.epidemic:  # gossip inside the group: no further (ENTRY_ONLY)
                return self._gossip(m, v, event, sender)
            from_parent = sender not in m.members
        return self._route(m, v, event, from_parent, child, seen, sender)

    def _gossip(self, m: Membership, v: Value, event: EventMsg, sender: NodeId | None) -> list[Descriptor]:
        """Epidemic: ``fanout`` random members of ``m``, if its label matches, unless this node
        loses interest: it gossips a copy after c earlier forwards with probability p0 / (1 + c)."""
        if not matches(m.ref.label, v):
            return []
        key = (event.event_id, m.gid)
        c = self.forwards.get(key, 0)
        if c >= self.config.max_forwards or self.layer.rng.random() >= self.config.p0 / (1 + c):
            return []
        self.forwards[key] = c + 1
        self.forwards.move_to_end(key)
        if len(self.forwards) > self.config.seen_capacity:
            self.forwards.popitem(last=False)
        pool = sorted(d for d in m.members if d not in (sender, event.publisher))
        return [m.members[d] for d in self.layer.rng.sample(pool, min(self.config.fanout, len(pool)))]

    def duplicate_targets(self, event: EventMsg, sender: NodeId) -> list[Descriptor]:
        if not self.layer.epidemic:
            return []
        out: dict[NodeId, Descriptor] = {}
        for name, v in self.attrs(event).items():
            tree = tree_key(name, value_type(v))
            for m in self.layer.groups.values():
                if m.tree == tree and sender in m.members:
                    out.update((d.node_id, d) for d in self._gossip(m, v, event, sender))
        out.pop(sender, None)
        return list(out.values())

    def _next(self, r: GroupRef, n: int) -> list[Descriptor]:
        """Who in group ``r`` gets a copy from a neighbouring group: its leader, or (epidemic)
        ``n`` of its contacts."""
        if not self.layer.epidemic:
            return [r.leader]
        return self.layer.rng.sample(list(r.contacts), min(n, len(r.contacts)))

    def _route(self, m: Membership, v: Value, event: EventMsg, from_parent: bool, from_child: str | None,
               seen: set[str], sender: NodeId | None = None) -> list[Descriptor]:
        """Where group ``m`` sends the event: its members and matching children if its label
        matches, and up to its parent (generic, unless it came from there). A neighbouring
        group led by this node too is routed here at once."""
        if m.gid in seen:
            return []
        seen.add(m.gid)
        layer, me = self.layer, self.stack.node_id
        if not layer.leads(m):  # a member passes its own publication to its leader
            return [m.ref.leader]
        if m.blocked_until is not None:
            m.buffered.append((sender if sender is not None else me, event))
            layer.counts["buffered"] += 1
            return []
        out: list[Descriptor] = []
        fan = self.config.next_fanout if sender is None or sender == event.publisher else 1  # the tree-entry node: k'
        if matches(m.ref.label, v):
            if layer.epidemic:
                out += self._gossip(m, v, event, sender)
            else:
                out += [d for d in m.members.values() if d.node_id != event.publisher]
            for c in m.children.values():
                if c.gid != from_child and (matches(c.label, v) or not self.config.parent_side_filter):
                    led = layer.led(c.gid)
                    out += self._route(led, v, event, True, None, seen) if led is not None else self._next(c, fan)
        if self.config.traversal == "generic" and not from_parent and m.parent is not None:
            led = layer.led(m.parent.gid)
            out += self._route(led, v, event, False, m.gid, seen) if led is not None else self._next(m.parent, fan)
        return out

    # --- epidemic repair (``repair_window_steps``) ------------------------------------------------

    def _remember(self, event: EventMsg) -> None:
        now = self.stack.now
        self.recent[event.event_id] = (event, now)
        horizon = now - self.config.repair_window_steps * self.config.step_s
        while next(iter(self.recent.values()))[1] < horizon:
            self.recent.popitem(last=False)

    def _in_window(self, m: Membership, now: float) -> list[tuple[EventMsg, float]]:
        """The events seen over the repair window whose value on ``m``'s tree matches its label."""
        horizon = now - self.config.repair_window_steps * self.config.step_s
        name, kind = tree_attr(m.tree)
        out = []
        for event, t in self.recent.values():
            v = self.attrs(event).get(name)
            if t >= horizon and v is not None and value_type(v) == kind and matches(m.ref.label, v):
                out.append((event, t))
        return out

    def digest(self, m: Membership, now: float, reply: bool, sample: tuple[Descriptor, ...]) -> Shuffle:
        """A shuffle of group ``m`` with a groupview ``sample``: with repair on, the ids of the
        events seen in it over the window and how long (ms) this node has been a member."""
        me = self.layer.me
        if not self.config.repair_window_steps:
            return Shuffle(me, m.gid, reply, (), (), sample)
        ids = tuple(e.event_id for e, _ in self._in_window(m, now))
        return Shuffle(me, m.gid, reply, ids, (int(1000 * (now - m.joined)),), sample)

    def repair(self, m: Membership, shuffle: Shuffle, now: float) -> list[Action]:
        """The events of group ``m`` seen here at least a step ago, since the shuffle's sender
        joined, that its digest does not list: sent to it."""
        if not self.config.repair_window_steps or not shuffle.member_ms:
            return []
        have, since = set(shuffle.ids), now - shuffle.member_ms[0] / 1000
        late = [e for e, t in self._in_window(m, now)
                if e.event_id not in have and since <= t <= now - self.config.step_s and e.publisher != shuffle.sender.node_id]
        self.layer.counts["repaired"] += len(late)
        out: list[Action] = []
        for e in late:
            out += self.stack.send_copies(e, [shuffle.sender])
        return out

    def on_send_failed(self, dst: NodeId, event: EventMsg, now: float) -> list[Action]:
        """An event copy could not be handed to ``dst``: the groups that referred to it are
        repaired (``Dps.suspect``) and the copy goes to whoever stands in: the group's new or
        acting leader, the children of a child group that is gone, or (at a publisher whose
        root's leader is gone) the root as located again."""
        layer, attrs = self.layer, self.attrs(event)
        was: list[tuple[Membership, str, set[str]]] = []
        gossiped = [m for m in layer.groups.values() if layer.epidemic and dst in m.members]
        for m in layer.groups.values():
            if m.ref.leader.node_id == dst:
                was.append((m, m.gid, set()))
            if m.parent is not None and dst in {d.node_id for d in m.parent.contacts}:
                was.append((m, m.parent.gid, set()))
            was += [(m, c.gid, set(m.children)) for c in m.children.values() if dst in {d.node_id for d in c.contacts}]
        lost_root = [t for t, d in layer.owners.items() if d.node_id == dst and event.publisher == self.stack.node_id]
        out = layer.suspect(dst, now)
        to: dict[NodeId, Descriptor] = {}
        for m, gid, children_before in was:
            now_ref = next((r for r in (m.ref, m.parent, m.children.get(gid)) if r is not None and r.gid == gid), None)
            if now_ref is not None:
                d = layer.pick(now_ref)
                to[d.node_id] = d
                continue
            v = attrs.get(tree_attr(m.tree)[0])
            for c in m.children.values():  # adopted from a child group that is gone
                if c.gid not in children_before and v is not None and matches(c.label, v):
                    to[c.leader.node_id] = c.leader
        for m in gossiped:  # epidemic: another member instead
            pool = sorted(set(m.members) - {event.publisher})
            if pool:
                d = m.members[layer.rng.choice(pool)]
                to[d.node_id] = d
        for tree in lost_root:
            if tree not in layer.owners:
                layer.held.setdefault(tree, []).append(event)
                out += layer.locate(tree, now, create=False)
        for k in (dst, self.stack.node_id):
            to.pop(k, None)
        return out + [Send(d.node_id, d.addr, event) for d in to.values()]

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
        self.layer.published_into.add(tree)
        return self.stack.send_copies(event, [root] if root.node_id != self.stack.node_id else [])
