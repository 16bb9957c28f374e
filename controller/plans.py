"""Plans rendered from an experiment: pure functions of (experiment, seed).

Each plan draws from its own ``random.Random(f"{seed}:{plan}")`` so that adding or changing one
plan never shifts the draws of another. Every backend carries out the same plan.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from node.links import LinkRule

from .config import Experiment


@dataclass(frozen=True, slots=True)
class Publication:
    at_s: float
    """Seconds after the end of the warm-up."""
    node: int
    topic: str


def topic_name(i: int) -> str:
    return f"t{i:04d}"


def subscriptions(exp: Experiment) -> list[frozenset[str]]:
    rng = random.Random(f"{exp.seed}:subscriptions")
    w = exp.workload
    topics = [topic_name(i) for i in range(w.topics)]
    return [frozenset(rng.sample(topics, w.subscriptions_per_node)) for _ in range(exp.nodes.count)]


def bootstrap_contacts(exp: Experiment) -> list[list[int]]:
    """Each node's initial contacts: distinct random other nodes."""
    rng = random.Random(f"{exp.seed}:bootstrap")
    n = exp.nodes.count
    k = min(exp.nodes.bootstrap_contacts, n - 1)
    contacts = []
    for i in range(n):
        picks = set()
        while len(picks) < k:
            j = rng.randrange(n)
            if j != i:
                picks.add(j)
        contacts.append(sorted(picks))
    return contacts


def publications(exp: Experiment, subs: list[frozenset[str]]) -> list[Publication]:
    """Evenly spaced publications; topic uniform over subscribed topics; the publisher is a
    random subscriber of that topic (as the papers have publishers subscribe first)."""
    rng = random.Random(f"{exp.seed}:publications")
    by_topic: dict[str, list[int]] = {}
    for node, topics in enumerate(subs):
        for t in sorted(topics):
            by_topic.setdefault(t, []).append(node)
    topics = sorted(by_topic)
    p = exp.publications
    plan = []
    for i in range(p.count):
        topic = rng.choice(topics)
        plan.append(Publication(i / p.rate_per_s, rng.choice(by_topic[topic]), topic))
    return plan


def link_rules(exp: Experiment) -> list[LinkRule]:
    n = exp.network
    if n.delay_ms == 0 and n.jitter_ms == 0 and n.loss == 0:
        return []
    return [LinkRule(delay_ms=n.delay_ms, jitter_ms=n.jitter_ms, loss=n.loss)]


def payload(exp: Experiment, index: int) -> bytes:
    return (b"%08d" % index).ljust(exp.publications.payload_bytes, b".")[: max(exp.publications.payload_bytes, 8)]
