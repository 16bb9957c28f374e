"""DPS (node/protocols/dps/protocol.py), leader-based, as real cores over the seeded simulator: tree location
at the seed, group creation and joins, the spec's worked example, publication routing in both
traversals, the message count against the paper's bound, and refusal of bad input."""

import random
from collections import Counter

import pytest

from node.kit import create_protocol
from node.kit.links import LinkRule
from node.kit.types import Descriptor, LocalProtocolError, RemoteProtocolError, Signal
from node.protocols.dps.content import format_event, parse_filter
from node.protocols.dps.protocol import LAYER, DpsConfig
from node.protocols.dps.semantic_tree import SemanticTree
from node.sim import Simulation
from tests.helpers import spans

DOWN = 0  # a find's direction on the wire: Literal["down", "up"], by index


def network(subs: list[list[str]], *, traversal="root", seed=1, stagger_s=0.0, detection="oracle", **params) -> Simulation:
    """Node 0 is every node's seed (``nodes.contacts: seed``); node i starts at i * stagger_s."""
    cfg = DpsConfig(traversal=traversal, **params)
    sim = Simulation(seed=seed, link_rules=[LinkRule(delay_ms=5)], validate=True, wire_codec=True, failure_detection=detection)
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


def topic_run(traversal: str, n=60, topics=6, per_node=2, events=40, end_s=25, **params):
    rng = random.Random(7)
    names = [f"t{i}" for i in range(topics)]
    subs = [rng.sample(names, per_node) for _ in range(n)]
    sim = network(subs, traversal=traversal, **params)
    sim.run_until(15)
    published = []
    for k in range(events):
        p = rng.randrange(n)
        topic = rng.choice(subs[p])
        published.append((p, topic))
        sim.call_at(15 + 0.1 * k, lambda p=p, t=topic: sim.publish(p, t, b"x"))
    sim.run_until(end_s)
    return sim, subs, published


def topic_delivery(sim: Simulation, subs: list[list[str]]) -> tuple[int, int, set[int]]:
    """(expected, delivered, nodes that received an event they do not subscribe to)."""
    got = receivers(sim)
    expected = delivered = 0
    others: set[int] = set()
    for s in spans(sim):
        if s["name"] == "publish":
            want = {i for i, ts in enumerate(subs) if s["topic"] in ts} - {s["node"]}
            expected += len(want)
            delivered += len(want & got.get(s["event_id"], set()))
            others |= got.get(s["event_id"], set()) - want - {s["node"]}
    return expected, delivered, others


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
            assert i in leader.members or m.ref.label.canon() == "top" and not m.subs  # or a root's router


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


@pytest.mark.parametrize("traversal, bound", [("root", lambda h, s: h * (s + 1) - 2),
                                               ("generic", lambda h, s: 2 * h * (s + 1) - 4)])
def test_leader_based_messages_per_event_stay_within_the_papers_worst_case_on_a_deep_tree(traversal, bound):
    """spec §7.2 (bounds, + 2 for the off-by-one it notes): a chain a>2 > a>5 > a>8 of groups
    of 3 to 5 members each under the root (h = 4), events from members at every level."""
    labels = ["?a>2"] * 3 + ["?a>5"] * 5 + ["?a>8"] * 4
    sim = network([[], *[[s] for s in labels], []], traversal=traversal, stagger_s=0.3)
    sim.run_until(12)
    rng = random.Random(5)
    publish_each(sim, 12, [(rng.randrange(len(labels) + 2), format_event({"a": rng.choice([1, 4, 7, 9])})) for _ in range(40)], 0.2)
    sim.run_until(25)
    copies = Counter(s["event_id"] for s in spans(sim) if s["name"] == "receive")
    pubs = [s for s in spans(sim) if s["name"] == "publish"]
    assert len(pubs) == 40 and max(copies.values()) > 5
    for s in pubs:
        assert copies[s["event_id"]] <= bound(4, 5) + 2


@pytest.mark.parametrize("comm, traversal", [("leader", "root"), ("epidemic", "root"), ("epidemic", "generic")])
def test_content_events_reach_exactly_the_matching_subscribers_of_two_attribute_trees(comm, traversal):
    rng = random.Random(3)
    filters = []
    for _ in range(40):
        lo = rng.randrange(0, 80)
        filters.append(f"?x>={lo}&x<={lo + rng.randrange(5, 40)}&y>={rng.randrange(0, 50)}")
    sim = network([[], *[[f] for f in filters]], stagger_s=0.05, comm=comm, traversal=traversal)
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


@pytest.mark.parametrize("comm", ["leader", "epidemic"])
def test_a_subscriber_that_locates_the_root_again_before_each_publication_still_serves_the_groups_it_leads(comm):
    """owner_ttl_steps=0: every publication waits for the seed's answer before its copy goes to
    the root, but the groups the publisher leads are routed at once (the root's copy comes back
    to them as a duplicate): every matching subscriber gets every event."""
    rng = random.Random(5)
    filters = [f"?x>={lo}&x<={lo + rng.randrange(5, 40)}&y>={rng.randrange(0, 50)}" for lo in rng.choices(range(80), k=40)]
    sim = network([[], *[[f] for f in filters]], stagger_s=0.05, comm=comm, owner_ttl_steps=0)
    sim.run_until(15)
    events = [(rng.randrange(1, 41), {"x": rng.randrange(100), "y": rng.randrange(100)}) for _ in range(20)]
    publish_each(sim, 15, [(p, format_event(e)) for p, e in events], gap=0.1)
    sim.run_until(25)
    pubs = sorted((s for s in spans(sim) if s["name"] == "publish"), key=lambda s: s["time_ns"])
    got = delivered_to(sim, 15)
    for s, (p, e) in zip(pubs, events, strict=True):
        assert got.get(s["event_id"], set()) - {p} == {i + 1 for i, f in enumerate(filters) if parse_filter(f).matches(e)} - {p}
    assert sum(core.layers[LAYER].counts["relocated"] for core in sim.nodes.values()) >= len(events) - 2


@pytest.mark.parametrize("traversal", ["root", "generic"])
def test_epidemic_topic_groups_gossip_events_to_their_members_and_to_nobody_else(traversal):
    """Groups of 14 to 27 members with views of 10 and k = k' = 2 (spec defaults): gossip
    reaches most members (the paper's k = 2 curve is for game-zone groups of a few members,
    where the content test above delivers all); only the root's replicas relay."""
    sim, subs, published = topic_run(traversal, comm="epidemic")
    root = {i for i, core in sim.nodes.items() for m in core.layers[LAYER].groups.values() if m.ref.label.canon() == "top"}
    assert len(root) == 3  # the owner and two routers (root_replicas)
    expected, delivered, others = topic_delivery(sim, subs)
    assert others <= root and delivered / expected >= 0.85


@pytest.mark.parametrize("traversal", ["root", "generic"])
def test_epidemic_repair_delivers_to_every_member_what_gossip_missed(traversal):
    """The same groups: without repair gossip misses some members for good; with
    ``repair_window_steps`` the shuffles' digests bring them every event within the window,
    and still nobody outside the groups (and the root's replicas) gets one."""
    plain, subs, _ = topic_run(traversal, comm="epidemic", end_s=35)
    expected, delivered, _ = topic_delivery(plain, subs)
    assert delivered < expected
    sim, subs, _ = topic_run(traversal, comm="epidemic", end_s=35, repair_window_steps=50)
    root = {i for i, core in sim.nodes.items() for m in core.layers[LAYER].groups.values() if m.ref.label.canon() == "top"}
    again, repaired, others = topic_delivery(sim, subs)
    assert again == repaired == expected and others <= root
    assert sum(core.layers[LAYER].counts["repaired"] for core in sim.nodes.values()) > 0


def test_epidemic_members_keep_receiving_when_some_crash():
    sim = network([["?a<90"], *[["?a>2"]] * 8, *[["?a>5"]] * 6, []], comm="epidemic", stagger_s=0.2)
    sim.run_until(15)
    for dead in (3, 10, 11):
        sim.stop_node(dead)
    publish_each(sim, 16, [(15, format_event({"a": 9}))] * 30, 0.5)
    sim.run_until(40)
    alive = {i for i in range(1, 15)} - {3, 10, 11}
    got = delivered_to(sim, 16)
    assert sum(len(who & alive) for who in got.values()) >= 0.95 * 30 * len(alive)
    assert sum(sim.nodes[i].layers[LAYER].counts["suspected"] for i in sim.alive) >= 1


@pytest.mark.parametrize("traversal, factor", [("root", 1), ("generic", 2)])
def test_epidemic_messages_per_event_stay_within_the_papers_worst_case_on_average(traversal, factor):
    """spec §7.2, over 200 events: EPIDEMIC + ROOT at most k S_0 + k k' sum(S_1..S_h-1) +
    k'(h - 2), GENERIC twice that; here h = 4, S = 3 (root replicas), 3, 5, 4, k = k' = 2."""
    labels = ["?a>2"] * 3 + ["?a>5"] * 5 + ["?a>8"] * 4
    sim = network([[], *[[s] for s in labels], []], traversal=traversal, comm="epidemic", stagger_s=0.3)
    sim.run_until(15)
    rng = random.Random(5)
    publish_each(sim, 15, [(rng.randrange(len(labels) + 2), format_event({"a": rng.choice([1, 4, 7, 9])})) for _ in range(200)], 0.05)
    sim.run_until(30)
    copies = Counter(s["event_id"] for s in spans(sim) if s["name"] == "receive")
    pubs = [s["event_id"] for s in spans(sim) if s["name"] == "publish"]
    assert len(pubs) == 200
    bound = factor * (2 * 3 + 2 * 2 * (3 + 5 + 4) + 2 * (4 - 2))
    assert sum(copies[e] for e in pubs) / len(pubs) <= bound
    assert max(copies[e] for e in pubs) > 5


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


def test_held_and_buffered_events_leave_under_the_publisher_s_span():
    """A publisher that must locate the tree first holds the event; a blocked group buffers it:
    the copies sent later still leave under the sender's span of the event (its trace one tree)."""
    sim = network([[], ["?a>2"], ["?a>5"], []], stagger_s=0.0)
    sim.run_until(5)
    led = leaders(sim)
    parent = next(m for m in sim.nodes[led["top"][0]].layers[LAYER].groups.values() if m.ref.label.canon() == "top")
    parent.blocked_until = sim.now + 2
    sim.publish(3, format_event({"a": 7}), b"x")  # node 3 subscribes to nothing: it locates the tree
    sim.run_until(sim.now + 5)
    got = spans(sim)
    ids = {s["span_id"] for s in got}
    receives = [s for s in got if s["name"] == "receive"]
    assert {s["node"] for s in receives} >= {1, 2}
    assert all(s["parent_span_id"] in ids for s in receives), [s for s in receives if s["parent_span_id"] not in ids]


def test_malformed_messages_are_refused_and_bad_subscriptions_named():
    core = create_protocol("dps", Descriptor(1, "n1"), DpsConfig(), random.Random(1))
    core.start(0.0, [Descriptor(0, "n0")])
    sender = Descriptor(2, "n2")
    for bad in (Signal(LAYER, "nonsense", sender), Signal(LAYER, "find", sender, (), ("x:int",), ()),
                Signal(LAYER, "locate", sender, (), ("a:int",), ()),
                Signal(LAYER, "find", sender, (sender,), ("a:int", "?a>>1", ""), (1, DOWN)),
                Signal(LAYER, "leader", sender), Signal(LAYER, "pong", sender, (), ("g",), (1,)),
                Signal(LAYER, "sync", sender, (sender,), ("a:int", "g", "num[1,2]"), (1, 0, 99)),
                Signal(LAYER, "reattach", sender, (sender,), ("a:int", "", "g", "num[[1"), (1, 0, 0)),
                Signal(LAYER, "create", sender, (sender,), ("?a>1", "g", "top"), (1, 1, 0, 0, 1, 10**6))):
        with pytest.raises(RemoteProtocolError):
            core.on_message(2, bad, 1.0)
    core = create_protocol("dps", Descriptor(1, "n1", frozenset({"?a>5&a<3"})), DpsConfig(), random.Random(1))
    core.start(0.0, [Descriptor(0, "n0")])
    with pytest.raises(LocalProtocolError, match="a"):
        core.on_timer(LAYER, 10.0)
    with pytest.raises(LocalProtocolError, match="publish"):
        core.publish("?a", b"x", 1.0)


# --- self-healing (spec §4.7.1) -------------------------------------------------------------------


def led_group(sim: Simulation, canon: str):
    [(node, m)] = [(i, m) for i, core in sim.nodes.items() for m in core.layers[LAYER].groups.values()
                   if m.ref.label.canon() == canon and m.ref.leader.node_id == i and i in sim.alive]
    return node, m


def delivered_to(sim: Simulation, since_s: float) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for s in spans(sim):
        if s["name"] == "receive" and s["subscriber"] and s["time_ns"] >= since_s * 1e9:
            out.setdefault(s["event_id"], set()).add(s["node"])
    return out


def publish_each(sim: Simulation, at: float, events: list[tuple[int, str]], gap=0.5) -> None:
    for k, (p, e) in enumerate(events):
        sim.call_at(at + gap * k, lambda p=p, e=e: sim.publish(p, e, b"x"))


@pytest.mark.parametrize("traversal", ["root", "generic"])
def test_a_co_leader_takes_over_a_crashed_leader_and_its_members_keep_receiving(traversal):
    sim = network([[], *[["?a>2"]] * 5, ["?a>5"], []], traversal=traversal, stagger_s=0.3)
    sim.run_until(10)
    old, g = led_group(sim, "num[3,+inf)")
    [backup] = g.ref.backups
    assert backup.node_id in g.members
    sim.stop_node(old)
    publish_each(sim, 11, [(7, format_event({"a": 9}))] * 10)
    sim.run_until(30)
    new, g2 = led_group(sim, "num[3,+inf)")
    assert new == backup.node_id and g2.ref.epoch == 1 and old not in g2.members and len(g2.ref.backups) == 1
    got = delivered_to(sim, 11)
    members = {1, 2, 3, 4, 5, 6} - {old}
    late = [e for e, who in got.items() if who >= members]
    assert len(late) >= 8  # at most the events published before the crash was detected miss someone
    assert sim.nodes[new].layers[LAYER].counts["takeovers"] >= 1


@pytest.mark.parametrize("detection", ["oracle", "heartbeat"])
def test_under_heartbeat_detection_a_copy_sent_to_a_crashed_leader_is_lost_until_a_probe_round_finds_it(detection):
    sim = network([[], *[["?a>2"]] * 5, *[["?a>5"]] * 4, []], stagger_s=0.3, detection=detection)
    sim.run_until(10)
    old, g = led_group(sim, "num[6,+inf)")  # a child group: its parent's leader routes to it
    members, publisher = set(g.members) - {old}, 10
    sim.stop_node(old)
    publish_each(sim, 10.05, [(publisher, format_event({"a": 9}))])  # right after the crash (sent at its next tick)
    sim.run_until(11.5)
    [first] = delivered_to(sim, 10).values()
    assert first >= {1, 2, 3, 4, 5}  # the parent group got it
    suspected = {i: core.layers[LAYER].suspected.get(old) for i, core in sim.nodes.items() if i in sim.alive}
    if detection == "oracle":  # the failed send reveals the crash at once; the copy goes to the co-leader
        assert first >= members
        assert any(t is not None for t in suspected.values())
        return
    assert not first & members  # lost with the leader, nobody told
    assert all(t is None for t in suspected.values())
    assert sum(sim.stats[i]["lost_to_dead_peer"] for i in sim.alive) >= 1
    sim.run_until(30)  # probes every 10-25 steps of 0.2 s: a prober misses an answer and suspects
    when = [core.layers[LAYER].suspected[old] for i, core in sim.nodes.items()
            if i in sim.alive and old in core.layers[LAYER].suspected]
    assert when and min(when) >= 10 + DpsConfig().fd_min_steps * DpsConfig().step_s - 0.5
    new, _ = led_group(sim, "num[6,+inf)")
    assert new == g.ref.backups[0].node_id
    publish_each(sim, 30, [(publisher, format_event({"a": 9}))])
    sim.run_until(32)
    assert any(who >= members for who in delivered_to(sim, 30).values())


def test_a_whole_group_lost_in_the_middle_of_the_tree_is_bridged_and_its_child_still_served():
    # 0 owns the tree; 1 leads a>2 alone (no co-leader to take over); 2 leads a>5 below it
    sim = network([["?a<90"], ["?a>2"], ["?a>5"], []], stagger_s=1.0, co_leaders=0)
    sim.run_until(8)
    sim.run_until(20)  # a probe round: the root has learned its grandchildren
    sim.stop_node(1)
    publish_each(sim, 21, [(3, format_event({"a": 9}))] * 20)
    sim.run_until(40)
    got = delivered_to(sim, 21)
    assert sum(2 in who for who in got.values()) >= 15
    _, root = led_group(sim, "top")
    assert sorted(c.label.canon() for c in root.children.values()) == ["num(-inf,89]", "num[6,+inf)"]
    layers = [core.layers[LAYER] for i, core in sim.nodes.items() if i in sim.alive]
    assert sum(la.counts["adopted"] + la.counts["reattached"] for la in layers) >= 1


def test_a_router_takes_over_a_crashed_owner_and_publishers_find_the_root_again():
    sim = network([[], ["?a>2"], ["?a>5"], ["?a<50"], []], stagger_s=0.5)
    sim.run_until(10)
    owner, root = led_group(sim, "top")
    [router] = root.ref.backups
    assert router.node_id not in root.members  # a child's leader, no member of the root group
    sim.stop_node(owner)
    publish_each(sim, 11, [(4, format_event({"a": 7}))] * 20)
    sim.run_until(40)
    new, _ = led_group(sim, "top")
    assert new == router.node_id
    got = delivered_to(sim, 11)
    want = {1, 2, 3} - {owner}
    assert sum(who >= want for who in got.values()) >= 15
    assert sim.nodes[0].layers[LAYER].directory["a:int"].node_id == new  # the seed knows the new owner


@pytest.mark.parametrize("ttl_steps, found", [(DpsConfig().owner_ttl_steps, True), (10**6, False)])
def test_under_heartbeat_detection_a_member_far_from_the_root_locates_it_again_before_publishing(ttl_steps, found):
    """Nobody tells a member deep in the tree that the root's leader changed: its entry, unheard
    of for ``owner_ttl_steps``, is located again at the seed, which the new owner told; trusted
    for ever, the publication goes to the dead owner and is lost."""
    sim = network([[], ["?a>2"], ["?a>2"], ["?a>5"], ["?a<50"], ["?a>5"]], stagger_s=0.5, detection="heartbeat",
                  owner_ttl_steps=ttl_steps)
    sim.run_until(10)
    owner, root = led_group(sim, "top")
    publisher = 5  # a member of a>5, below a>2: neither in the root group nor next to it
    layer = sim.nodes[publisher].layers[LAYER]
    assert layer.owners["a:int"].node_id == owner and led_group(sim, "num[6,+inf)")[0] not in (owner, publisher)
    sim.stop_node(owner)
    sim.run_until(40)  # the root's router took over and told the seed (probe rounds of 10-25 steps)
    new, _ = led_group(sim, "top")
    assert new == root.ref.backups[0].node_id and sim.nodes[0].layers[LAYER].directory["a:int"].node_id == new
    publish_each(sim, 40, [(publisher, format_event({"a": 7}))])
    sim.run_until(45)
    got = delivered_to(sim, 40)
    want = {2, 3, 4} - {owner}
    assert any(who >= want for who in got.values()) is found
    assert (layer.counts["relocated"] >= 1) is found


@pytest.mark.parametrize("comm", ["leader", "epidemic"])
def test_with_backup_seeds_a_new_tree_is_created_and_found_after_the_seed_crashed(comm):
    """Node 0, every node's seed, crashes; then node 4 subscribes on a new attribute and node 3
    publishes into it. With ``seed_backups`` the first backup holds the directory and serves;
    without, the tree is never created and node 4 gets nothing."""
    def after_seed_crash(backups: int):
        sim = network([[], ["?a>2"], ["?a>5"], ["?a<50"], []], stagger_s=0.5, comm=comm, seed_backups=backups)
        sim.run_until(10)
        sim.stop_node(0)
        sim.call_at(11, lambda: sim.nodes[4].subscribe("?b>1", 11))
        publish_each(sim, 25, [(3, format_event({"a": 7, "b": 5}))] * 20)
        sim.run_until(45)
        return sim, delivered_to(sim, 25)

    sim, got = after_seed_crash(2)
    assert sum(4 in who for who in got.values()) == 20 and sum(2 in who for who in got.values()) == 20
    layers = {i: sim.nodes[i].layers[LAYER] for i in sim.alive}
    serving = [i for i, la in layers.items() if la.seed is not None and la.seed.node_id == i]
    assert len(serving) == 1 and "b:int" in layers[serving[0]].directory and "a:int" in layers[serving[0]].directory
    _, got = after_seed_crash(0)
    assert not any(4 in who for who in got.values())


def test_members_of_a_group_whose_leader_and_co_leader_crashed_subscribe_again():
    sim = network([["?a<90"], *[["?a>2"]] * 4, []], stagger_s=0.3)
    sim.run_until(10)
    old, g = led_group(sim, "num[3,+inf)")
    [backup] = g.ref.backups
    sim.stop_node(old)
    sim.stop_node(backup.node_id)
    sim.run_until(40)  # the members' silence check finds both gone
    left = {1, 2, 3, 4} - {old, backup.node_id}
    assert sum(sim.nodes[i].layers[LAYER].counts["resubscribed"] for i in left) == len(left)
    publish_each(sim, 41, [(5, format_event({"a": 9}))] * 4)
    sim.run_until(45)
    assert all(who >= left for who in delivered_to(sim, 41).values()) and len(delivered_to(sim, 41)) == 4


def test_the_analysis_takes_shares_of_the_live_nodes_and_delivery_per_100_steps_around_crashes():
    from analysis.protocols.dps import DpsAnalysis

    a = DpsAnalysis({"nodes": 10, "cycle_s": 0.2}, {})
    s = 1_000_000_000
    a.add_timeline([{"kind": "join", "node": 3, "t_ns": 0, "initial": True},
                    {"kind": "crash", "node": 3, "t_ns": 5 * s}, {"kind": "crash", "node": 4, "t_ns": 25 * s}])
    a.add_events([  # t0 (s), expected, delivered, receivers (the publisher among them)
        {"t0_ns": t * s, "expected": x, "delivered": d, "receivers": r}
        for t, x, d, r in [(0, 4, 4, 6), (10, 4, 3, 4), (30, 2, 1, 4), (50, 2, 2, 3)]])
    m = a.metrics([])
    # live nodes at each publication: 10, 9, 8, 8
    assert m["matching_pct"] == pytest.approx((40 + 400 / 9 + 25 + 25) / 4)
    assert m["contacted_pct"] == pytest.approx((50 + 300 / 9 + 300 / 8 + 200 / 8) / 4)
    assert m["false_positive_pct"] == pytest.approx((10 + 0 + 200 / 8 + 0) / 4)
    assert m["delivered_by_window"] == [{"t_s": 0.0, "delivered_ratio": 7 / 8}, {"t_s": 20.0, "delivered_ratio": 0.5},
                                        {"t_s": 40.0, "delivered_ratio": 1.0}]
    assert m["delivered_lowest_window"] == 0.5
    assert m["delivered_after_crashes"] == 1.0 and m["events_after_crashes"] == 1  # t0 >= 25 s + 20 s


@pytest.mark.parametrize("comm, repair, backups", [("leader", 0, 0), ("epidemic", 0, 0), ("epidemic", 50, 2), ("leader", 0, 2)])
def test_a_crash_run_is_byte_identical_under_two_hash_seeds(comm, repair, backups, tmp_path):
    """The self-healing, epidemic, repair and backup-seed paths draw only from the node's seeded
    generator (with backup seeds, the seed may crash too)."""
    import os
    import subprocess
    import sys

    import yaml

    from controller.backends.rundir import output_digests
    from tests.conftest import ROOT

    exp = yaml.safe_load((ROOT / "experiments/dps-crashes.yaml").read_text())
    exp.pop("sweep")
    exp["protocol"]["params"].update(comm=comm, repair_window_steps=repair, seed_backups=backups)
    exp.update(nodes={"count": 80, "contacts": "seed"}, publications={"count": 20, "rate_per_s": 1, "publisher": "any"},
               phases={"warmup_s": 15, "drain_s": 5})
    exp["churn"]["phases"][0].update(until_s=20, probability=0.2, spare=[] if backups else [0])
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    digests = []
    for hash_seed in ("1", "2"):
        out = tmp_path / hash_seed
        subprocess.run([sys.executable, "-m", "controller.cli.main", "run", str(path), "--out", str(out), "--no-analyze"],
                       cwd=ROOT, check=True, capture_output=True, env={**os.environ, "PYTHONHASHSEED": hash_seed})
        [rd] = out.iterdir()
        digests.append(output_digests(rd))
        timeline = (rd / "timeline.jsonl").read_text()
        assert timeline.count('"crash"') >= 10
    assert digests[0] == digests[1]


@pytest.mark.parametrize("comm", ["leader", "epidemic"])
def test_a_child_group_its_parent_lost_track_of_reattaches_at_the_next_probe(comm):
    sim = network([["?a<90"], ["?a>2"], ["?a>5"], []], comm=comm, stagger_s=1.0)
    sim.run_until(10)
    holders = [m for core in sim.nodes.values() for m in core.layers[LAYER].groups.values() if m.ref.label.canon() == "num[3,+inf)"]
    [child] = {c.gid for m in holders for c in m.children.values()}
    for m in holders:  # every holder of a>2 forgets its child a>5
        del m.children[child]
    sim.run_until(25)  # probes every 10 to 25 steps: a>5's probe of its parent finds itself unlisted
    assert all(child in m.children for m in holders if m.gid in sim.nodes[m.ref.leader.node_id].layers[LAYER].groups)
    publish_each(sim, 26, [(3, format_event({"a": 9}))] * 4)
    sim.run_until(30)
    assert all(2 in who for who in delivered_to(sim, 26).values()) and len(delivered_to(sim, 26)) == 4


def test_the_analysis_of_a_run_without_crashes_has_no_crash_metrics():
    from analysis.protocols.dps import DpsAnalysis

    a = DpsAnalysis({"nodes": 4, "cycle_s": 0.2}, {})
    a.add_timeline([{"kind": "join", "node": i, "t_ns": 0, "initial": True} for i in range(4)])
    a.add_events([{"t0_ns": 10, "expected": 2, "delivered": 2, "receivers": 3}])
    m = a.metrics([])
    assert m["matching_pct"] == 50 and "delivered_by_window" not in m
