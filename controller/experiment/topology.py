"""Static overlay topologies (``topology:``): seeded graphs the controller builds once per network
and hands to the nodes as their contacts (ferretti-gossip.md §4).

Configuration-model graphs (Poisson, ACL power law, a given degree sequence) draw a degree per
node and pair the stubs at random. Choices not in the paper (§4.1), the same for every model: an
odd stub total gets one more stub on a random node; self-loops are dropped and multi-edges
collapse to one link (the static layer keeps a neighbour *set*, so a double link cannot mean two
gossip draws); degree-0 nodes stay, isolated. Small worlds come from networkx's Watts-Strogatz.

Each graph is returned as sorted neighbour lists with its statistics (``stats``: the realised
degree histogram the analytic model is evaluated on, and the connected components).
"""

from __future__ import annotations

import hashlib
import random

import networkx as nx
import numpy as np

from controller.experiment.datafiles import PlanError, data_lines
from controller.experiment.population import AclTopology, ConfigurationTopology, PoissonTopology, SmallWorldTopology
from controller.experiment.schema import Experiment

Adjacency = list[list[int]]


def render(exp: Experiment) -> tuple[Adjacency, dict] | None:
    """The graph of ``exp.topology`` over ``nodes.count`` nodes and its stats; None for ``none``."""
    t, n = exp.topology, exp.nodes.count
    gen = np.random.default_rng(random.Random(f"{exp.seed}:topology").getrandbits(64))
    if isinstance(t, PoissonTopology):
        adj = pair_stubs(gen.poisson(t.mean_degree, n), gen)
    elif isinstance(t, AclTopology):
        adj = pair_stubs(gen.permutation(acl_degrees(t.a, t.b)), gen)
    elif isinstance(t, ConfigurationTopology):
        adj = pair_stubs(read_degrees(t.degrees, n), gen)
    elif isinstance(t, SmallWorldTopology):
        g = nx.watts_strogatz_graph(n, t.neighbours, t.rewire, seed=int(gen.integers(2**32)))
        adj = [sorted(g[v]) for v in range(n)]
    else:
        return None
    return adj, stats(adj)


def acl_degrees(a: float, b: float) -> np.ndarray:
    """The ACL degree sequence (§4.2, ``AclTopology.counts``): floor(e^a / x^b) nodes of degree x."""
    counts = AclTopology(model="acl", a=a, b=b).counts()
    return np.concatenate([np.full(c, x, dtype=np.int64) for x, c in counts])


def read_degrees(path: str, n: int) -> np.ndarray:
    """One non-negative integer per line ('#' comments), exactly ``n`` of them."""
    out = []
    for lineno, line in data_lines(path):
        try:
            d = int(line)
        except ValueError:
            raise PlanError(f"topology.degrees: {path}:{lineno}: expected a degree (an integer)") from None
        if d < 0 or d >= n:
            raise PlanError(f"{path}:{lineno}: degree {d} outside 0..{n - 1}")
        out.append(d)
    if len(out) != n:
        raise PlanError(f"topology.degrees: {path} has {len(out)} degrees; nodes.count is {n}")
    return np.array(out, dtype=np.int64)


def pair_stubs(degrees: np.ndarray, gen: np.random.Generator) -> Adjacency:
    """Random stub matching: one stub per unit of degree, shuffled and paired in order;
    self-loops dropped, multi-edges merged."""
    n = len(degrees)
    degrees = np.asarray(degrees, dtype=np.int64).copy()
    if degrees.sum() % 2:
        degrees[gen.integers(n)] += 1
    stubs = np.repeat(np.arange(n, dtype=np.int64), degrees)
    gen.shuffle(stubs)
    u, v = stubs[0::2], stubs[1::2]
    keep = u != v
    lo, hi = np.minimum(u, v)[keep], np.maximum(u, v)[keep]
    edges = np.unique(lo * n + hi)
    adj: Adjacency = [[] for _ in range(n)]
    for a, b in zip((edges // n).tolist(), (edges % n).tolist()):
        adj[a].append(b)
        adj[b].append(a)
    return [sorted(x) for x in adj]


def stats(adj: Adjacency) -> dict:
    """Size, degree moments and histogram, components (count, giant size, isolated nodes) and a
    digest of the edge list (to tell graphs apart in a manifest)."""
    deg = np.array([len(x) for x in adj], dtype=np.int64)
    g = nx.Graph()
    g.add_nodes_from(range(len(adj)))
    g.add_edges_from((u, v) for u, vs in enumerate(adj) for v in vs if u < v)
    sizes = sorted((len(c) for c in nx.connected_components(g)), reverse=True)
    digest = hashlib.blake2b(repr(adj).encode(), digest_size=8).hexdigest()
    values, counts = np.unique(deg, return_counts=True)
    return {
        "nodes": len(adj), "edges": int(deg.sum() // 2),
        "mean_degree": float(deg.mean()) if len(deg) else 0.0,
        "mean_degree_squared": float((deg.astype(float) ** 2).mean()) if len(deg) else 0.0,
        "max_degree": int(deg.max()) if len(deg) else 0,
        "components": len(sizes), "giant_component": sizes[0] if sizes else 0,
        "isolated": int((deg == 0).sum()),
        "degree_histogram": {str(k): int(c) for k, c in zip(values.tolist(), counts.tolist())},
        "digest": digest,
    }
