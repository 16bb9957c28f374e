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
(a reply later than this is dropped and nothing is merged), ``refill``: a view found empty at a
tick is filled again, without a random draw, from the node's other views, or else from a
reserve of the last ``view_size`` partners removed and bootstrap contacts (a burst in which
every exchange fails must not isolate a node for good; the paper's view only empties when every
neighbour died). The first tick has a random phase in [0, cycle) so that nodes stay
unsynchronised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from node.kit.stack import ExchangeLayer, LayerState
from node.kit.types import Action, Descriptor, Gossip, LocalProtocolError, NodeId
from node.kit.views import age_all, pick_oldest

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
    refill: bool = True
    """Fill an empty view again from the other views or recent partners (testbed choice)."""

    __pydantic_config__ = {"extra": "forbid"}

    def __post_init__(self) -> None:
        if not 1 <= self.shuffle_length <= self.view_size:
            raise ValueError("need 1 <= shuffle_length <= view_size")
        if self.cycle_ms <= 0 or self.timeout_ms <= 0:
            raise ValueError("cycle_ms and timeout_ms must be positive")


@dataclass
class CyclonState(LayerState):
    reserve: dict[NodeId, Descriptor] = field(default_factory=dict)
    """The reserve (``Cyclon.reserve``), oldest first."""


class Cyclon(ExchangeLayer):
    """The CYCLON layer of one node (the stack's profile is the one it sends)."""

    name = LAYER

    def __init__(self, config: CyclonConfig) -> None:
        super().__init__(max_entries=config.shuffle_length, timeout_s=config.timeout_ms / 1000.0)
        self.config = config
        self.reserve: dict[NodeId, Descriptor] = {}
        """The last ``view_size`` partners removed and bootstrap contacts, oldest first."""

    @property
    def period(self) -> float:
        return self.config.cycle_ms / 1000.0

    def bootstrap(self, contacts: Sequence[Descriptor]) -> None:
        self._merge([c.aged(0) for c in contacts], sent=())
        if self.config.refill:
            for c in contacts:
                self._keep(c.aged(0))

    def exchange(self, now: float) -> list[Action]:
        """One active cycle: the shuffle request (or nothing with an empty view)."""
        if not self.view and self.config.refill:
            self._refill()
        if not self.view:
            return []
        rng = self.stack.rng
        age_all(self.view)
        q = self.view.pop(pick_oldest(self.view, rng))
        if self.config.refill:
            self._keep(q)
        others = list(self.view.values())
        sent = rng.sample(others, min(self.config.shuffle_length - 1, len(others)))
        return [self.request(q, (self.stack.me.aged(0), *sent), now, kept=tuple(d.node_id for d in sent))]

    def on_request(self, src: NodeId, msg: Gossip, now: float) -> list[Descriptor]:
        candidates = [d for d in self.view.values() if d.node_id != src]
        reply = self.stack.rng.sample(candidates, min(self.config.shuffle_length, len(candidates)))
        self._merge(msg.entries, sent=tuple(d.node_id for d in reply))
        return reply

    def on_reply(self, msg: Gossip, kept: tuple[NodeId, ...], now: float) -> None:
        self._merge(msg.entries, sent=kept)

    def export_state(self) -> CyclonState:
        return CyclonState(**vars(super().export_state()), reserve=self.reserve)

    def import_state(self, state: LayerState) -> None:
        assert isinstance(state, CyclonState)
        super().import_state(state)
        self.reserve = state.reserve

    def _keep(self, d: Descriptor) -> None:
        self.reserve.pop(d.node_id, None)
        self.reserve[d.node_id] = d
        if len(self.reserve) > self.config.view_size:
            del self.reserve[next(iter(self.reserve))]

    def _refill(self) -> None:
        """An empty view: the other views' entries, else the reserve, most recent first."""
        me = self.stack.node_id
        pool = [d for d in self.stack.union(without=LAYER).values() if d.node_id != me] \
            or list(reversed(self.reserve.values()))
        for d in pool[:self.config.view_size]:
            self.view[d.node_id] = d

    def _merge(self, entries: Sequence[Descriptor], sent: tuple[NodeId, ...]) -> None:
        # Replace sent entries in the (random) order they were sent. Never iterate a set of ids
        # here: int hashes order a set by id, which would always spare the same nodes and skew
        # the in-degree badly.
        me = self.stack.node_id
        replaceable = [n for n in reversed(sent) if n in self.view]
        for d in entries:
            if d.node_id == me or d.node_id in self.view:
                continue
            if len(self.view) >= self.config.view_size:
                if not replaceable:
                    break
                del self.view[replaceable.pop()]
            self.view[d.node_id] = d

    def validate(self) -> None:
        super().validate()
        if len(self.view) > self.config.view_size:
            raise LocalProtocolError(f"CYCLON view of {len(self.view)} > {self.config.view_size}")

