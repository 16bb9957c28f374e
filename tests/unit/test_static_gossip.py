"""static_gossip (node/protocols/static_gossip/protocol.py): Ferretti's Alg. 2 on a fixed graph, run as real
cores over the seeded simulator (ferretti-gossip.md §5.3)."""

import random
from collections import defaultdict

import numpy as np
import pytest

from controller.experiment.topology import pair_stubs
from node.kit import create_protocol
from node.kit.links import LinkRule
from node.kit.types import Descriptor
from node.protocols.static_gossip.protocol import StaticGossipConfig, coin
from node.sim import Simulation
from tests.helpers import spans


def network(adj, subs, *, seed=0, gamma=0.2, ttl=255, coin_source="per_link", jitter_ms=0.0):
    """Cores on graph ``adj``; the link seed (``seed``) only changes the jitter, so arrival order."""
    cfg = StaticGossipConfig(gamma=gamma, ttl=ttl, coin=coin_source)
    sim = Simulation(seed=seed, link_rules=[LinkRule(delay_ms=10, jitter_ms=jitter_ms)], validate=True)
    for i in range(len(adj)):
        sim.add_node(create_protocol("static_gossip", Descriptor(i, f"n{i}", subs[i]), cfg, random.Random(f"node:{i}")))
    for i, vs in enumerate(adj):
        sim.start_node(i, [Descriptor(j, f"n{j}", subs[j]) for j in vs])
    return sim


def graph(n=300, lam=4.0, sigma=0.2, seed=1):
    gen = np.random.default_rng(seed)
    adj = pair_stubs(gen.poisson(lam, n), gen)
    subs = [frozenset({"t"}) if gen.random() < sigma else frozenset() for _ in range(n)]
    return adj, subs


def run(sim, sources, topic="t", spacing=1.0):
    for k, src in enumerate(sources):
        sim.call_at(k * spacing, lambda src=src: sim.publish(src, topic, b"x"))
    sim.run_until(len(sources) * spacing + 5)
    rows = spans(sim)
    reached = defaultdict(set)
    for r in rows:
        reached[r["event_id"]].add(r["node"])
    return rows, {e: frozenset(v) for e, v in reached.items()}


SOURCES = list(range(0, 300, 7))


def test_the_reached_set_does_not_depend_on_arrival_order():
    """With per-link coins an event reaches the same nodes whatever the link delays; with coins
    drawn from each node's stream in handling order it does not (the check can fail)."""
    adj, subs = graph()
    fixed = [run(network(adj, subs, seed=s, jitter_ms=9.0), SOURCES, spacing=0.05)[1] for s in (1, 2)]
    assert fixed[0] == fixed[1] and sum(len(v) for v in fixed[0].values()) > 3 * len(SOURCES)
    stream = [run(network(adj, subs, seed=s, jitter_ms=9.0, coin_source="stream"), SOURCES, spacing=0.05)[1]
              for s in (1, 2)]
    assert stream[0] != stream[1]


def test_reached_set_is_the_reachable_set_of_the_open_links():
    """Oracle: a BFS from the source over links u -> v that are open (v subscribes, or u's coin for
    the event on that link is below gamma), every receiver relaying."""
    adj, subs = graph()
    sim = network(adj, subs)
    rows, reached = run(sim, SOURCES)
    published = {r["event_id"]: r["node"] for r in rows if r["name"] == "publish"}
    for event, src in published.items():
        seen, frontier = {src}, [src]
        while frontier:
            u = frontier.pop()
            h = sim.nodes[u].rule.event_key(event)
            for v in adj[u]:
                if v not in seen and ("t" in subs[v] or coin(h, v) < 0.2):
                    seen.add(v)
                    frontier.append(v)
        assert reached[event] == seen, event


def test_interested_neighbours_always_others_never_with_gamma_zero():
    adj, subs = graph(sigma=0.3)
    rows, reached = run(network(adj, subs, gamma=0.0), SOURCES)
    got = [r for r in rows if r["name"] == "receive"]
    assert got and all(r["subscriber"] for r in got)


def test_ttl_bounds_hops_and_a_copy_at_the_ttl_is_delivered_not_forwarded():
    n = 10
    path = [[j for j in (i - 1, i + 1) if 0 <= j < n] for i in range(n)]
    subs = [frozenset({"t"})] * n
    rows, reached = run(network(path, subs, gamma=1.0, ttl=3), [0])
    [event] = reached
    assert reached[event] == {0, 1, 2, 3}
    assert max(r["hops"] for r in rows if r["name"] == "receive") == 3


def test_never_back_to_the_sender_and_at_most_once_per_link():
    adj, subs = graph(sigma=0.5)
    rows, _ = run(network(adj, subs, gamma=0.5, jitter_ms=5.0), SOURCES, spacing=0.05)
    got = [r for r in rows if r["name"] == "receive"]
    links = [(r["event_id"], r["from_node"], r["node"]) for r in got]
    assert len(links) == len(set(links))
    first_from = {(r["event_id"], r["node"]): r["from_node"] for r in got if r["first_copy"]}
    assert not [x for x in links if first_from.get((x[0], x[1])) == x[2]]


def test_coin_is_uniform_and_keyed():
    u = np.array([coin(12345, v) for v in range(50_000)])
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.002
    assert coin(1, 7) != coin(2, 7)


def test_gamma_out_of_range_is_refused():
    with pytest.raises(ValueError, match="gamma"):
        StaticGossipConfig(gamma=1.5)
