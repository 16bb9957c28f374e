"""StaN (node/protocols/stan/protocol.py): weights, collect walks, the view rule and dissemination, as real
cores over the seeded simulator (stan.md §4), and per-topic bootstrap contacts (controller/plans)."""

import hashlib
import math
import random
import statistics
from collections import Counter

import networkx as nx
import pytest

from analysis.overlay import Snapshot
from analysis.protocols.stan import StanAnalysis, omniscient_pvs
from controller.experiment import plans
from controller.experiment.schema import parse_experiment
from node.kit import create_protocol
from node.kit.links import LinkRule
from node.kit.types import Descriptor, EventMsg, LocalProtocolError, RemoteProtocolError, Send, Signal
from node.protocols.stan.protocol import COLLECTED, LAYER, WALK, StanConfig, weight
from node.sim import Simulation
from tests.helpers import spans


def experiment(**params):
    return parse_experiment({
        "name": "stan-unit", "seed": 4, "backend": "sim",
        "protocol": {"name": "stan", "params": {"round_ms": 1000, **params}},
        "nodes": {"count": 100, "contacts": "per_topic"},
        "workload": {"model": "stan_grid", "topics": 16},
    })


def network(exp):
    """The file's plan as cores over the simulator, 5 ms links, invariants checked every step."""
    plan = plans.render(exp)
    sim = Simulation(seed=exp.seed, link_rules=[LinkRule(delay_ms=5)], validate=True, wire_codec=False)
    subs = plan.subscriptions
    for i in range(exp.nodes.count):
        sim.add_node(create_protocol("stan", Descriptor(i, f"n{i}", subs[i]), exp.protocol.params, random.Random(i)))
    for i in range(exp.nodes.count):
        sim.start_node(i, [Descriptor(j, f"n{j}", plans.contact_topics(plan, i, j)) for j in plan.contacts[i]])
    return sim, plan


def views(sim):
    return {i: {t: list(v) for t, v in core.layers[LAYER].views.items()} for i, core in sim.nodes.items()}


def pvs(vs):
    return statistics.fmean(len({q for v in per.values() for q in v}) for per in vs.values())


def lvs(vs):
    return {i: sum(len(v) for v in per.values()) for i, per in vs.items()}


def core(node=0, topics=("a", "b"), **params):
    c = create_protocol("stan", Descriptor(node, f"n{node}", frozenset(topics)), StanConfig(**params), random.Random(1))
    return c


def test_the_weight_is_sha1_of_both_ids_and_is_not_symmetric():
    assert weight(3, 17) == int.from_bytes(hashlib.sha1(b"3|17").digest(), "big")
    assert weight(3, 17) != weight(17, 3)


def test_per_topic_contacts_are_samples_of_each_topics_subscribers_sized_for_connectivity():
    exp = experiment()
    plan = plans.render(exp)
    members = Counter(t for s in plan.subscriptions for t in s)
    for i, drawn in enumerate(plan.contact_topics):
        assert i not in drawn
        for t in plan.subscriptions[i]:
            chosen = [j for j, ts in drawn.items() if t in ts]
            n_t = members[t]
            assert len(chosen) == min(n_t - 1, math.ceil(math.log(n_t) - math.log(-math.log(0.99))))
            assert all(t in plan.subscriptions[j] for j in chosen)
        assert set(plan.contacts[i]) == set(drawn)


def test_rounds_lower_pvs_to_the_omniscient_reference_and_keep_lvs_and_connectivity():
    sim, plan = network(experiment())
    before = views(sim)
    sim.run_until(12.0)  # lock-step rounds at 2.5 .. 9.5 s
    after = views(sim)
    assert lvs(after) == lvs(before)
    assert pvs(after) < 0.75 * pvs(before)
    rows = [{"node": i, "per_topic": per} for i, per in after.items()]
    omniscient = statistics.fmean(omniscient_pvs(rows, {i: sorted(s) for i, s in enumerate(plan.subscriptions)}).values())
    assert pvs(after) == pytest.approx(omniscient, rel=0.03)
    for t in {t for s in plan.subscriptions for t in s}:
        g = nx.DiGraph((i, q) for i, per in after.items() for q in per.get(t, ()))
        assert nx.is_strongly_connected(g), t
    assert all(c.layers[LAYER].rounds_done == 8 for c in sim.nodes.values())


def test_without_optimisation_the_views_stay_as_bootstrapped():
    sim, _ = network(experiment(optimise=False))
    before = views(sim)
    sim.run_until(12.0)
    assert views(sim) == before
    assert sum(c["msgs_sent.stan"] for c in sim.stats.values()) == 0


def test_a_reply_keeps_the_k_lightest_candidates_without_self_or_non_subscribers():
    c = core(node=0)
    c.start(0.0, [Descriptor(j, f"n{j}", frozenset({"a"})) for j in (1, 2, 3)])
    layer = c.layers[LAYER]
    [walk] = [a for a in layer.tick(10.0)]
    assert isinstance(walk, Send) and walk.msg.kind == WALK and walk.msg.values[1] == 5
    walk_id = walk.msg.values[0]
    offered = [Descriptor(j, f"n{j}") for j in (0, *range(4, 40))]
    c.on_message(7, Signal(LAYER, COLLECTED, Descriptor(7, "n7"), tuple(offered), ("a",), (walk_id, 5, 6)), 10.1)
    candidates = [j for j in (1, 2, 3, *range(4, 40)) if j not in (5, 6)]
    assert list(layer.views["a"]) == sorted(candidates, key=lambda j: weight(0, j))[:3]
    # a reply nobody awaits (already taken) changes nothing and is counted
    c.on_message(7, Signal(LAYER, COLLECTED, Descriptor(7, "n7"), (Descriptor(99, "n99"),), ("a",), (walk_id,)), 10.2)
    assert layer.late == 1 and 99 not in layer.views["a"]
    assert c.counters() == {"replies_late": 1}


def test_a_walk_collects_each_visited_node_and_its_view_and_ends_at_ttl_zero():
    c = core(node=5, topics=("a",))
    c.start(0.0, [Descriptor(j, f"n{j}", frozenset({"a"})) for j in (6, 7)])
    origin = Descriptor(1, "n1")
    [fwd] = c.on_message(2, Signal(LAYER, WALK, Descriptor(2, "n2"), (origin, Descriptor(2, "n2")), ("a",), (9, 3)), 1.0)
    assert fwd.dst in (6, 7) and fwd.msg.values == (9, 2)
    ids = [d.node_id for d in fwd.msg.entries]
    assert ids[:3] == [1, 2, 5] and sorted(ids[3:]) == [6, 7]  # origin first, then the set
    [reply] = c.on_message(2, Signal(LAYER, WALK, Descriptor(2, "n2"), (origin,), ("a",), (9, 0)), 1.0)
    assert reply.dst == 1 and reply.msg.kind == COLLECTED and {d.node_id for d in reply.msg.entries} == {5, 6, 7}
    assert all(not d.topics for d in reply.msg.entries)  # walks never carry subscriptions
    [early] = c.on_message(2, Signal(LAYER, WALK, Descriptor(2, "n2"), (origin,), ("zzz",), (9, 4)), 1.0)
    assert early.dst == 1 and early.msg.values == (9, 5)  # not a subscriber: names itself


def test_malformed_walks_are_refused():
    c = core()
    c.start(0.0, [])
    for bad in (Signal(LAYER, WALK, Descriptor(2, "n2"), (), ("a",), (1, 2)),
                Signal(LAYER, WALK, Descriptor(2, "n2"), (Descriptor(2, "n2"),), ("a",), (1, 99)),
                Signal(LAYER, "nope", Descriptor(2, "n2"), (), ("a",), (1,)),
                Signal(LAYER, WALK, Descriptor(2, "n2"), (), ("a", "b"), (1, 2))):
        with pytest.raises(RemoteProtocolError):
            c.on_message(2, bad, 1.0)


def test_lockstep_rounds_fall_at_half_periods_at_least_one_and_a_half_periods_after_the_start():
    for now, first in ((0.0, 2.5), (0.9, 2.5), (1.2, 3.5), (7.0, 9.5)):
        c = core()
        [timer] = c.start(now, [])
        assert timer.at == pytest.approx(first)


def test_events_flood_the_topic_view_and_a_stray_copy_is_not_forwarded():
    sim, plan = network(experiment())
    topic = sorted({t for s in plan.subscriptions for t in s})[0]
    src = next(i for i, s in enumerate(plan.subscriptions) if topic in s)
    sim.call_at(1.0, lambda: sim.publish(src, topic, b"x"))
    sim.run_until(2.0)
    got = {s["node"] for s in spans(sim) if s["name"] == "receive" and s["node"] != src}
    assert got == {i for i, s in enumerate(plan.subscriptions) if topic in s} - {src}
    c = sim.nodes[src]
    outsider = next(t for t in {t for s in plan.subscriptions for t in s} if t not in c.topics)
    actions = c.on_message(3, EventMsg("9-0-1", outsider, b"", 9, 1), 3.0)
    assert [type(a).__name__ for a in actions] == ["Deliver"] and not actions[0].subscriber
    with pytest.raises(LocalProtocolError):
        c.publish(outsider, b"", 3.0)


def churned(**params):
    """90 nodes start; at 12 s nodes 0-9 crash and nodes 90-99 join with per-topic samples of
    the live subscribers; at 30 s one event per topic. Returns the missed (event topic, node) pairs."""
    exp = experiment(rounds=0, **params)
    subs = plans.render(exp).subscriptions
    sim = Simulation(seed=exp.seed, link_rules=[LinkRule(delay_ms=5)], validate=True, wire_codec=False)
    for i in range(100):
        sim.add_node(create_protocol("stan", Descriptor(i, f"n{i}", subs[i]), exp.protocol.params, random.Random(i)))
    rng = random.Random(0)

    def join(i, alive):
        drawn = plans.per_topic_contacts(exp, subs, i, plans.members_of_topics(subs, alive), rng)
        sim.start_node(i, [Descriptor(j, f"n{j}", ts) for j, ts in drawn.items()])

    for i in range(90):
        join(i, range(90))
    sim.run_until(12.0)
    for i in range(10):
        sim.stop_node(i)
    for i in range(90, 100):
        join(i, range(10, 100))
    sim.run_until(30.0)
    topics = sorted({t for s in subs for t in s})
    for t in topics:
        src = next(i for i in range(10, 100) if t in subs[i])
        sim.publish(src, t, b"x")
    sim.run_until(31.0)
    got = {(s["topic"], s["node"]) for s in spans(sim)}
    return {(t, i) for t in topics for i in range(10, 100) if t in subs[i] and (t, i) not in got}, sim


def test_without_peer_sampling_joiners_are_never_found():
    missed, _ = churned()
    assert {i for _, i in missed} & set(range(90, 100))  # pitfall 7: no walk ever collects a joiner


def test_churn_mode_drops_the_dead_and_finds_the_joiners():
    missed, sim = churned(omp="cyclon", snoop=True)
    assert not missed
    dead = set(range(10))
    for i in range(10, 100):
        core = sim.nodes[i].layers[LAYER]
        assert not dead & set(core.view), i
        assert all(len(v) == core.size[t] for t, v in core.views.items()), i


def test_under_churn_each_mean_is_over_its_snapshot_s_nodes_and_each_comparison_over_those_in_both():
    """Node 0 leaves before the last snapshot, node 3 joins after the first: the means agree
    with the rounds they summarise; the per-node improvement takes nodes 1 and 2 only."""
    subs = {p: ["a", "b"] for p in range(4)}
    first = [{"node": 0, "t_ns": 0, "per_topic": {"a": [1], "b": [2]}},
             {"node": 1, "t_ns": 0, "per_topic": {"a": [0], "b": [2]}},
             {"node": 2, "t_ns": 0, "per_topic": {"a": [1], "b": [0]}}]
    last = [{"node": 1, "t_ns": 9, "per_topic": {"a": [2], "b": [2]}},
            {"node": 2, "t_ns": 9, "per_topic": {"a": [1], "b": [3]}},
            {"node": 3, "t_ns": 9, "per_topic": {"a": [1], "b": [1]}}]
    analysis = StanAnalysis({"protocol": "stan"}, subs)
    analysis.add_snapshot(Snapshot.from_rows(first))
    analysis.add_snapshot(Snapshot.from_rows(last))
    m = analysis.metrics(last)
    assert m["ipvs_mean"] == m["rounds"][0]["pvs_mean"] == 2.0
    assert m["fpvs_mean"] == m["rounds"][-1]["pvs_mean"] == pytest.approx(4 / 3)
    assert m["omniscient_pvs_mean"] == statistics.fmean(omniscient_pvs(last, subs).values())
    assert [p["node"] for p in m["per_node"]] == [1, 2] and m["nodes"] == 2
    assert m["improvement_pct"]["mean"] == pytest.approx(statistics.fmean([50.0, 0.0]))
