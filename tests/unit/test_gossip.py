import random
from collections import Counter

import pytest

from node.kit import create_protocol
from node.kit.types import Descriptor, EventMsg, Gossip, LocalProtocolError, Send
from tests.helpers import gossip_network, spans


def publish_all(sim, subs, t0: float, per_topic: int = 3) -> list[tuple[int, str]]:
    """Publish ``per_topic`` events on every topic, each from one of its subscribers."""
    plan = []
    for topic in sorted({t for s in subs for t in s}):
        members = [i for i, s in enumerate(subs) if topic in s]
        for k in range(per_topic):
            plan.append((members[k % len(members)], topic))
    for k, (node, topic) in enumerate(plan):
        sim.call_at(t0 + 0.05 * k, lambda node=node, topic=topic: sim.publish(node, topic, b"x"))
    return plan


def test_flooding_reaches_every_node_and_every_subscriber():
    sim, subs = gossip_network(100, gamma=1.0, topics=5)
    sim.run_until(10.0)
    plan = publish_all(sim, subs, 10.0)
    sim.run_until(20.0)
    recs = spans(sim)
    firsts = {(r["event_id"], r["node"]) for r in recs if r["name"] == "receive" and r["first_copy"]}
    published = [r for r in recs if r["name"] == "publish"]
    assert len(published) == len(plan)
    for p in published:
        receivers = {n for e, n in firsts if e == p["event_id"]}
        assert receivers == set(range(100)) - {p["node"]}
    for r in recs:
        if r["name"] == "receive":
            assert r["subscriber"] == (r["topic"] in subs[r["node"]])


def test_gamma_zero_stays_among_subscribers():
    sim, subs = gossip_network(100, gamma=0.0, topics=2, subs_per_node=1)
    sim.run_until(10.0)
    publish_all(sim, subs, 10.0)
    sim.run_until(20.0)
    receives = [r for r in spans(sim) if r["name"] == "receive"]
    assert receives, "no event travelled at all"
    assert all(r["subscriber"] for r in receives)


def test_each_node_forwards_an_event_once_and_counts_duplicates():
    sim, subs = gossip_network(60, gamma=1.0, topics=3, repair_window_ms=0)
    sim.run_until(10.0)
    publish_all(sim, subs, 10.0, per_topic=1)
    sim.run_until(20.0)
    recs = spans(sim)
    senders = Counter((r["event_id"], r["from_node"]) for r in recs if r["name"] == "receive")
    # A node sends one copy to each CYCLON neighbour at most, once per event.
    assert max(senders.values()) <= 8
    dups = sum(1 for r in recs if r["name"] == "receive" and not r["first_copy"])
    assert dups > 0
    assert sum(s["duplicates"] for s in sim.stats.values()) == dups


def assert_one_tree_per_event(recs: list[dict]) -> None:
    """Every received copy's parent is the sender's span of that event, one hop nearer."""
    by_span = {r["span_id"]: r for r in recs}
    for r in recs:
        if r["name"] == "receive":
            parent = by_span[r["parent_span_id"]]
            assert parent["event_id"] == r["event_id"] and parent["node"] == r["from_node"]
            assert r["hops"] == parent["hops"] + 1


def missed_deliveries(sim, subs, events: int = 12) -> tuple[int, int]:
    """Publish ``events`` events once the overlay has mixed; (node, event) pairs never reached,
    and the copies the shuffle repair sent."""
    sim.run_until(10.0)
    plan = publish_all(sim, subs, 10.0, per_topic=events // len({t for s in subs for t in s}))
    sim.run_until(60.0)
    recs = spans(sim)
    assert_one_tree_per_event(recs)
    reached = {(r["event_id"], r["node"]) for r in recs if r["name"] == "receive"}
    published = [r for r in recs if r["name"] == "publish"]
    assert len(published) == len(plan)
    missed = sum(1 for p in published for n in range(len(subs)) if n != p["node"] and (p["event_id"], n) not in reached)
    repaired = sum(core.counters().get("interest_gossip.repaired", 0) for core in sim.nodes.values())
    return missed, repaired


def test_shuffle_repair_completes_floods_slower_than_the_shuffles():
    # 2 s a hop against CYCLON's 1 s period: shuffles move links while a flood runs. Without
    # the repair, some nodes lose every link from a node that had yet to relay, and are missed.
    def run(window_ms: float) -> tuple[int, int]:
        sim, subs = gossip_network(200, seed=3, delay_ms=2000.0, jitter_ms=300.0, timeout_ms=20_000.0,
                                   repair_window_ms=window_ms)
        return missed_deliveries(sim, subs)

    missed_off, repaired_off = run(0.0)
    assert missed_off > 0 and repaired_off == 0
    missed_on, repaired_on = run(20_000.0)
    assert missed_on == 0 and repaired_on > 0


def copies(actions) -> list[tuple[int, str]]:
    return [(a.dst, a.msg.event_id) for a in actions if isinstance(a, Send) and isinstance(a.msg, EventMsg)]


def test_repair_sends_a_partner_the_settled_events_its_list_lacks():
    from node.protocols.gossip.protocol import GossipConfig

    config = GossipConfig(gamma=0.0, repair_window_ms=10_000, repair_after_ms=3000)
    core = create_protocol("gossip", Descriptor(0, "n0", frozenset({"t0"})), config, random.Random(0))
    core.start(0.0, [Descriptor(1, "n1")])
    core.publish("t0", b"", now=0.0)
    core.on_message(1, EventMsg("1-0-1", "t1", b"", 1, 1), now=0.5)
    fan = Descriptor(5, "n5", frozenset({"t0", "t1"}))
    [mine] = [a.msg for a in core.on_message(5, Gossip("cyclon", fan, ()), now=1.0) if isinstance(a, Send)]
    assert mine.reply and mine.recent == ("0-0-1", "1-0-1")  # its own list, oldest first
    assert copies(core.on_message(5, Gossip("cyclon", fan, ()), now=1.0)) == []  # not settled yet
    assert copies(core.on_message(5, Gossip("cyclon", fan, ()), now=3.6)) == [(5, "0-0-1"), (5, "1-0-1")]
    assert copies(core.on_message(5, Gossip("cyclon", fan, (), recent=("1-0-1",)), now=3.6)) == [(5, "0-0-1")]
    # Never to the publisher; to a partner only by the interest and gamma rule (gamma 0 here).
    assert copies(core.on_message(1, Gossip("cyclon", Descriptor(1, "n1", frozenset({"t0"})), ()), now=3.6)) == [(1, "0-0-1")]
    assert copies(core.on_message(6, Gossip("cyclon", Descriptor(6, "n6", frozenset({"t9"})), ()), now=3.6)) == []
    assert copies(core.on_message(5, Gossip("cyclon", fan, ()), now=10.4)) == [(5, "1-0-1")]  # 0-0-1 left the window
    assert core.counters()["interest_gossip.repaired"] == 5


def test_repair_off_is_the_protocol_without_lists():
    from node.protocols.gossip.protocol import GossipConfig

    with pytest.raises(ValueError, match="repair_after_ms"):
        GossipConfig(repair_window_ms=1000, repair_after_ms=2000)
    core = create_protocol("gossip", Descriptor(0, "n0", frozenset({"t0"})), GossipConfig(repair_window_ms=0),
                           random.Random(0))
    core.start(0.0, [Descriptor(1, "n1")])
    core.publish("t0", b"", now=0.0)
    out = core.on_message(5, Gossip("cyclon", Descriptor(5, "n5", frozenset({"t0"})), ()), now=5.0)
    assert [a.msg.recent for a in out] == [()]
    assert core.counters().get("interest_gossip.repaired", 0) == 0


def test_hop_counts_follow_the_dissemination_tree():
    sim, subs = gossip_network(50, gamma=1.0)
    sim.run_until(10.0)
    publish_all(sim, subs, 10.0, per_topic=1)
    sim.run_until(20.0)
    assert_one_tree_per_event(spans(sim))


def test_same_seed_same_run_other_seed_other_run():
    def run(seed):
        sim, subs = gossip_network(40, seed=seed, gamma=0.5, loss=0.05)
        sim.run_until(5.0)
        publish_all(sim, subs, 5.0)
        sim.run_until(10.0)
        return [(r["node"], r["event_id"], r["time_ns"], r["hops"]) for r in spans(sim)]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_duplicate_filter_is_bounded():
    from node.protocols.gossip.protocol import GossipConfig

    core = create_protocol("gossip", Descriptor(0, "n0", frozenset({"t0"})), GossipConfig(seen_capacity=5),
                           random.Random(0))
    core.start(0.0, [Descriptor(1, "n1")])
    for k in range(20):
        core.on_message(1, EventMsg(f"1-{k}", "t0", b"", 1, 1), now=1.0)
    assert len(core.seen) == 5
    core.validate()


def test_publish_after_leave_is_a_local_error():
    sim, _ = gossip_network(2, contacts=1)
    sim.nodes[0].leave(now=1.0)
    with pytest.raises(LocalProtocolError):
        sim.nodes[0].publish("t0", b"", now=1.0)
