"""Subscription workloads: pure, seeded functions from the experiment to each node's topics.

Every model returns one ``frozenset`` of topic names per node (``nodes.count`` of them). Topic
names are ``t0000``…; the social and trace models name topics after their users/labels. Where the
papers leave something open the choice is a named field of the model (see controller/experiment/schema.py)
and is described in docs/plans.md.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path

import networkx as nx
import numpy as np

from controller.experiment import content_workloads, universes
from controller.experiment.datafiles import PlanError, data_lines
from controller.experiment.population import (
    BernoulliWorkload,
    ContentWorkload,
    SocialWorkload,
    SpiderCastWorkload,
    StanGridWorkload,
    TraceWorkload,
    UniformWorkload,
    UniverseWorkload,
    ZipfWorkload,
)
from controller.experiment.schema import Experiment
from node.protocols.dps.content import format_filter

Subscriptions = list[frozenset[str]]


def topic_name(i: int) -> str:
    return f"t{i:04d}"


def render(exp: Experiment) -> Subscriptions:
    w = exp.workload
    rng = random.Random(f"{exp.seed}:subscriptions")
    n = exp.nodes.count
    if isinstance(w, UniformWorkload):
        return by_weights(np.ones(w.topics), n, w.subscriptions.min, w.subscriptions.max, rng)
    if isinstance(w, ZipfWorkload):
        return by_weights(zipf_weights(w.topics, w.alpha), n, w.subscriptions.min, w.subscriptions.max, rng)
    if isinstance(w, SpiderCastWorkload):
        return by_weights(spidercast_weights(w), n, w.subscriptions.min, w.subscriptions.max, rng)
    if isinstance(w, StanGridWorkload):
        return stan_grid(w, n, rng)
    if isinstance(w, SocialWorkload):
        return social(w, n, rng)
    if isinstance(w, TraceWorkload):
        return from_trace(w, n, rng)
    if isinstance(w, BernoulliWorkload):
        return bernoulli(w, n, rng)
    if isinstance(w, UniverseWorkload):
        return list(w.build())
    if isinstance(w, ContentWorkload):
        gen = content_workloads.ContentWorkload(w.name, exp.seed)
        return [frozenset(format_filter(gen.subscription(rng).preds)
                          for _ in range(rng.randint(w.subscriptions.min, w.subscriptions.max))) for _ in range(n)]
    raise PlanError(f"workload.model: unknown model {w.model!r}")


# --- popularity models --------------------------------------------------------------------


def zipf_weights(topics: int, alpha: float) -> np.ndarray:
    return np.arange(1, topics + 1, dtype=float) ** -alpha


def nyse_beta(topics: int, top_share: float = 0.55, top_fraction: float = 0.10) -> float:
    """β of p_i ∝ exp(−β i) such that the top `top_fraction` of topics hold `top_share`."""
    k = max(1, round(topics * top_fraction))

    def share(beta: float) -> float:
        w = np.exp(-beta * np.arange(1, topics + 1))
        return w[:k].sum() / w.sum()

    lo, hi = 0.0, 50.0
    for _ in range(100):  # share() grows with beta: bisect
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if share(mid) < top_share else (lo, mid)
    return (lo + hi) / 2


def spidercast_weights(w: SpiderCastWorkload) -> np.ndarray:
    if w.popularity == "uniform":
        return np.ones(w.topics)
    if w.popularity == "rss":
        return zipf_weights(w.topics, 0.5)
    if w.popularity == "zipf":
        return zipf_weights(w.topics, w.alpha)
    return np.exp(-nyse_beta(w.topics) * np.arange(1, w.topics + 1))


def by_weights(weights: np.ndarray, n: int, k_min: int, k_max: int, rng: random.Random) -> Subscriptions:
    """Each node draws k ~ U[k_min, k_max] distinct topics, successive draws in proportion to the
    weights (without replacement, as spidercast.md §6.2 asks), via Efraimidis-Spirakis keys."""
    if k_max > len(weights):
        raise PlanError(f"workload.subscriptions.max ({k_max}) exceeds workload.topics ({len(weights)})")
    gen = np.random.default_rng(rng.getrandbits(64))
    log_w = np.log(weights / weights.sum())
    out = []
    for _ in range(n):
        k = rng.randint(k_min, k_max)
        keys = np.log(gen.random(len(weights))) / np.exp(log_w)  # log(u) / w, larger is better
        picks = np.argpartition(-keys, k - 1)[:k]
        out.append(frozenset(topic_name(int(i)) for i in picks))
    return out


def bernoulli(w: BernoulliWorkload, n: int, rng: random.Random) -> Subscriptions:
    """Node v subscribes to topic t iff its uniform draw for (v, t) is below sigma."""
    draws = np.random.default_rng(rng.getrandbits(64)).random((n, w.topics)) < w.sigma
    names = [topic_name(t) for t in range(w.topics)]
    return [frozenset(names[t] for t in np.flatnonzero(row)) for row in draws]


# --- StaN's 2-D grid ----------------------------------------------------------------------


def stan_grid(w: StanGridWorkload, n: int, rng: random.Random) -> Subscriptions:
    r_min = w.radius_min if w.radius_min is not None else (0.12 if n < 1000 else 0.05)
    points: list[tuple[int, float, float]] = []
    for t in range(w.topics):
        while True:
            m = math.floor((1 - rng.random()) ** (-1 / (w.points_alpha - 1)))
            if m <= w.max_points:
                break
        points += [(t, rng.random(), rng.random()) for _ in range(m)]
    pts = np.array([(x, y) for _, x, y in points])
    owner = np.array([t for t, _, _ in points])
    subs = []
    for _ in range(n):
        x, y = rng.random(), rng.random()
        r = min(0.5, r_min * (1 - rng.random()) ** (-1 / (w.radius_alpha - 1)))
        d = np.abs(pts - (x, y))
        d = np.minimum(d, 1 - d)  # torus
        dist = np.hypot(d[:, 0], d[:, 1])
        inside = set(owner[dist <= r].tolist()) or {int(owner[np.argmin(dist)])}
        subs.append(inside)
    counts = Counter(t for s in subs for t in s)
    return [frozenset(topic_name(t) for t in s if counts[t] >= 2) for s in subs]


# --- social graphs ------------------------------------------------------------------------


def read_edge_list(path: str | Path) -> nx.DiGraph:
    """Whitespace-separated 'u v' lines; '#' and '%' start comments. Errors name file and line."""
    g = nx.DiGraph()
    for lineno, line in data_lines(path, comments="#%"):
        parts = line.split()
        if len(parts) < 2:
            raise PlanError(f"workload.graph: {path}:{lineno}: expected 'u v' (two node ids)")
        g.add_edge(parts[0], parts[1])
    return g


def synthetic_follower_graph(size: int, mean_follows: float, exponent: float, rng: random.Random) -> nx.DiGraph:
    """A directed Chung-Lu graph with heavy-tailed in- and out-degrees (as poldercast.md §7.2
    suggests when the real traces are missing): ``size * mean_follows`` follow draws, the
    follower and the followee each picked by its own power-law weight (exponent ``exponent``),
    self-follows and repeats dropped. Edge u -> v reads 'u follows v'."""
    gen = np.random.default_rng(rng.getrandbits(64))
    w = np.arange(1, size + 1, dtype=float) ** (-1 / (exponent - 1))
    w /= w.sum()
    draws = int(size * mean_follows)
    u = gen.choice(size, draws, p=gen.permutation(w))
    v = gen.choice(size, draws, p=gen.permutation(w))
    g = nx.DiGraph()
    g.add_nodes_from(range(size))
    g.add_edges_from((int(a), int(b)) for a, b in zip(u, v) if a != b)
    return g


def geometric_follower_graph(size: int, mean_follows: float, exponent: float, locality: float,
                             rng: random.Random, rows_per_chunk: int = 1024) -> nx.DiGraph:
    """A directed geometric inhomogeneous random graph (GIRG; Bringmann, Keusch, Lengler 2019) in
    one dimension: users sit at uniform positions on a circle and carry Chung-Lu weights (the
    same power law as ``synthetic_follower_graph`` for follows made and received); u follows v
    with probability ``min(1, c * w_out[u] * w_in[v] / (mean_follows * max(1, 2 * size * d)))
    ** locality``, d the circular distance. Near users follow each other and share followees, as
    friends on social graphs do (clustering about 0.5 to 0.7 here, against 0 for Chung-Lu), with
    the heavy tails kept. ``c`` is set by bisection so that a user makes ``mean_follows`` follows
    on average (computed exactly over a fixed sample of users)."""
    gen = np.random.default_rng(rng.getrandbits(64))
    w = np.arange(1, size + 1, dtype=float) ** (-1 / (exponent - 1))
    w_out, w_in = gen.permutation(w), gen.permutation(w)
    w_out *= mean_follows / w_out.mean()
    w_in *= 1 / w_in.mean()
    pos = gen.random(size)

    def probabilities(rows: np.ndarray, c: float) -> np.ndarray:
        d = np.abs(pos[rows, None] - pos[None, :])
        d = np.minimum(d, 1 - d)
        p = np.minimum(1.0, c * w_out[rows, None] * w_in[None, :] / (mean_follows * np.maximum(1.0, 2 * size * d)))
        p **= locality
        p[np.arange(len(rows)), rows] = 0.0
        return p

    probe = gen.choice(size, min(size, 512), replace=False)
    lo, hi = -12.0, 12.0  # log c
    for _ in range(40):
        mid = (lo + hi) / 2
        if probabilities(probe, np.exp(mid)).sum() / len(probe) * w_out.mean() / w_out[probe].mean() < mean_follows:
            lo = mid
        else:
            hi = mid
    c = np.exp((lo + hi) / 2)
    g = nx.DiGraph()
    g.add_nodes_from(range(size))
    for start in range(0, size, rows_per_chunk):
        rows = np.arange(start, min(size, start + rows_per_chunk))
        a, b = np.nonzero(gen.random((len(rows), size)) < probabilities(rows, c))
        g.add_edges_from(zip((a + start).tolist(), b.tolist()))
    return g


def bfs_sample(g: nx.DiGraph, n: int, seeds: int, rng: random.Random) -> list:
    """BFS over the (undirected view of the) graph from random seed users until n users."""
    if g.number_of_nodes() < n:
        raise PlanError(f"workload.graph: the graph has {g.number_of_nodes()} users, fewer than nodes.count = {n}")
    und = g.to_undirected(as_view=True)
    order = sorted(g.nodes, key=str)
    seen: dict = {}
    queue: list = []
    starts = rng.sample(order, min(seeds, len(order)))
    while len(seen) < n:
        if not queue:
            start = starts.pop() if starts else rng.choice([v for v in order if v not in seen])
            if start in seen:
                continue
            seen[start] = None
            queue.append(start)
        v = queue.pop(0)
        for u in sorted(und[v], key=str):
            if u not in seen and len(seen) < n:
                seen[u] = None
                queue.append(u)
    return list(seen)


def social(w: SocialWorkload, n: int, rng: random.Random) -> Subscriptions:
    if w.graph == "synthetic":
        g = synthetic_follower_graph(w.synthetic_nodes or 2 * n, w.mean_follows, w.exponent, rng)
    elif w.graph == "geometric":
        g = geometric_follower_graph(w.synthetic_nodes or 2 * n, w.mean_follows, w.exponent, w.locality, rng)
    else:
        g = read_edge_list(w.graph)
    users = bfs_sample(g, n, w.bfs_seeds, rng)
    index = {u: i for i, u in enumerate(users)}
    subs: list[set[str]] = [set() for _ in users]
    for u, v in g.subgraph(users).edges:
        subs[index[u]].add(f"u{index[v]}")       # u follows v: u subscribes to v's topic
        if not w.directed:
            subs[index[v]].add(f"u{index[u]}")
    return [frozenset(s) for s in subs]


# --- traces -------------------------------------------------------------------------------


def read_subscription_trace(path: str | Path) -> dict[str, set[str]]:
    """'node topic' lines -> {node label: topics}, in order of first appearance."""
    out: dict[str, set[str]] = {}
    for lineno, line in data_lines(path):
        parts = line.split()
        if len(parts) != 2:
            raise PlanError(f"workload.path: {path}:{lineno}: expected 'node topic'")
        out.setdefault(parts[0], set()).add(parts[1])
    return out


def from_trace(w: TraceWorkload, n: int, rng: random.Random) -> Subscriptions:
    subs = read_subscription_trace(w.path)
    if w.universe_seeds:
        subs = universes.universe(subs, w.universe_seeds, w.universe_grow, w.universe_min_subscribers, rng)
    if len(subs) < n:
        raise PlanError(f"{w.path}: {len(subs)} nodes in the trace, fewer than nodes.count = {n}")
    return [frozenset(ts) for ts in list(subs.values())[:n]]


# --- description --------------------------------------------------------------------------


def describe(subs: Subscriptions, rng: random.Random, sample: int = 500) -> dict:
    """Distributions of subscriptions per node and subscribers per topic, and correlation:
    SpiderCast's tdi(d) (mean of each node's d largest interest overlaps, d = 2 x mean
    subscription size) and the mean Jaccard similarity of random node pairs."""
    per_node = np.array([len(s) for s in subs])
    per_topic_c = Counter(t for s in subs for t in s)
    per_topic = np.array(sorted(per_topic_c.values()))

    def dist(a: np.ndarray) -> dict:
        if not len(a):
            return {"count": 0}
        return {"count": int(len(a)), "min": int(a.min()), "mean": float(a.mean()), "p50": float(np.median(a)),
                "p90": float(np.percentile(a, 90)), "p99": float(np.percentile(a, 99)), "max": int(a.max())}

    nodes = rng.sample(range(len(subs)), min(sample, len(subs)))
    d = max(1, round(2 * per_node.mean())) if len(per_node) else 1
    tdis, jac = [], []
    for v in nodes:
        if not subs[v]:
            continue
        overlaps = sorted(
            (100 * len(subs[v] & subs[u]) / min(len(subs[v]), len(subs[u])) for u in nodes if u != v and subs[u]),
            reverse=True,
        )
        tdis.append(float(np.mean(overlaps[:d])) if overlaps else 0.0)
        u = rng.choice(nodes)
        if u != v and subs[u]:
            jac.append(len(subs[v] & subs[u]) / len(subs[v] | subs[u]))
    return {
        "nodes": len(subs), "topics": len(per_topic_c),
        "subscriptions_per_node": dist(per_node), "subscribers_per_topic": dist(per_topic),
        "correlation": {f"tdi({d})": float(np.mean(tdis)) if tdis else None,
                        "mean_jaccard_random_pairs": float(np.mean(jac)) if jac else None,
                        "sampled_nodes": len(nodes)},
    }


def link_sharing(subs: Subscriptions) -> dict:
    """How much a node's true ring links are shared across its topics (PolderCast; node i has
    ring id ``ring_id(i)``, as in every backend): per node, its distinct true ring neighbours
    (the first successor and predecessor by ring id in every ring of two or more subscribers)
    over its target ring links (two per ring: the links the ring convergence measure counts).
    1 means every link goes to a node of its own; low values mean one neighbour closes many
    rings (friends of a user are friends of each other). Overall (summed over nodes) and in
    power-of-two bins of subscription size; ``distinct_per_node``: the mean number of true ring
    neighbours of a node with rings, the peers its RINGS layer must find and then keep visiting
    one exchange a cycle."""
    from node.protocols.poldercast.rings import ring_id

    n = len(subs)
    members: dict[str, list[int]] = {}
    for i, topics in enumerate(subs):
        for t in topics:
            members.setdefault(t, []).append(i)
    rid = [ring_id(i) for i in range(n)]
    links = np.zeros(n, dtype=np.int64)
    pairs: list[np.ndarray] = []
    for ring in members.values():
        if len(ring) >= 2:
            ordered = np.array(sorted(ring, key=rid.__getitem__), dtype=np.int64)
            links[ordered] += 2
            pairs += [ordered * n + np.roll(ordered, -1), ordered * n + np.roll(ordered, 1)]
    distinct = np.zeros(n, dtype=np.int64)
    if pairs:
        np.add.at(distinct, np.unique(np.concatenate(pairs)) // n, 1)
    sizes = np.array([len(s) for s in subs])
    has = links > 0
    bins = []
    for lo in sorted({1 << (int(k).bit_length() - 1) for k in sizes[has]}):
        sel = has & (sizes >= lo) & (sizes < 2 * lo)
        bins.append({"subscriptions_from": lo, "nodes": int(sel.sum()),
                     "distinct_per_link": float(distinct[sel].sum() / links[sel].sum())})
    return {"target_links": int(links.sum()), "distinct_neighbours": int(distinct.sum()),
            "distinct_per_link": float(distinct.sum() / links.sum()) if links.sum() else None,
            "distinct_per_node": float(distinct[has].mean()) if has.any() else None,
            "by_subscriptions": bins}


def fit_zipf_alpha(subs: Subscriptions) -> float:
    """Least-squares slope of log(subscribers) against log(rank): the Zipf exponent."""
    counts = np.array(sorted(Counter(t for s in subs for t in s).values(), reverse=True), dtype=float)
    ranks = np.arange(1, len(counts) + 1)
    slope, _ = np.polyfit(np.log(ranks), np.log(counts), 1)
    return float(-slope)
