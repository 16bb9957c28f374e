"""RingCast: PolderCast's dissemination over the topic rings and shortcuts (PolderCast §5.4;
spec ../shared/design/protocols/poldercast.md).

A node forwards an event once, on its first copy, to at most ``fanout`` nodes: coming from its
t-successor it sends to its t-predecessor (and vice versa) plus ``fanout - 1`` random shortcuts;
coming from elsewhere (or publishing) it sends to both ring neighbours plus ``fanout - 2``
shortcuts. Shortcuts are nodes of the ``shortcut_source`` views whose profile lists the topic,
never the sender or the ring targets. Only subscribers publish or forward, so the relay traffic
is 0; a copy of a topic the node does not subscribe to is delivered as "stray" and not
forwarded.

Ring failover (``ring_failover``, spec option, off by default): a failed event send to a ring
neighbour drops it from every ring and sends the copy to the next neighbour on that side.

The rule reads ``fanout``, ``shortcut_source`` and ``ring_failover`` from the stack's config at
every event (``sim.variants`` changes them on a running overlay).
"""

from __future__ import annotations

from types import MappingProxyType

from node.kit.stack import Dissemination
from node.kit.types import Action, Descriptor, EventMsg, LocalProtocolError, NodeId, Send, Topic
from node.protocols.poldercast.rings import Rings

SHORTCUT_LAYERS = MappingProxyType({"both": ("cyclon", "vicinity"), "cyclon": ("cyclon",), "vicinity": ("vicinity",)})


class RingCast(Dissemination):
    name = "ringcast"
    params = frozenset({"fanout", "shortcut_source", "ring_failover"})

    def __init__(self, rings: Rings) -> None:
        self.rings = rings

    def check_publish(self, topic: Topic) -> None:
        if topic not in self.stack.me.topics:
            raise LocalProtocolError(f"node {self.stack.node_id} publishes on {topic!r} without subscribing (paper §2)")

    def relays(self, event: EventMsg) -> bool:
        return event.topic in self.stack.me.topics

    def targets(self, event: EventMsg, sender: NodeId | None) -> list[Descriptor]:
        stack, t = self.stack, event.topic
        f = stack.config.fanout
        succ = next(iter(self.rings.succ.get(t, ())), None)
        pred = next(iter(self.rings.pred.get(t, ())), None)
        if sender is not None and sender == succ:
            ring, k = [pred], f - 1
        elif sender is not None and sender == pred:
            ring, k = [succ], f - 1
        else:
            ring, k = [succ, pred], f - 2
        targets = list(dict.fromkeys(n for n in ring if n is not None))
        excluded = {stack.node_id, sender, *targets}
        views = [stack.view(name) for name in SHORTCUT_LAYERS[stack.config.shortcut_source]]
        pool = sorted({d.node_id: d for v in views for d in v.values()
                       if t in d.topics and d.node_id not in excluded}.values(), key=lambda d: d.node_id)
        shortcuts = stack.rng.sample(pool, min(k, len(pool))) if k > 0 else []
        return [self.rings.view[n] for n in targets] + shortcuts

    def on_send_failed(self, dst: NodeId, event: EventMsg, now: float) -> list[Action]:
        if not self.stack.config.ring_failover:
            return []
        t = event.topic
        sides = [s for s in (self.rings.succ.get(t), self.rings.pred.get(t)) if s and s[0] == dst]
        if not sides:
            return []  # a shortcut, or a neighbour already replaced
        self.rings.drop(dst)
        nexts = dict.fromkeys(side[0] for side in sides if side)
        return [Send(n, self.rings.view[n].addr, event) for n in nexts]
