"""Self-contained universes (stan.md §6.2, Rappel's method) from generated populations that
stand in for the LiveJournal and Wikipedia dumps, which the testbed does not have.

A population: ``population`` users with one home community each (of ``communities``) and a
power-law number of subscriptions (exponent ``subscriptions_exponent``, 1 to
``max_subscriptions``); a share ``locality`` of a user's subscriptions are topics of its home
community, the rest any topic, both in proportion to a Zipf popularity (``popularity_alpha``).
LiveJournal-like: every user owns a journal (a topic in its home community of 100), the
universe grows by the users' own journals, correlation mild (locality 0.5; its universes have
Table 1's LiveJournal topics/nodes ratio, about 0.05). Wikipedia-like: population / 10 pages in
20 communities, the universe grows by one random page of each user, correlation strong
(locality 0.95: the paper finds Wikipedia's correlation stronger). Then the universe: ``seeds`` random seed topics, every user of one of
them, the seed set grown, subscriptions restricted to it, topics under ``min_subscribers``
pruned once, users left with nothing dropped; of ``candidates`` universes built so, the one
with the median topics/nodes ratio. All of it is a pure function of (parameters, seed):
synthetic, never to be compared with the paper's LiveJournal or Wikipedia numbers.
"""

from __future__ import annotations

import functools
import random
from collections import Counter

import numpy as np

LOCALITY = {"livejournal": 0.5, "wikipedia": 0.95}
COMMUNITIES = {"livejournal": 100, "wikipedia": 20}
GROW = {"livejournal": "own_topic", "wikipedia": "random_topic"}


def population(flavour: str, users: int, pages: int | None, communities: int | None, locality: float | None,
               alpha: float, exponent: float, max_subs: int, rng: random.Random) -> dict[str, set[str]]:
    """user label -> topic labels (LiveJournal: journal u<i> is user u<i>'s own)."""
    gen = np.random.default_rng(rng.getrandbits(64))
    own = flavour == "livejournal"
    topics = users if own else (pages or max(1, users // 10))
    communities = communities or COMMUNITIES[flavour]
    home = gen.integers(communities, size=users)
    community = home[:topics] if own else gen.integers(communities, size=topics)
    popularity = (np.arange(1, topics + 1, dtype=float) ** -alpha)[gen.permutation(topics)]
    members = [np.flatnonzero(community == c) for c in range(communities)]
    cdfs = [np.cumsum(popularity[m]) / popularity[m].sum() if len(m) else None for m in members]
    overall = np.cumsum(popularity) / popularity.sum()
    counts = np.minimum(np.floor((1 - gen.random(users)) ** (-1 / (exponent - 1))), max_subs).astype(int)
    local = gen.binomial(counts, LOCALITY[flavour] if locality is None else locality)
    prefix = "u" if own else "p"
    out: dict[str, set[str]] = {}
    for u in range(users):
        c, cdf = home[u], cdfs[home[u]]
        picks = members[c][np.searchsorted(cdf, gen.random(local[u]))] if cdf is not None else np.empty(0, int)
        far = np.searchsorted(overall, gen.random(counts[u] - local[u]))
        out[f"u{u}"] = {f"{prefix}{t}" for t in (*picks.tolist(), *far.tolist())}
    return out


def universe(subs: dict[str, set[str]], seeds: int, grow: str, min_subscribers: int,
             rng: random.Random) -> dict[str, set[str]]:
    """One self-contained universe (stan.md §6.2, steps 1-5) of ``subs`` (user -> topics)."""
    topics = sorted({t for ts in subs.values() for t in ts})
    known = set(topics)
    seed_set = set(rng.sample(topics, min(seeds, len(topics))))
    grown = set(seed_set)
    for user, ts in sorted(subs.items()):
        if ts & seed_set:
            if grow == "own_topic":
                if user in known:
                    grown.add(user)
            else:
                grown.add(rng.choice(sorted(ts)))
    restricted = {u: ts & grown for u, ts in subs.items() if ts & grown}
    counts = Counter(t for ts in restricted.values() for t in ts)
    pruned = {u: {t for t in ts if counts[t] >= min_subscribers} for u, ts in restricted.items()}
    return {u: ts for u, ts in pruned.items() if ts}


@functools.lru_cache(maxsize=8)
def build(flavour: str, users: int, pages: int | None, communities: int | None, locality: float | None, alpha: float,
          exponent: float, max_subs: int, seeds: int, min_subscribers: int, candidates: int,
          seed: int) -> tuple[frozenset[str], ...]:
    """The universe's subscriptions, one per node (nodes in population order). Cached: the
    experiment's validation (which names the node count) and the run build the same one."""
    rng = random.Random(f"{seed}:universe")
    subs = population(flavour, users, pages, communities, locality, alpha, exponent, max_subs, rng)
    built = [universe(subs, seeds, GROW[flavour], min_subscribers, rng) for _ in range(candidates)]
    ratio = [len({t for ts in u.values() for t in ts}) / max(1, len(u)) for u in built]
    median = sorted(range(candidates), key=lambda k: (ratio[k], k))[candidates // 2]
    return tuple(frozenset(ts) for ts in built[median].values())
