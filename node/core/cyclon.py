"""CYCLON peer sampling: the enhanced shuffle (Voulgaris, Gavidia, van Steen, JNSM 2005).

Theory of operation (spec: ../shared/design/protocols/poldercast.md §5.0-§5.1)

State: ``view``, at most ``view_size`` descriptors of other nodes, each with an age in cycles;
``pending``, the entries sent to each partner whose reply is still awaited.

Active side, once per cycle: age every entry by one; pick the oldest entry q (ties at random)
and remove it; send q up to ``shuffle_length - 1`` random other entries plus our own fresh
profile at age 0. On q's reply, merge its entries. Without a reply q stays removed.

Passive side: reply with up to ``shuffle_length`` random entries (never the requester itself),
then merge what was received.

Merge: drop our own id and ids already in the view; fill empty slots first, then replace the
entries we sent to that partner; stop when either runs out.

Invariants (``validate``): no self entry, no duplicate ids, at most ``view_size`` entries,
non-negative ages.

Choices not in the paper, as named parameters: ``cycle_ms`` (gossip period), ``timeout_ms``
(a reply later than this is dropped and nothing is merged). The first tick has a random phase
in [0, cycle) so that nodes stay unsynchronised.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .types import Descriptor, Gossip, NodeId, RemoteProtocolError, Send, LocalProtocolError

LAYER = "cyclon"


@dataclass
class CyclonConfig:
    view_size: int = 20
    """ℓ_cyc: entries in the CYCLON view (paper default 20)."""
    shuffle_length: int = 10
    """g_cyc: entries exchanged per shuffle (paper default 10)."""
    cycle_ms: float = 1000.0
    """Gossip period (testbed choice; the paper counts abstract cycles)."""
    timeout_ms: float = 500.0
    """How long the initiator waits for a reply (testbed choice: cycle_ms / 2)."""

    __pydantic_config__ = {"extra": "forbid"}

    def __post_init__(self) -> None:
        if not 1 <= self.shuffle_length <= self.view_size:
            raise ValueError("need 1 <= shuffle_length <= view_size")
        if self.cycle_ms <= 0 or self.timeout_ms <= 0:
            raise ValueError("cycle_ms and timeout_ms must be positive")


class Cyclon:
    """The CYCLON layer of one node. Its owner passes the node's current profile in ``me``."""

    def __init__(self, me: Descriptor, config: CyclonConfig, rng: random.Random) -> None:
        self.me = me
        self.config = config
        self.rng = rng
        self.view: dict[NodeId, Descriptor] = {}
        self.pending: dict[NodeId, tuple[tuple[NodeId, ...], float]] = {}
        self.late_replies = 0

    @property
    def period(self) -> float:
        return self.config.cycle_ms / 1000.0

    def bootstrap(self, contacts: list[Descriptor]) -> None:
        self._merge([c.aged(0) for c in contacts], sent=())

    def first_tick(self, now: float) -> float:
        return now + self.rng.uniform(0.0, self.period)

    def tick(self, now: float) -> list[Send]:
        """One active cycle. Returns the shuffle request (or nothing with an empty view)."""
        self.pending = {q: p for q, p in self.pending.items() if p[1] > now}
        if not self.view:
            return []
        for nid, d in self.view.items():
            self.view[nid] = d.aged(d.age + 1)
        oldest = max(d.age for d in self.view.values())
        q = self.view.pop(self.rng.choice([n for n, d in self.view.items() if d.age == oldest]))
        others = list(self.view.values())
        sent = self.rng.sample(others, min(self.config.shuffle_length - 1, len(others)))
        self.pending[q.node_id] = (
            tuple(d.node_id for d in sent),
            now + self.config.timeout_ms / 1000.0,
        )
        entries = (self.me.aged(0), *sent)
        return [Send(q.node_id, q.addr, Gossip(LAYER, self.me.aged(0), entries, reply=False))]

    def on_gossip(self, src: NodeId, msg: Gossip, now: float) -> list[Send]:
        if len(msg.entries) > self.config.shuffle_length:
            raise RemoteProtocolError(
                f"cyclon shuffle with {len(msg.entries)} entries (limit {self.config.shuffle_length})"
            )
        if msg.reply:
            pending = self.pending.pop(src, None)
            if pending is None or pending[1] < now:
                self.late_replies += 1
                return []
            self._merge(msg.entries, sent=pending[0])
            return []
        candidates = [d for d in self.view.values() if d.node_id != src]
        reply = self.rng.sample(candidates, min(self.config.shuffle_length, len(candidates)))
        self._merge(msg.entries, sent=tuple(d.node_id for d in reply))
        return [Send(src, msg.sender.addr, Gossip(LAYER, self.me.aged(0), tuple(reply), reply=True))]

    def _merge(self, entries: tuple[Descriptor, ...] | list[Descriptor], sent: tuple[NodeId, ...]) -> None:
        # Replace sent entries in the (random) order they were sent. Never iterate a set of ids
        # here: int hashes order a set by id, which would always spare the same nodes and skew
        # the in-degree badly.
        replaceable = [n for n in reversed(sent) if n in self.view]
        for d in entries:
            if d.node_id == self.me.node_id or d.node_id in self.view:
                continue
            if len(self.view) >= self.config.view_size:
                if not replaceable:
                    break
                del self.view[replaceable.pop()]
            self.view[d.node_id] = d

    def validate(self) -> None:
        if self.me.node_id in self.view:
            raise LocalProtocolError(f"node {self.me.node_id} has itself in its CYCLON view")
        if len(self.view) > self.config.view_size:
            raise LocalProtocolError(f"CYCLON view of {len(self.view)} > {self.config.view_size}")
        if any(d.age < 0 or d.node_id != nid for nid, d in self.view.items()):
            raise LocalProtocolError("CYCLON view entry with a negative age or a wrong key")
