"""The content-based workloads of the DPS paper (Table 1; spec ../shared/design/protocols/dps.md
§6.2): seeded generators of subscriptions (conjunctions of predicates) and events (attribute
maps), and the matching share computed over a whole sample.

- ``stock`` (WL1, stock exchange): an int price and a string symbol; events uniform, subscriptions
  Zipf; half the predicates equalities, the other half price ranges of 10% of the domain and
  one-character substrings of a symbol.
- ``game`` (WL2, game zones on a plane): two int coordinates, uniform, ranges of 50%.
- ``alert`` (WL3, alert monitoring): three int readings, Zipf events and subscriptions, ranges
  of 20%, 20% equalities.

Choices (the paper gives only the table): ints in [0, 100); Zipf exponent 1 over the 100 values,
rank mapped to value by a seeded permutation per attribute, one for events and another for
subscriptions (``shared_ranks=False``: the spec suggests one shared permutation, but its own
calibration, 0.162 per attribute for WL3, assumes independent ones; a shared one gives WL3 0.77%
matching against the paper's 0.42%);
a range's width is round(U[0.5, 1.5] · size · 100), centred on a value of the subscription
distribution and shifted to stay in the domain. Symbols: a 500-word dictionary of
``SYMBOL_LENGTH``-letter words over ``SYMBOL_ALPHABET``; a substring predicate is one letter of a
drawn word. The alphabet and length are calibrated so that WL1's matching share comes out at the
paper's 2.37%: a one-letter substring then matches 1 - (3/4)^7 = 87% of the symbols (the spec's
note: WL1 needs broad string predicates).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from node.protocols.dps.content import Predicate, Subscription, Value

DOMAIN = 100
ZIPF_EXPONENT = 1.0
DICTIONARY = 500
SYMBOL_ALPHABET = "acgt"
SYMBOL_LENGTH = 7
PAPER_MATCHING_PCT = {"stock": 2.37, "game": 25.13, "alert": 0.42}
PAPER_CONTACTED_PCT = {"stock": 13.56, "game": 54.74, "alert": 17.15}


@dataclass(frozen=True)
class Attribute:
    name: str
    kind: str  # "int" or "string"
    events: str  # "uniform" or "zipf"
    subs: str
    range_size: float  # share of the domain (int attributes)
    eq_share: float  # share of equality predicates


WORKLOADS: dict[str, tuple[Attribute, ...]] = {
    "stock": (Attribute("price", "int", "uniform", "zipf", 0.10, 0.5),
              Attribute("symbol", "string", "uniform", "zipf", 0.0, 0.5)),
    "game": (Attribute("x", "int", "uniform", "uniform", 0.50, 0.0),
             Attribute("y", "int", "uniform", "uniform", 0.50, 0.0)),
    "alert": tuple(Attribute(f"r{i}", "int", "zipf", "zipf", 0.20, 0.2) for i in (1, 2, 3)),
}


class ContentWorkload:
    """One workload's value distributions, fixed by ``seed``; ``subscription`` and ``event``
    draw from them with the caller's generator."""

    def __init__(self, name: str, seed: int, shared_ranks: bool = False) -> None:
        if name not in WORKLOADS:
            raise ValueError(f"content workload {name!r}: one of {', '.join(WORKLOADS)}")
        self.name, self.attrs = name, WORKLOADS[name]
        fixed = random.Random(seed)
        ranks = np.arange(1, DOMAIN + 1, dtype=float) ** -ZIPF_EXPONENT
        self._cum = np.cumsum(ranks / ranks.sum())  # the Zipf CDF over ranks
        self.perm = {(a.name, role): fixed.sample(range(DOMAIN), DOMAIN) for a in self.attrs for role in ("events", "subs")}
        if shared_ranks:
            self.perm.update({(a.name, "events"): self.perm[(a.name, "subs")] for a in self.attrs})
        words: set[str] = set()
        while len(words) < DICTIONARY:
            words.add("".join(fixed.choice(SYMBOL_ALPHABET) for _ in range(SYMBOL_LENGTH)))
        self.words = sorted(words)

    def _draw(self, attr: Attribute, role: str, rng: random.Random) -> int:
        """An index into the attribute's domain (values, or words) for events or subs."""
        size, dist = DOMAIN if attr.kind == "int" else DICTIONARY, getattr(attr, role)
        if dist == "uniform":
            return rng.randrange(size)
        rank = min(int(np.searchsorted(self._cum, rng.random(), side="right")), DOMAIN - 1)
        if attr.kind == "int":
            return self.perm[(attr.name, role)][rank]
        return rank * (DICTIONARY // DOMAIN) + rng.randrange(DICTIONARY // DOMAIN)  # Zipf over 100 word blocks

    def subscription(self, rng: random.Random) -> Subscription:
        preds: list[Predicate] = []
        for a in self.attrs:
            centre = self._draw(a, "subs", rng)
            equality = rng.random() < a.eq_share
            if a.kind == "string":
                word = self.words[centre]
                preds.append(Predicate(a.name, "=", word) if equality else Predicate(a.name, "substr", rng.choice(word)))
            elif equality:
                preds.append(Predicate(a.name, "=", centre))
            else:
                width = max(1, round(rng.uniform(0.5, 1.5) * a.range_size * DOMAIN))
                lo = min(max(0, centre - width // 2), DOMAIN - width)
                preds += [Predicate(a.name, ">=", lo), Predicate(a.name, "<=", lo + width - 1)]
        return Subscription.of(preds)

    def event(self, rng: random.Random) -> dict[str, Value]:
        return {a.name: self.words[self._draw(a, "events", rng)] if a.kind == "string" else self._draw(a, "events", rng)
                for a in self.attrs}


def attribute_matrices(subs: list[Subscription], events: list[dict[str, Value]]) -> dict[str, np.ndarray]:
    """Per constrained attribute: events × subscriptions, True where the event meets every
    predicate the subscription places on that attribute (also where it places none); vectorised
    per distinct predicate; an event without the attribute meets no predicate on it."""
    out: dict[str, np.ndarray] = {}
    for name in sorted({p.name for s in subs for p in s.preds}):
        m = out[name] = np.ones((len(events), len(subs)), dtype=bool)
        values = [e.get(name) for e in events]
        col: dict[tuple[str, Value | None, str], np.ndarray] = {}
        for j, s in enumerate(subs):
            for p in (p for p in s.preds if p.name == name):
                key = (p.op, p.value, p.attr[1])  # 3 and 3.0 hash alike
                if key not in col:
                    col[key] = np.array([v is not None and p.matches(v) for v in values])
                m[:, j] &= col[key]
    return out


def matching_matrix(subs: list[Subscription], events: list[dict[str, Value]]) -> np.ndarray:
    """events × subscriptions, True where the event matches the subscription."""
    out = np.ones((len(events), len(subs)), dtype=bool)
    for m in attribute_matrices(subs, events).values():
        out &= m
    return out


def matching_pct(subs: list[Subscription], events: list[dict[str, Value]]) -> float:
    """The paper's Matching: mean over events of the share of subscriptions it matches, in %
    (one subscription per node)."""
    return float(100 * matching_matrix(subs, events).mean())


def contacted_floor_pct(subs: list[Subscription], events: list[dict[str, Value]]) -> float:
    """The share of subscribers (one subscription per node) that a DPS overlay contacts per event
    whatever its trees look like, in %, with the join attribute drawn uniformly among each
    subscription's attributes (``join_attr_policy: random``, the paper's "arbitrarily chosen"):
    a group whose label matches is visited whole, so a node is contacted whenever the constraint
    on its join attribute matches. The expectation over the join draws, averaged over events;
    the traversal's non-matching groups come on top."""
    per_attr = attribute_matrices(subs, events)
    floor = np.zeros((len(events), len(subs)))
    for j, s in enumerate(subs):
        names = sorted({p.name for p in s.preds})
        floor[:, j] = sum(per_attr[a][:, j] for a in names) / len(names)
    return float(100 * floor.mean())
