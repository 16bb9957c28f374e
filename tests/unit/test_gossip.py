import random
from collections import Counter

import pytest

from node.core import create_protocol
from node.core.types import Descriptor, EventMsg, LocalProtocolError
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
    sim, subs = gossip_network(60, gamma=1.0, topics=3)
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


def test_hop_counts_follow_the_dissemination_tree():
    sim, subs = gossip_network(50, gamma=1.0)
    sim.run_until(10.0)
    publish_all(sim, subs, 10.0, per_topic=1)
    sim.run_until(20.0)
    recs = spans(sim)
    by_span = {r["span_id"]: r for r in recs}
    for r in recs:
        if r["name"] == "receive":
            parent = by_span[r["parent_span_id"]]
            assert parent["event_id"] == r["event_id"] and parent["node"] == r["from_node"]
            assert r["hops"] == parent["hops"] + 1


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
    from node.core.gossip import GossipConfig

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
