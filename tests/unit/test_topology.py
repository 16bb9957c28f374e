"""Static topologies (controller/experiment/topology.py) and the plans built on them: several networks in
one run, sources among all nodes, the bernoulli workload."""

import math

import numpy as np
import pytest

from controller.experiment import plans, topology, workloads
from controller.experiment.datafiles import PlanError
from controller.experiment.schema import ExperimentError, parse_experiment


def exp(**sections):
    return parse_experiment({"name": "t", "seed": 5, "backend": "sim", **sections})


def edges(adj):
    return {(u, v) for u, vs in enumerate(adj) for v in vs}


def test_poisson_graph_is_simple_undirected_with_the_mean_degree_and_reproducible():
    e = exp(nodes={"count": 10_000}, topology={"model": "poisson", "mean_degree": 5})
    adj, st = topology.render(e)
    es = edges(adj)
    assert all((v, u) in es for u, v in es) and all(u != v for u, v in es)
    assert all(len(set(vs)) == len(vs) for vs in adj)
    assert st["nodes"] == 10_000 and st["edges"] == len(es) // 2
    assert abs(st["mean_degree"] - 5) < 0.1 and abs(st["mean_degree_squared"] - 30) < 1.0
    assert sum(st["degree_histogram"].values()) == 10_000
    assert st["isolated"] == st["degree_histogram"].get("0", 0) > 0  # degree-0 nodes stay (§4.1)
    assert 9_800 < st["giant_component"] < 10_000 and st["components"] > 1
    assert topology.render(e)[1]["digest"] == st["digest"]
    assert topology.render(exp(seed=6, nodes={"count": 10_000}, topology={"model": "poisson"}))[1]["digest"] != st["digest"]


@pytest.mark.parametrize("b,n", [(1.0, 2482), (1.1, 1831), (1.2, 1448), (1.3, 1206), (1.4, 1041), (1.5, 919)])
def test_acl_sizes_are_the_specs(b, n):
    """ferretti-gossip.md §4.2: the floor form gives 2,482 nodes at a = 6, b = 1 (the paper's)."""
    e = exp(nodes={"count": n}, topology={"model": "acl", "a": 6, "b": b})
    assert e.topology.size() == n
    degrees = topology.acl_degrees(6, b)
    assert len(degrees) == n and degrees.max() == math.floor(math.exp(6 / b)) and (degrees == 1).sum() == 403


def test_acl_after_merging_multi_edges_has_the_specs_moments():
    """§4.2 table: b = 1 drops from the nominal <k> 53.8 to about 47.2 once multi-edges merge."""
    _, st = topology.render(exp(nodes={"count": 2482}, topology={"model": "acl", "a": 6, "b": 1}))
    assert st["nodes"] == 2482 and 45.5 < st["mean_degree"] < 49


def test_acl_names_the_node_count_it_needs():
    with pytest.raises(ExperimentError, match="has 1831 nodes; set nodes.count: 1831"):
        exp(nodes={"count": 2482}, topology={"model": "acl", "b": 1.1})


def test_configuration_model_from_a_degree_file(tmp_path):
    path = tmp_path / "degrees.txt"
    path.write_text("# a 3-regular sequence\n" + "3\n" * 1000)
    adj, st = topology.render(exp(nodes={"count": 1000}, topology={"model": "configuration", "degrees": str(path)}))
    assert st["max_degree"] <= 3 and st["degree_histogram"]["3"] > 950  # a few lose a self-loop or double link
    with pytest.raises(PlanError, match="has 1000 degrees; nodes.count is 999"):
        topology.render(exp(nodes={"count": 999}, topology={"model": "configuration", "degrees": str(path)}))
    path.write_text("1\nx\n")
    with pytest.raises(PlanError, match=r"degrees.txt:2: expected a degree"):
        topology.render(exp(nodes={"count": 2}, topology={"model": "configuration", "degrees": str(path)}))


def test_small_world_keeps_the_lattice_degree_on_average():
    _, st = topology.render(exp(nodes={"count": 500}, topology={"model": "small_world", "neighbours": 6, "rewire": 0.1}))
    assert st["mean_degree"] == 6 and st["components"] == 1


def test_stats_count_components_and_isolated_nodes():
    st = topology.stats([[1], [0], [3], [2], []])
    assert (st["components"], st["giant_component"], st["isolated"], st["edges"]) == (3, 2, 1, 2)


def test_bernoulli_workload_subscribes_each_node_with_probability_sigma():
    subs = workloads.render(exp(nodes={"count": 20_000}, workload={"model": "bernoulli", "topics": 2, "sigma": 0.05}))
    for t in ("t0000", "t0001"):
        assert abs(sum(t in s for s in subs) / 20_000 - 0.05) < 0.005
    assert any(not s for s in subs)


def test_networks_are_disjoint_copies_with_their_own_seeds_topics_and_sources():
    spec = dict(nodes={"count": 300}, topology={"model": "poisson", "mean_degree": 4},
                workload={"model": "bernoulli", "sigma": 0.2}, publications={"count": 50, "publisher": "any"},
                sim={"networks": 3})
    plan = plans.render(exp(**spec))
    assert len(plan.subscriptions) == 900 and len(plan.topology) == 3 and plan.static
    assert len({g["digest"] for g in plan.topology}) == 3
    for node, cs in enumerate(plan.contacts):
        assert all(c // 300 == node // 300 for c in cs)
        assert all(t.startswith(f"n{node // 300}.") for t in plan.subscriptions[node])
    assert [sum(p.node // 300 == k for p in plan.publications) for k in range(3)] == [50, 50, 50]
    assert all(p.topic.startswith(f"n{p.node // 300}.") for p in plan.publications)
    # sources are any node, subscribed or not (ferretti-gossip.md §10 item 7)
    assert any(p.topic not in plan.subscriptions[p.node] for p in plan.publications)
    # network 0 of a multi-network run is the single-network run, renamed
    one = plans.render(exp(**{**spec, "sim": {"networks": 1}}))
    assert one.contacts == plan.contacts[:300]
    assert [frozenset("n0." + t for t in s) for s in one.subscriptions] == plan.subscriptions[:300]


def test_several_networks_are_a_simulation_without_churn():
    with pytest.raises(ExperimentError, match="only the sim backend"):
        parse_experiment({"backend": "local", "sim": {"networks": 2}})
    with pytest.raises(ExperimentError, match="no churn"):
        exp(sim={"networks": 2}, churn={"model": "sessions"})


def test_a_rejoining_node_on_a_static_graph_gets_its_neighbours_back():
    e = exp(nodes={"count": 50}, topology={"model": "poisson", "mean_degree": 4})
    plan = plans.render(e)
    node = next(i for i, c in enumerate(plan.contacts) if c)
    assert plans.join_contacts(e, plan, node, 3.0, set(range(50))) == plan.contacts[node]
    assert np.mean([len(c) for c in plan.contacts]) > 3
