"""DPS (node/core/dps.py), leader-based, as real cores over the seeded simulator: tree location
at the seed, group creation and joins, the spec's worked example, publication routing in both
traversals, the message count against the paper's bound, and refusal of bad input."""

import random
from collections import Counter

import pytest

from node.core import create_protocol
from node.core.content import format_event, parse_filter
from node.core.dps import DOWN, LAYER, DpsConfig
from node.core.semantic_tree import SemanticTree
from node.core.types import Descriptor, LocalProtocolError, RemoteProtocolError, Signal
from node.links import LinkRule
from node.sim import Simulation
from tests.helpers import spans


def network(subs: list[list[str]], *, traversal="root", seed=1, stagger_s=0.0, **params) -> Simulation:
    """Node 0 is every node's seed (``nodes.contacts: seed``); node i starts at i * stagger_s."""
    cfg = DpsConfig(traversal=traversal, **params)
    sim = Simulation(seed=seed, link_rules=[LinkRule(delay_ms=5)], validate=True, wire_codec=True)
    rng = random.Random(seed)
    n = len(subs)
    for i in range(n):
        sim.add_node(create_protocol("dps", Descriptor(i, f"n{i}", frozenset(subs[i])), cfg, random.Random(f"{seed}:{i}")))
    for i in range(n):
        contacts = ([0] if i else []) + rng.sample([j for j in range(1, n) if j != i], min(3, n - 2))
        sim.call_at(i * stagger_s, lambda i=i, c=contacts: sim.start_node(i, [Descriptor(j, f"n{j}") for j in c]))
    return sim


def leaders(sim: Simulation) -> dict[str, list[int]]:
    """label -> the nodes leading a group with that label."""
    out: dict[str, list[int]] = {}
    for i, core in sim.nodes.items():
        for m in core.layers[LAYER].groups.values():
            if m.ref.leader.node_id == i:
                out.setdefault(m.ref.label.canon(), []).append(i)
    return out


def receivers(sim: Simulation) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for s in spans(sim):
        if s["name"] == "receive":
            out.setdefault(s["event_id"], set()).add(s["node"])
    return out


def topic_run(traversal: str, n=60, topics=6, per_node=2, events=40):
    rng = random.Random(7)
    names = [f"t{i}" for i in range(topics)]
    subs = [rng.sample(names, per_node) for _ in range(n)]
    sim = network(subs, traversal=traversal)
    sim.run_until(15)
    published = []
    for k in range(events):
        p = rng.randrange(n)
        topic = rng.choice(subs[p])
        published.append((p, topic))
        sim.call_at(15 + 0.1 * k, lambda p=p, t=topic: sim.publish(p, t, b"x"))
    sim.run_until(25)
    return sim, subs, published


@pytest.mark.parametrize("traversal", ["root", "generic"])
def test_topic_mapping_is_a_star_of_one_group_per_topic_and_delivers_every_event(traversal):
    sim, subs, published = topic_run(traversal)
    led = leaders(sim)
    assert sorted(led) == ["str:eq:t0", "str:eq:t1", "str:eq:t2", "str:eq:t3", "str:eq:t4", "str:eq:t5", "top"]
    assert all(len(v) == 1 for v in led.values())  # one tree, no duplicate group
    [owner] = led["top"]
    root = next(m for m in sim.nodes[owner].layers[LAYER].groups.values() if m.ref.label.canon() == "top")
    assert sorted(c.label.canon() for c in root.children.values()) == sorted(k for k in led if k != "top")
    got = receivers(sim)
    events = [s for s in spans(sim) if s["name"] == "publish"]
    assert len(events) == len(published)
    for s in events:
        expected = {i for i, ts in enumerate(subs) if s["topic"] in ts} - {s["node"]}
        assert expected <= got.get(s["event_id"], set())
        # leader-based: each member gets one copy; beyond subscribers only the root's leader
        assert got[s["event_id"]] - expected <= {owner}


def test_every_subscriber_is_in_its_topics_group_at_its_leader():
    sim, subs, _ = topic_run("root")
    for i, core in sim.nodes.items():
        layer = core.layers[LAYER]
        assert {t for t, p in layer.subs.items() if p.state == "joined"} == set(subs[i])
        for m in layer.groups.values():
            leader = sim.nodes[m.ref.leader.node_id].layers[LAYER].groups[m.gid]
            assert i in leader.members


WORKED = ["?a>2", "?a<11", "?a>3", "?a=4", "?a=3", "?a<4"]


def test_the_specs_worked_example_builds_the_same_tree_as_the_reference_model_and_prunes_it():
    """spec §4.3: insert a>2, a<11, a>3, a=4, a=3, a<4 in that order; publishing a=4 visits root,
    a>2, a>3, a=4 and a<11, not a=3 or a<4."""
    sim = network([[], *[[s] for s in WORKED], []], stagger_s=2.0)
    sim.run_until(20)
    tree = SemanticTree()
    for s in WORKED:
        tree.insert(parse_filter(s).labels[("a", "int")])
    want = {g.label.canon(): sorted(c.label.canon() for c in g.children) for g in tree.groups()}
    have = {}
    for core in sim.nodes.values():
        for m in core.layers[LAYER].groups.values():
            if m.ref.leader.node_id == core.node_id:
                have[m.ref.label.canon()] = sorted(c.label.canon() for c in m.children.values())
    assert have == want
    sim.publish(7, format_event({"a": 4}), b"x")
    sim.run_until(21)
    [got] = receivers(sim).values()
    led = leaders(sim)
    visited = {led[c][0] for c in ("top", "num[3,+inf)", "num[4,+inf)", "num[4,4]", "num(-inf,10]")}
    assert got == visited
    assert not got & {led["num[3,3]"][0], led["num(-inf,3]"][0]}


def test_leader_based_root_traversal_sends_no_more_messages_per_event_than_the_papers_bound():
    """spec §7.2: LEADER + ROOT costs at most sum of the largest group sizes per level + (h - 2),
    + 2 for the off-by-one the spec notes; here one copy per member of every matching group,
    plus one per visited group's leader."""
    sim, subs, published = topic_run("root", n=80, topics=4, per_node=1)
    sizes = Counter(t for ts in subs for t in ts)
    copies = Counter(s["event_id"] for s in spans(sim) if s["name"] == "receive")
    h, s_max = 2, max(max(sizes.values()), 1)
    for s in spans(sim):
        if s["name"] == "publish":
            assert copies[s["event_id"]] <= h * (s_max + 1) - 2 + 2
            assert copies[s["event_id"]] >= sizes[s["topic"]] - 1


def test_content_events_reach_exactly_the_matching_subscribers_of_two_attribute_trees():
    rng = random.Random(3)
    filters = []
    for _ in range(40):
        lo = rng.randrange(0, 80)
        filters.append(f"?x>={lo}&x<={lo + rng.randrange(5, 40)}&y>={rng.randrange(0, 50)}")
    sim = network([[], *[[f] for f in filters]], stagger_s=0.05)
    sim.run_until(15)
    events = [{"x": rng.randrange(100), "y": rng.randrange(100)} for _ in range(20)]
    for k, e in enumerate(events):
        sim.call_at(15 + 0.1 * k, lambda e=e: sim.publish(0, format_event(e), b"x"))
    sim.run_until(20)
    assert len({t for core in sim.nodes.values() for t in core.layers[LAYER].owners}) == 2  # x and y trees
    got = receivers(sim)
    delivered = {}
    for s in spans(sim):
        if s["name"] == "receive" and s["subscriber"]:
            delivered.setdefault(s["event_id"], set()).add(s["node"])
    pubs = [s for s in spans(sim) if s["name"] == "publish"]
    for s, e in zip(sorted(pubs, key=lambda s: s["time_ns"]), events):
        want = {i + 1 for i, f in enumerate(filters) if parse_filter(f).matches(e)}
        assert delivered.get(s["event_id"], set()) == want
        assert want <= got.get(s["event_id"], set())


def test_a_group_being_created_buffers_what_arrives_and_replays_it():
    sim = network([[], ["?a>2"], ["?a>5"], []], stagger_s=0.0)
    sim.run_until(5)
    led = leaders(sim)
    parent = next(m for m in sim.nodes[led["top"][0]].layers[LAYER].groups.values() if m.ref.label.canon() == "top")
    parent.blocked_until = sim.now + 10
    sim.publish(3, format_event({"a": 7}), b"x")
    sim.run_until(sim.now + 1)
    assert parent.buffered and len(receivers(sim)) <= 1
    sim.run_until(sim.now + 11)
    assert not parent.buffered and parent.blocked_until is None
    [got] = receivers(sim).values()
    assert {1, 2} <= got


def test_malformed_messages_are_refused_and_bad_subscriptions_named():
    core = create_protocol("dps", Descriptor(1, "n1"), DpsConfig(), random.Random(1))
    core.start(0.0, [Descriptor(0, "n0")])
    sender = Descriptor(2, "n2")
    for bad in (Signal(LAYER, "nonsense", sender), Signal(LAYER, "find", sender, (), ("x:int",), ()),
                Signal(LAYER, "locate", sender, (), ("a:int",), ()),
                Signal(LAYER, "find", sender, (sender,), ("a:int", "?a>>1", ""), (1, DOWN))):
        with pytest.raises(RemoteProtocolError):
            core.on_message(2, bad, 1.0)
    core = create_protocol("dps", Descriptor(1, "n1", frozenset({"?a>5&a<3"})), DpsConfig(), random.Random(1))
    core.start(0.0, [Descriptor(0, "n0")])
    with pytest.raises(LocalProtocolError, match="a"):
        core.on_timer(LAYER, 10.0)
    with pytest.raises(LocalProtocolError, match="publish"):
        core.publish("?a", b"x", 1.0)
