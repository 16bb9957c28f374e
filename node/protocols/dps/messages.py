"""DPS's message kinds (node/kit/messages.py): one per message of the spec's tree location,
group membership, maintenance and self-healing (../shared/design/protocols/dps.md §4).

A group travels as a :class:`Group` record; its label as its canonical text (``Group.ref``
parses it). The layouts are the ones DPS used before its messages were typed, slot for slot,
so that runs stay byte-identical.
"""

from __future__ import annotations

from typing import Annotated, Literal

from node.kit.messages import MaxLen, Rest, SameLen, from_signal, message, record, to_signal
from node.kit.types import Descriptor, Signal
from node.protocols.dps.content import parse_canon
from node.protocols.dps.groups import GroupRef

LAYER = "dps"
RUMOR = "dps-rumor"
"""The layer name of a rumor's payload kinds (decoded by :meth:`Rumor.payload`)."""

Text = Annotated[str, MaxLen(4096)]
"""A tree, subscription filter, label or group id (a filter can be long)."""
Texts = Annotated[tuple[Text, ...], Rest()]


@record
class Group:
    """A group reference (:class:`GroupRef`) on the wire."""

    gid: Text
    label: Text
    seq: int
    epoch: int
    leader: Descriptor
    backups: Annotated[tuple[Descriptor, ...], MaxLen(64)]

    @staticmethod
    def of(r: GroupRef) -> Group:
        return Group(r.gid, r.label.canon(), r.seq, r.epoch, r.leader, r.backups)

    def ref(self) -> GroupRef:
        """The reference (ValueError for a label that is not canonical text)."""
        return GroupRef(self.gid, parse_canon(self.label), self.seq, self.leader, self.backups, self.epoch)


def opt(r: GroupRef | None) -> Group | None:
    return None if r is None else Group.of(r)


def ref_or_none(g: Group | None) -> GroupRef | None:
    return None if g is None else g.ref()


# --- tree location, at the seed -----------------------------------------------------------------

@message(LAYER, "locate")
class Locate:
    sender: Descriptor
    tree: Text
    req: int
    create: bool


@message(LAYER, "found")
class Found:
    """The tree's owner and recent subscribers to it as contacts."""

    sender: Descriptor
    tree: Text
    req: int
    owner: Descriptor
    contacts: Annotated[tuple[Descriptor, ...], Rest()]


@message(LAYER, "wait")
class Wait:
    sender: Descriptor
    tree: Text
    req: int


@message(LAYER, "missing")
class Missing:
    sender: Descriptor
    tree: Text
    req: int
    create: bool


@message(LAYER, "announce")
class Announce:
    sender: Descriptor
    tree: Text
    owner: Descriptor


@message(LAYER, "hello")
class Hello:
    sender: Descriptor


@message(LAYER, "seeds")
class Seeds:
    sender: Descriptor
    backups: Annotated[tuple[Descriptor, ...], Rest()]


@message(LAYER, "directory")
class Directory:
    sender: Descriptor
    trees: Texts
    owners: Annotated[tuple[Descriptor, ...], SameLen("trees")]
    backups: Annotated[tuple[Descriptor, ...], Rest()]


# --- subscription: FIND_GROUP and joining or creating a group -----------------------------------

@message(LAYER, "find")
class Find:
    """Where the subscription ``text`` belongs on ``tree``, asked of group ``gid`` ("": the
    receiver's root or any group it leads)."""

    sender: Descriptor
    tree: Text
    text: Text
    gid: Text
    subscriber: Descriptor
    req: int
    direction: Literal["down", "up"]


@message(LAYER, "retry")
class Retry:
    sender: Descriptor
    text: Text
    req: int


@message(LAYER, "subscribe_to")
class SubscribeTo:
    sender: Descriptor
    text: Text
    req: int
    group: Group


@message(LAYER, "join")
class Join:
    sender: Descriptor
    gid: Text
    text: Text
    req: int


@message(LAYER, "join_ack")
class JoinAck:
    """Leader-based: the group; epidemic: also its neighbours and a sample of its members."""

    sender: Descriptor
    tree: Text
    text: Text
    req: int
    group: Group
    parent: Group | None
    children: tuple[Group, ...]
    sample: tuple[Descriptor, ...]


@message(LAYER, "create")
class Create:
    """Create a group for ``text`` under ``parent``, adopting the ``adopted`` children."""

    sender: Descriptor
    tree: Text
    text: Text
    req: int
    parent: Group
    grandparent: Group | None
    adopted: tuple[Group, ...]


@message(LAYER, "created")
class Created:
    sender: Descriptor
    parent_gid: Text
    req: int
    new: Group
    adopted: tuple[Text, ...]


@message(LAYER, "pred_changed")
class PredChanged:
    sender: Descriptor
    gid: Text
    parent: Group
    grandparent: Group | None


@message(LAYER, "leave")
class Leave:
    sender: Descriptor
    gid: Text


# --- co-leaders ---------------------------------------------------------------------------------

@message(LAYER, "sync")
class Sync:
    """The leader's state to its co-leaders (epidemic: an invitation into a root group)."""

    sender: Descriptor
    tree: Text
    group: Group
    parent: Group | None
    grandparent: Group | None
    children: tuple[Group, ...]
    members: tuple[Descriptor, ...]


@message(LAYER, "leader")
class Leader:
    sender: Descriptor
    group: Group


# --- failure detection and self-healing ---------------------------------------------------------

@message(LAYER, "ping")
class Ping:
    """A probe of group ``gid``, from its child group ``child`` if one is named."""

    sender: Descriptor
    gid: Text
    want_children: bool
    child: Annotated[tuple[Text, ...], Rest(), MaxLen(1)]


@record
class GroupState:
    """What a pong says of a group the receiver is in."""

    group: Group
    parent: Group | None
    children: tuple[Group, ...]
    listed: bool
    """Whether the pong's ``child`` is listed among the group's children."""


@message(LAYER, "pong")
class Pong:
    sender: Descriptor
    gid: Text
    child: Text
    state: GroupState | None
    """None: the receiver is not in group ``gid``."""


@message(LAYER, "takeover")
class Takeover:
    sender: Descriptor
    gid: Text
    epoch: int


@message(LAYER, "reattach")
class Reattach:
    sender: Descriptor
    tree: Text
    gid: Text
    child: Group


# --- epidemic maintenance -----------------------------------------------------------------------

@message(LAYER, "shuffle")
class Shuffle:
    """A groupview sample; with repair on, the ids of the events seen and how long (ms) the
    sender has been a member."""

    sender: Descriptor
    gid: Text
    reply: bool
    ids: Texts
    member_ms: Annotated[tuple[int, ...], Rest(), MaxLen(1)]
    sample: Annotated[tuple[Descriptor, ...], Rest()]


@message(LAYER, "rumor")
class Rumor:
    """A membership change of group ``gid``, gossiped: the payload kind ``op`` (one of
    :data:`RUMOR`'s), its fields in the rest of each slot."""

    sender: Descriptor
    gid: Text
    op: Text
    uid: Text
    topics: Texts
    entries: Annotated[tuple[Descriptor, ...], Rest()]
    values: Annotated[tuple[int, ...], Rest()]

    @staticmethod
    def of(sender: Descriptor, gid: str, uid: str, payload: RumorAdd | RumorRemove | RumorSucc | RumorPred) -> Rumor:
        sig = to_signal(payload)
        return Rumor(sender, gid, sig.kind, uid, sig.topics, sig.entries, sig.values)

    def payload(self) -> RumorAdd | RumorRemove | RumorSucc | RumorPred:
        """The change (RemoteProtocolError for an unknown ``op`` or a malformed payload)."""
        return from_signal(Signal(RUMOR, self.op, self.sender, self.entries, self.topics, self.values))  # type: ignore[no-any-return]


@message(RUMOR, "add")
class RumorAdd:
    sender: Descriptor
    subject: Descriptor


@message(RUMOR, "remove")
class RumorRemove:
    sender: Descriptor
    subject: Descriptor


@message(RUMOR, "succ")
class RumorSucc:
    """A new child group, and the children it adopted."""

    sender: Descriptor
    adopted: tuple[Text, ...]
    new: Group


@message(RUMOR, "pred")
class RumorPred:
    sender: Descriptor
    parent: Group
    grandparent: Group | None
