"""DPS's group references and node-side group state (node/protocols/dps/protocol.py uses them;
spec ../shared/design/protocols/dps.md §3; how a reference travels: messages.Group)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from node.kit.types import Descriptor, NodeId
from node.protocols.dps.content import Constraint, Subscription


def tree_key(name: str, kind: str) -> str:
    return f"{name}:{kind}"


def bare(d: Descriptor) -> Descriptor:
    return Descriptor(d.node_id, d.addr)


@dataclass(eq=False, slots=True)
class GroupRef:
    """A group as its neighbours know it: id, label, creation order, leader, co-leaders and the
    leader's epoch (a takeover raises it; the higher epoch wins)."""

    gid: str
    label: Constraint
    seq: int
    leader: Descriptor
    backups: tuple[Descriptor, ...] = ()
    epoch: int = 0

    @property
    def contacts(self) -> tuple[Descriptor, ...]:
        return (self.leader, *self.backups)


@dataclass(eq=False)
class Membership:
    """A group this node belongs to: as its leader, as a co-leader (with a replica of the
    leader's state) or as a member; a router is a co-leader of a root group it is no member of."""

    ref: GroupRef
    tree: str
    subs: set[str] = field(default_factory=set)
    """This node's subscriptions grouped here (none for the owner's root group or a router)."""
    members: dict[NodeId, Descriptor] = field(default_factory=dict)
    """Leader and co-leaders: every member in join order, the leader included."""
    parent: GroupRef | None = None
    children: dict[str, GroupRef] = field(default_factory=dict)
    grandparent: GroupRef | None = None
    grandchildren: dict[str, list[GroupRef]] = field(default_factory=dict)
    """Distance-2 entries (spec predview, succview), refreshed by the probes' answers: where the
    tree is rejoined when a whole neighbouring group is lost."""
    heard: float = 0.0
    """A member: when it last heard from its group."""
    joined: float = 0.0
    """When this node joined the group or created it (epidemic repair: no older event is sent it)."""
    blocked_until: float | None = None
    block_req: int = 0
    buffered: list[tuple[NodeId, Any]] = field(default_factory=list)
    """While blocked: the events and FIND_GROUP messages (``messages.Find``) to handle after."""

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


def without(r: GroupRef, node: NodeId) -> GroupRef:
    """``r`` with ``node`` no longer among its co-leaders (its leader stays as it is)."""
    return GroupRef(r.gid, r.label, r.seq, r.leader, tuple(d for d in r.backups if d.node_id != node), r.epoch)


def with_contacts(r: GroupRef, contacts: list[Descriptor]) -> GroupRef:
    return GroupRef(r.gid, r.label, r.seq, contacts[0], tuple(contacts[1:]), r.epoch)


def merged(old: GroupRef | None, new: GroupRef, k: int) -> GroupRef:
    """Epidemic: ``new``'s contacts first, then ``old``'s, at most ``k``."""
    seen: dict[NodeId, Descriptor] = {}
    for d in [*new.contacts, *(old.contacts if old is not None else ())]:
        seen.setdefault(d.node_id, d)
    return with_contacts(new, list(seen.values())[:k])


def tree_attr(tree: str) -> tuple[str, Any]:
    name, _, kind = tree.rpartition(":")
    return name, kind
