"""The one interpretation of a core's actions, shared by the simulator and the gRPC shell.

A driver hands each list of actions to :func:`interpret` with three callbacks of its own
(:class:`ActionDriver`: send a message, arm a timer, record a span); the counters and the span
records are written here, under the same names for every backend, so the analysis and a
cross-validation of ``sim`` against ``local`` compare like with like.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any, NamedTuple, Protocol, cast

from node.kit.stack import Stack
from node.kit.types import Deliver, EventMsg, Gossip, Message, Published, Send, SetTimer, Signal

EVENTS_PUBLISHED = "events_published"
EVENTS_RECEIVED = "events_received"
EVENTS_SENT = "events_sent"
DUPLICATES = "duplicates"
DROPPED_BY_LINK = "dropped_by_link"
MALFORMED = "malformed"
SEND_FAILED = "send_failed"
LOST_TO_DEAD_PEER = "lost_to_dead_peer"


class SpanRecord(NamedTuple):
    """A publish (the root of an event's trace) or a received copy: the span every backend
    writes (ARCHITECTURE.md, "Traces"). (A tuple: one is made per copy, the hottest path.)"""

    name: str
    event: EventMsg
    node: int
    src: int | None
    first_copy: bool
    subscriber: bool


class ActionDriver(Protocol):
    def send(self, node: int, action: Send, span: Any) -> None: ...

    def set_timer(self, node: int, name: str, at: float) -> None: ...

    def span(self, record: SpanRecord, parent: Any) -> Any: ...


class EventSpans:
    """A node's span of its own copy of its latest events (the first received, or the publish):
    an event copy the core sends later, outside that copy's handling (the gossip's shuffle
    repair), leaves under it, so that each event's trace stays one tree."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._spans: OrderedDict[str, Any] = OrderedDict()

    def add(self, event_id: str, span: Any) -> None:
        self._spans[event_id] = span
        if len(self._spans) > self.capacity:
            self._spans.popitem(last=False)

    def get(self, event_id: str) -> Any:
        return self._spans.get(event_id)


def event_spans(core: Stack, have: EventSpans | None) -> EventSpans | None:
    """``have`` (or a new one) where ``core``'s rule sends copies later; None where it does not."""
    if not core.rule.later_events:
        return None
    return have if have is not None else EventSpans(core.rule.later_events)


def interpret(core: Stack, actions: list[Any], stats: Counter[str], driver: ActionDriver, parent: Any = None,
              event_spans: EventSpans | None = None) -> None:
    """Carry out ``actions`` of ``core``: messages leave under the span of the copy that caused
    them (``parent``, or the receive or publish span among the actions). With ``event_spans``
    (a rule that sends copies later: ``Dissemination.later_events``), an event copy with no such
    span leaves under the node's own span of that event."""
    node, span = core.node_id, parent
    for a in actions:  # Actions, whose types are final: exact type tests (the simulator's hottest loop)
        kind = type(a)
        if kind is Send:
            if span is None and event_spans is not None and type(a.msg) is EventMsg:
                driver.send(node, a, event_spans.get(a.msg.event_id))
            else:
                driver.send(node, a, span)
        elif kind is SetTimer:
            driver.set_timer(node, a.name, a.at)
        elif kind is Deliver:
            stats[EVENTS_RECEIVED] += 1
            stats[DUPLICATES] += not a.first_copy
            span = driver.span(SpanRecord("receive", a.event, node, a.src, a.first_copy, a.subscriber), parent)
            if event_spans is not None and a.first_copy:
                event_spans.add(a.event.event_id, span)
        elif kind is Published:
            stats[EVENTS_PUBLISHED] += 1
            span = driver.span(SpanRecord("publish", a.event, node, None, True, a.event.topic in core.topics), None)
            if event_spans is not None:
                event_spans.add(a.event.event_id, span)
        else:
            raise TypeError(f"not an action: {a!r}")


def sent_keys(layer: str) -> tuple[str, str]:
    """The counters of ``layer``'s messages sent: how many, and their encoded bytes."""
    return f"msgs_sent.{layer}", f"bytes_sent.{layer}"


def count_sent(stats: Counter[str], msg: Message, size: int) -> None:
    """A message handed to the network (before link emulation may drop it): events by count,
    layer messages by count and encoded bytes per layer."""
    if type(msg) is EventMsg:
        stats[EVENTS_SENT] += 1
    else:
        layer = cast(Gossip | Signal, msg).layer  # exact type test above: the simulator's hottest path
        stats[f"msgs_sent.{layer}"] += 1  # sent_keys, inline
        stats[f"bytes_sent.{layer}"] += size
