import math
import random
import statistics

import networkx as nx
import pytest

from node.kit import create_protocol
from node.kit.types import Descriptor, Gossip, LocalProtocolError, RemoteProtocolError, Send
from node.protocols.cyclon.layer import Cyclon, CyclonConfig
from node.protocols.gossip.protocol import GossipConfig
from tests.helpers import gossip_network


def d(i: int, age: int = 0) -> Descriptor:
    return Descriptor(i, f"n{i}", age=age)


def cyclon(me: Descriptor, cfg: CyclonConfig, rng: random.Random) -> Cyclon:
    """The CYCLON layer of a node's stack (the gossip protocol's only layer)."""
    layer = create_protocol("gossip", me, GossipConfig(cyclon=cfg), rng).layers["cyclon"]
    assert isinstance(layer, Cyclon)
    return layer


def test_views_fill_and_in_degree_evens_out():
    n, c = 200, 8
    sim, _ = gossip_network(n, view_size=c, shuffle_length=4, contacts=5)
    sim.run_until(60.0, max_steps=2_000_000)
    views = {i: node.view("cyclon") for i, node in sim.nodes.items()}
    for i, view in views.items():
        sim.nodes[i].validate()
        assert len(view) >= c - 1  # c - 1 only while its own shuffle is in flight
    assert sum(len(v) == c for v in views.values()) >= 0.9 * n
    indeg = [sum(j in v for v in views.values()) for j in views]
    # CYCLON's in-degree is much narrower than a random c-out graph's (binomial stddev 2.77
    # here; CYCLON measures about 1.7). Views small against n show it best.
    random_stddev = math.sqrt(c * (1 - c / (n - 1)))
    assert statistics.pstdev(indeg) < 0.75 * random_stddev
    g = nx.DiGraph((i, j) for i, v in views.items() for j in v)
    assert nx.is_strongly_connected(g)


def test_shuffle_swaps_entries_and_flips_the_link():
    cfg = CyclonConfig(view_size=4, shuffle_length=3)
    p = cyclon(d(0), cfg, random.Random(1))
    q = cyclon(d(1), cfg, random.Random(2))
    p.bootstrap([d(1), d(2), d(3)])
    q.bootstrap([d(4), d(5)])
    for nid in p.view:  # make q the oldest entry, so it is the partner
        p.view[nid] = p.view[nid].aged(5 if nid == 1 else 0)
    [req] = p.tick(now=0.0)
    assert isinstance(req, Send) and req.dst == 1 and 1 not in p.view
    assert req.msg.entries[0].node_id == 0 and len(req.msg.entries) == 3
    [rep] = q.on_message(0, req.msg, now=0.1)
    assert rep.msg.reply and 0 not in {e.node_id for e in rep.msg.entries}
    assert 0 in q.view  # the link flipped: q now knows p
    p.on_message(1, rep.msg, now=0.2)
    assert {4, 5} <= set(p.view) and 0 not in p.view
    p.validate()
    q.validate()


def test_late_reply_is_dropped():
    cfg = CyclonConfig(view_size=4, shuffle_length=2, timeout_ms=100)
    p = cyclon(d(0), cfg, random.Random(1))
    p.bootstrap([d(1)])
    [req] = p.tick(now=0.0)
    late = Gossip("cyclon", d(1), (d(7),), reply=True)
    assert p.on_message(1, late, now=5.0) == []
    assert 7 not in p.view and p.pending.late == 1


def test_merge_ignores_self_and_known_ids_and_respects_capacity():
    p = cyclon(d(0), CyclonConfig(view_size=3, shuffle_length=3), random.Random(1))
    p.bootstrap([d(0), d(1), d(1), d(2), d(3), d(4)])
    assert set(p.view) == {1, 2, 3}


def test_oversized_shuffle_is_a_remote_error():
    p = cyclon(d(0), CyclonConfig(view_size=4, shuffle_length=2), random.Random(1))
    with pytest.raises(RemoteProtocolError):
        p.on_message(9, Gossip("cyclon", d(9), (d(1), d(2), d(3))), now=0.0)


def test_validate_catches_a_self_entry():
    p = cyclon(d(0), CyclonConfig(view_size=4, shuffle_length=2), random.Random(1))
    p.view[0] = d(0)
    with pytest.raises(LocalProtocolError):
        p.validate()


def test_bad_config_is_rejected():
    with pytest.raises(ValueError):
        CyclonConfig(view_size=4, shuffle_length=5)


@pytest.mark.parametrize("refill", [True, False])
def test_a_view_whose_every_exchange_fails_is_refilled_and_never_silent_for_good(refill):
    cfg = CyclonConfig(view_size=4, shuffle_length=2, refill=refill)
    p = cyclon(d(0), cfg, random.Random(1))
    p.bootstrap([d(1), d(2), d(3)])
    partners = []
    for cycle in range(12):  # no reply ever comes (every send fails or times out)
        requests = [a for a in p.exchange(float(cycle)) if isinstance(a, Send)]
        partners += [r.dst for r in requests]
    if refill:  # one request a cycle, to the contacts again once the view ran dry
        assert len(partners) == 12 and set(partners) == {1, 2, 3}
    else:  # the paper's rule: three failed partners and the node is silent for good
        assert len(partners) == 3 and not p.view
