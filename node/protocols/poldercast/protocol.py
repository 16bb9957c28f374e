"""PolderCast: per-topic rings plus CYCLON and VICINITY shortcuts (Setty, van Steen, Vitenberg,
Voulgaris; Middleware 2012). Spec: ../shared/design/protocols/poldercast.md (§ numbers below).

Theory of operation: a stack of three gossip layers, each with its own timer (period
``cycle_ms``, random first phase), and the RingCast rule.

- CYCLON (§5.1, :mod:`node.protocols.cyclon.layer`): uniform random links; keeps everything connected.
- VICINITY (§5.2, :mod:`node.protocols.poldercast.vicinity`): links to nodes sharing topics, ranked by topic
  priority then shared topics.
- RINGS (§5.3, :mod:`node.protocols.poldercast.rings`): per topic, the nearest subscribers by ring id.
- RingCast (§5.4, :mod:`node.protocols.poldercast.ringcast`): each subscriber forwards a first copy along its
  ring and to ``fanout - 2`` (or ``- 1``) shortcuts.

Ages grow once per tick of their layer; the partner is the oldest entry and is removed at once
(proactive removal); it comes back only if it replies (VICINITY, RINGS) or by CYCLON's own rule.
The union of views (VICINITY's candidates, RINGS's pool) takes the youngest copy of each node,
CYCLON's on a tie, then VICINITY's.

Layer order (choice): the first-tick phases are drawn CYCLON, RINGS, VICINITY, so the variant
without VICINITY (``use_vicinity: false``) draws the same phases for the other two.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Literal

from node.kit.registry import ProtocolSpec, register_protocol
from node.kit.stack import Layer, Stack
from node.kit.types import Descriptor
from node.protocols.cyclon.layer import LAYER as CYCLON
from node.protocols.cyclon.layer import Cyclon, CyclonConfig
from node.protocols.poldercast.ringcast import RingCast
from node.protocols.poldercast.rings import LAYER as RINGS
from node.protocols.poldercast.rings import RingIds, Rings
from node.protocols.poldercast.vicinity import LAYER as VICINITY
from node.protocols.poldercast.vicinity import TopicBits, Vicinity


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
    ring_removal: Literal["on_timeout", "on_initiate"] = "on_timeout"
    """When RINGS removes its gossip partner from the ring slots (choice): "on_initiate" = the
    paper's rule (at once; the partner returns with its reply), which leaves the partner's slots
    empty for a round trip, when events skip it; "on_timeout" = only once its reply is overdue."""
    ring_selection: Literal["nearest_first", "random"] = "random"
    """Which candidates fill a RINGS message when they outnumber g_ring: "random" = the paper's
    rule (§5.1, "it randomly picks g_ring of them"); "nearest_first" = this testbed's option, the
    nearest to the partner's id on each common ring first (each common topic's first successor
    and predecessor of the partner, then the second ones), ties at random, which reaches 99%
    complete rings in E1 3 to 12.5 cycles sooner at 2,000 nodes (docs/results/poldercast.md)."""

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


def build(me: Descriptor, config: PolderCastConfig, rng: random.Random, shared: dict[str, Any]) -> Stack:
    bits, ids = shared.setdefault("topic_bits", TopicBits()), shared.setdefault("ring_ids", RingIds())
    period, timeout = config.cycle_ms / 1000.0, config.timeout_ms / 1000.0
    rings = Rings(ring_size=config.ring_size, gossip_size=config.ring_gossip, period_s=period, timeout_s=timeout,
                  bits=bits, ids=ids, removal=config.ring_removal, selection=config.ring_selection)
    layers: list[Layer] = [Cyclon(config.cyclon), rings]
    if config.use_vicinity:
        layers.append(Vicinity(view_size=config.vicinity_view, gossip_size=config.vicinity_gossip, period_s=period,
                               timeout_s=timeout, bits=bits, priority_mode=config.priority_mode))
    order = [CYCLON, VICINITY, RINGS] if config.use_vicinity else [CYCLON, RINGS]
    return Stack(me, config, rng, layers, RingCast(rings), seen_capacity=config.seen_capacity, view_order=order)


register_protocol(ProtocolSpec(
    "poldercast", PolderCastConfig, build,
    cycle_s=lambda c: c.cyclon.cycle_ms / 1000.0,
    reply_timeout_s=lambda c: max(c.cyclon.timeout_ms, c.timeout_ms) / 1000.0,
    dissemination_params=RingCast.params,
))
