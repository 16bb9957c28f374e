import random
from collections import Counter

import numpy as np
import pytest

from controller.experiment import universes, workloads
from controller.experiment.population import UniverseWorkload
from controller.experiment.schema import ExperimentError, parse_experiment
from controller.experiment.workloads import PlanError
from tests.conftest import ROOT


def render(n, **workload):
    return workloads.render(parse_experiment({"seed": 3, "nodes": {"count": n}, "workload": workload}))


def test_uniform_sizes_and_spread():
    subs = render(2000, model="uniform", topics=10, subscriptions={"min": 2, "max": 4})
    assert {len(s) for s in subs} == {2, 3, 4}
    per_topic = Counter(t for s in subs for t in s)
    assert len(per_topic) == 10
    mean = sum(per_topic.values()) / 10
    assert all(abs(v - mean) < 0.15 * mean for v in per_topic.values())


@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.5])
def test_zipf_exponent_fits_back(alpha):
    subs = render(20000, model="zipf", topics=100, alpha=alpha, subscriptions={"min": 1, "max": 1})
    assert workloads.fit_zipf_alpha(subs) == pytest.approx(alpha, abs=0.12)


def test_draws_are_without_replacement():
    subs = render(500, model="zipf", topics=30, alpha=2.0, subscriptions={"min": 10, "max": 10})
    assert all(len(s) == 10 for s in subs)


def test_nyse_top_tenth_holds_55_percent():
    beta = workloads.nyse_beta(100)
    assert beta == pytest.approx(0.0798, abs=0.001)  # spidercast.md §6.2
    w = np.exp(-beta * np.arange(1, 101))
    assert w[:10].sum() / w.sum() == pytest.approx(0.55, abs=1e-6)


def test_spidercast_popularity_models_order_by_skew():
    tops = {}
    for pop in ("uniform", "rss", "nyse"):
        subs = render(3000, model="spidercast", topics=100, popularity=pop, subscriptions={"min": 1, "max": 1})
        counts = sorted(Counter(t for s in subs for t in s).values(), reverse=True)
        tops[pop] = sum(counts[:10]) / 3000
    assert tops["uniform"] < tops["rss"] < tops["nyse"]
    assert tops["nyse"] == pytest.approx(0.55, abs=0.04)


def test_stan_grid_matches_the_spec_calibration():
    # stan.md §6.2: N = 100, T = 16 gives about 4.8 subscriptions per node, 30 subscribers per topic.
    per_node, per_topic = [], []
    for seed in range(5):
        subs = workloads.render(parse_experiment({"seed": seed, "nodes": {"count": 100},
                                                  "workload": {"model": "stan_grid", "topics": 16}}))
        per_node.append(np.mean([len(s) for s in subs]))
        per_topic.append(np.mean(list(Counter(t for s in subs for t in s).values())))
    assert np.mean(per_node) == pytest.approx(4.8, rel=0.25)
    assert np.mean(per_topic) == pytest.approx(30, rel=0.25)


def test_social_directed_and_undirected():
    directed = render(300, model="social", directed=True)
    undirected = render(300, model="social", directed=False)
    assert len(directed) == len(undirected) == 300
    # Undirected: u follows v iff v follows u.
    assert all((f"u{i}" in undirected[int(t[1:])]) for i, s in enumerate(undirected) for t in s)
    assert not all((f"u{i}" in directed[int(t[1:])]) for i, s in enumerate(directed) for t in s)
    # Heavy-tailed subscribers per topic, no self-subscription.
    counts = sorted(Counter(t for s in directed for t in s).values())
    assert counts[-1] > 10 * np.median(counts)
    assert all(f"u{i}" not in s for i, s in enumerate(directed))


def test_social_from_an_edge_list_file():
    path = ROOT.parent / "shared" / "datasets" / "ego-facebook" / "facebook_combined.txt"
    if not path.exists():
        pytest.skip(f"dataset not present: {path}")
    subs = render(500, model="social", graph=str(path), directed=False)
    assert len(subs) == 500 and np.mean([len(s) for s in subs]) > 5


def test_trace_import_and_errors(tmp_path):
    f = tmp_path / "subs.txt"
    f.write_text("# node topic\nalice news\nalice sport\nbob news\ncarol tech\n")
    subs = render(2, model="trace", path=str(f))
    assert subs == [frozenset({"news", "sport"}), frozenset({"news"})]
    with pytest.raises(PlanError, match="3 nodes in the trace, fewer than nodes.count = 4"):
        render(4, model="trace", path=str(f))
    f.write_text("alice news\nbob\n")
    with pytest.raises(PlanError, match=r"subs.txt:2: expected 'node topic'"):
        render(1, model="trace", path=str(f))


def test_universe_builder_prunes_small_topics():
    rng = random.Random(1)
    subs = {f"user{i}": {f"t{rng.randrange(40)}" for _ in range(5)} | {f"user{i}"} for i in range(400)}
    uni = universes.universe(subs, seeds=3, grow="random_topic", min_subscribers=30, rng=random.Random(2))
    counts = Counter(t for ts in uni.values() for t in ts)
    assert uni and min(counts.values()) >= 30 and all(uni.values())
    lj = universes.universe(subs, seeds=3, grow="own_topic", min_subscribers=1, rng=random.Random(2))
    assert any(t.startswith("user") for ts in lj.values() for t in ts)  # grown by users' own topics


@pytest.mark.parametrize("flavour", ["livejournal", "wikipedia"])
def test_a_universe_workload_is_self_contained_and_fixes_the_node_count(flavour):
    w = {"model": "universe", "flavour": flavour, "population": 3000, "seeds": 40, "min_subscribers": 20}
    with pytest.raises(ExperimentError, match=r"universe of 40 seeds has (\d+) nodes; set nodes.count: \1"):
        parse_experiment({"nodes": {"count": 7}, "workload": w})
    size = len(UniverseWorkload(**w).build())
    subs = render(size, **w)
    counts = Counter(t for s in subs for t in s)
    assert len(subs) == size and all(subs) and min(counts.values()) >= 20
    assert subs == render(size, **w)  # a pure function of its parameters
    assert subs == workloads.render(parse_experiment({"seed": 9, "nodes": {"count": size}, "workload": w}))
    more = len(UniverseWorkload(**{**w, "seeds": 160}).build())
    assert len({t for s in render(more, **{**w, "seeds": 160}) for t in s}) > len(counts)  # more seeds, more topics


def test_describe_reports_distributions_and_correlation():
    subs = [frozenset({"a", "b"}), frozenset({"a", "b"}), frozenset({"c"})]
    d = workloads.describe(subs, random.Random(0))
    assert d["nodes"] == 3 and d["topics"] == 3
    assert d["subscriptions_per_node"]["max"] == 2 and d["subscribers_per_topic"]["max"] == 2
    # tdi(3): each node averages its (here at most 2) overlaps: a,b -> (100 + 0) / 2 twice; c -> 0.
    assert d["correlation"]["tdi(3)"] == pytest.approx((50 + 50 + 0) / 3)


def link_sharing_by_hand(subs):
    """Per node: the set of its first successors and predecessors by ring id, ring by ring."""
    from node.protocols.poldercast.rings import ring_id

    members = {}
    for i, s in enumerate(subs):
        for t in s:
            members.setdefault(t, []).append(i)
    neighbours, links = [set() for _ in subs], [0] * len(subs)
    for ring in members.values():
        if len(ring) < 2:
            continue
        ring = sorted(ring, key=ring_id)
        for k, x in enumerate(ring):
            neighbours[x] |= {ring[(k + 1) % len(ring)], ring[k - 1]}
            links[x] += 2
    return sum(map(len, neighbours)), sum(links)


def test_link_sharing_counts_distinct_true_ring_neighbours_per_target_link():
    subs = render(400, model="social", directed=False)
    got = workloads.link_sharing(subs)
    distinct, links = link_sharing_by_hand(subs)
    assert (got["distinct_neighbours"], got["target_links"]) == (distinct, links)
    assert got["distinct_per_link"] == distinct / links
    assert got["distinct_per_node"] == distinct / sum(1 for s in subs if any(
        sum(t in other for other in subs) >= 2 for t in s))
    assert sum(b["nodes"] for b in got["by_subscriptions"]) == sum(1 for s in subs if s)
    # a clique of 5 (each follows the other four): a node's 8 target links in its 4 rings of 4
    # go to the 4 other nodes
    clique = [frozenset(f"u{j}" for j in range(5) if j != i) for i in range(5)]
    assert workloads.link_sharing(clique)["distinct_per_link"] == 0.5


def test_the_geometric_social_graph_keeps_the_heavy_tail_and_shares_ring_links():
    chung_lu = render(1000, model="social", directed=False)
    geometric = render(1000, model="social", directed=False, graph="geometric")
    sizes = [len(s) for s in geometric]
    assert max(sizes) > 8 * np.median(sizes)
    assert workloads.link_sharing(geometric)["distinct_per_link"] < 0.75 * workloads.link_sharing(chung_lu)["distinct_per_link"]
