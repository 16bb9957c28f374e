"""The age rules of PolderCast's three layers, one test per rule per layer (paper §4: "Once per
cycle, a node increments the ages of all its neighbors by one. A neighbor's age is zeroed when a
gossip message (or response) is received from that neighbor. A neighbor's age is retained also
when that neighbor is handed from one node to another"; §5: proactive removal of the partner;
CYCLON by its own paper; spec poldercast.md §4 and §5.0-§5.3).

Each test sets a node's views by hand, delivers one message or one tick, and reads the ages."""

import random

import pytest

from node.kit import create_protocol
from node.kit.stack import Stack
from node.kit.types import Descriptor, Gossip, Send
from node.protocols.cyclon.layer import CyclonConfig
from node.protocols.poldercast.protocol import PolderCastConfig

TOPICS = frozenset({"a", "b", "c"})


def node(i: int, topics=TOPICS, **params) -> Stack:
    cfg = PolderCastConfig(cyclon=CyclonConfig(view_size=8, shuffle_length=4), **params)
    return create_protocol("poldercast", Descriptor(i, f"n{i}", frozenset(topics)), cfg, random.Random(i))


def d(i: int, age: int = 0, topics=TOPICS) -> Descriptor:
    return Descriptor(i, f"n{i}", frozenset(topics), age)


def ages(s: Stack, layer: str) -> dict[int, int]:
    return {n: e.age for n, e in s.view(layer).items()}


def request(layer: str, sender: Descriptor, *entries: Descriptor, reply: bool = False) -> Gossip:
    return Gossip(layer, sender, tuple(entries), reply=reply)


def with_rings(s: Stack, *entries: Descriptor) -> Stack:
    """Ring neighbours taken in at their ages (3 other subscribers of a topic all fit its 2 + 2
    slots)."""
    s.layers["rings"].recompute(entries)
    assert ages(s, "rings") == {e.node_id: e.age for e in entries}
    return s


# --- once per cycle ---------------------------------------------------------------------------


def test_cyclon_ages_every_entry_once_per_tick_and_drops_the_partner():
    p = node(0)
    p.layers["cyclon"].view = {1: d(1, 4), 2: d(2, 1), 3: d(3, 0)}
    [req] = p.layers["cyclon"].tick(0.0)
    assert isinstance(req, Send) and req.dst == 1
    assert ages(p, "cyclon") == {2: 2, 3: 1}


def test_vicinity_ages_every_entry_once_per_tick_and_drops_the_partner():
    p = node(0)
    p.layers["vicinity"].view = {1: d(1, 4), 2: d(2, 1), 3: d(3, 0)}
    [req] = p.layers["vicinity"].tick(0.0)
    assert req.dst == 1 and ages(p, "vicinity") == {2: 2, 3: 1}


@pytest.mark.parametrize("removal", ["on_timeout", "on_initiate"])
def test_rings_ages_every_entry_once_per_tick(removal):
    p = with_rings(node(0, ring_removal=removal), d(1, 4), d(2, 1), d(3, 0))
    [req] = p.layers["rings"].tick(0.0)
    assert req.dst == 1
    # on_timeout keeps the partner in its slots until its reply is overdue; on_initiate drops it
    assert ages(p, "rings") == ({1: 5, 2: 2, 3: 1} if removal == "on_timeout" else {2: 2, 3: 1})
    assert ages(p, "cyclon") == {} and ages(p, "vicinity") == {}  # other layers age on their own ticks


# --- zeroed by a request straight from the neighbour ------------------------------------------


def test_cyclon_takes_a_new_requester_at_age_0_and_keeps_a_known_one_as_it_is():
    p = node(0)
    p.layers["cyclon"].view = {1: d(1, 6)}
    p.on_message(2, request("cyclon", d(2), d(2)), 0.0)  # a shuffle carries its sender first
    assert ages(p, "cyclon") == {1: 6, 2: 0}
    # CYCLON's own merge (its paper, step 6): entries already in the view are discarded
    p.on_message(1, request("cyclon", d(1), d(1)), 0.0)
    assert ages(p, "cyclon")[1] == 6


def test_vicinity_zeroes_a_neighbour_that_sends_a_request():
    p = node(0)
    p.layers["vicinity"].view = {1: d(1, 6), 2: d(2, 3)}
    p.on_message(1, request("vicinity", d(1)), 0.0)
    assert ages(p, "vicinity") == {1: 0, 2: 3}


def test_rings_zeroes_a_neighbour_that_sends_a_request():
    p = with_rings(node(0), d(1, 6), d(2, 3))
    p.on_message(1, request("rings", d(1)), 0.0)
    assert ages(p, "rings") == {1: 0, 2: 3}


# --- restored (or zeroed) by the partner's reply ----------------------------------------------


def test_cyclon_does_not_put_the_partner_back_on_its_reply():
    p = node(0)
    p.layers["cyclon"].view = {1: d(1, 4), 2: d(2, 0)}
    [req] = p.layers["cyclon"].tick(0.0)
    p.on_message(1, request("cyclon", d(1), d(5, 2), reply=True), 0.1)
    assert 1 not in p.view("cyclon") and ages(p, "cyclon") == {2: 1, 5: 2}


def test_vicinity_restores_the_partner_at_age_0_on_its_reply():
    p = node(0)
    p.layers["vicinity"].view = {1: d(1, 4), 2: d(2, 0)}
    p.layers["vicinity"].tick(0.0)
    assert 1 not in p.view("vicinity")
    p.on_message(1, request("vicinity", d(1), reply=True), 0.1)
    assert ages(p, "vicinity") == {1: 0, 2: 1}


@pytest.mark.parametrize("removal", ["on_timeout", "on_initiate"])
def test_rings_restores_the_partner_at_age_0_on_its_reply(removal):
    p = with_rings(node(0, ring_removal=removal), d(1, 4), d(2, 0))
    p.layers["rings"].tick(0.0)
    p.on_message(1, request("rings", d(1), reply=True), 0.1)
    assert ages(p, "rings") == {1: 0, 2: 1}


# --- retained when handed on ------------------------------------------------------------------


def test_cyclon_entries_keep_their_ages_when_handed_on():
    p, q = node(0), node(9)
    p.layers["cyclon"].view = {1: d(1, 7), 2: d(2, 3), 3: d(3, 5)}
    [req] = p.layers["cyclon"].tick(0.0)
    sent = {e.node_id: e.age for e in req.msg.entries}
    assert sent == {0: 0, 2: 4, 3: 6}  # the sender's own profile at 0, the others as aged here
    q.on_message(0, req.msg, 0.1)
    assert ages(q, "cyclon") == sent


def test_vicinity_entries_keep_their_ages_when_handed_on():
    p = node(0)
    p.on_message(9, request("vicinity", d(9), d(5, 4), d(6, 2)), 0.0)
    assert ages(p, "vicinity") == {9: 0, 5: 4, 6: 2}
    q = node(8)
    q.layers["vicinity"].view = {0: d(0, 3)}
    [req] = q.layers["vicinity"].tick(0.0)
    p.on_message(8, req.msg, 0.1)
    assert ages(p, "vicinity") == {9: 0, 5: 4, 6: 2, 8: 0}


def test_rings_entries_keep_their_ages_when_handed_on():
    p = node(0)
    p.on_message(9, request("rings", d(9), d(5, 4), d(6, 2)), 0.0)
    assert ages(p, "rings") == {9: 0, 5: 4, 6: 2}
    [req] = p.layers["rings"].tick(0.0)
    sent = {e.node_id: e.age for e in req.msg.entries}
    assert sent and sent.items() <= {5: 5, 6: 3, 9: 1}.items()


# --- a copy in another view or in a message does not reset a layer's age ------------------------


def test_vicinity_keeps_its_own_age_when_another_copy_is_younger():
    p = node(0)
    p.layers["vicinity"].view = {1: d(1, 6)}
    p.layers["cyclon"].view = {1: d(1, 0)}
    p.on_message(2, request("vicinity", d(2), d(1, 1)), 0.0)
    assert ages(p, "vicinity") == {1: 6, 2: 0}


def test_vicinity_takes_a_fresher_profile_at_its_own_age():
    p = node(0)
    p.layers["vicinity"].view = {1: d(1, 6, topics={"a"})}
    p.on_message(2, request("vicinity", d(2), d(1, 1, topics={"a", "b"})), 0.0)
    assert p.view("vicinity")[1] == d(1, 6, topics={"a", "b"})


def test_rings_keeps_its_own_age_when_another_copy_is_younger():
    p = with_rings(node(0), d(1, 6))
    p.layers["cyclon"].view = {1: d(1, 0)}
    p.on_message(2, request("rings", d(2), d(1, 1)), 0.0)
    assert ages(p, "rings") == {1: 6, 2: 0}


def test_rings_takes_a_fresher_profile_at_its_own_age():
    p = with_rings(node(0), d(1, 6))
    fresher = Descriptor(1, "n1", TOPICS, 1, (("a", 2),))
    p.on_message(2, request("rings", d(2), fresher), 0.0)
    assert p.view("rings")[1] == fresher.aged(6)


# --- what an exchange sends ---------------------------------------------------------------------


@pytest.mark.parametrize("layer", ["vicinity", "rings"])
def test_a_request_carries_views_only_not_the_senders_own_profile(layer):
    p = with_rings(node(0), d(1, 4), d(2, 0))
    p.layers["vicinity"].view = {1: d(1, 4), 2: d(2, 0)}
    [req] = p.layers[layer].tick(0.0)
    assert req.msg.sender.node_id == 0 and 0 not in {e.node_id for e in req.msg.entries}
    assert {e.node_id for e in req.msg.entries} == {2}


def test_vicinity_replies_after_merging():
    """Entries the request's merge pushes out of VICINITY (and no other view holds) are not
    offered in the reply (paper §5: q merges, updates its view, "finally" responds)."""
    p = node(0, vicinity_view=2)
    weak = frozenset({"a"})
    p.layers["vicinity"].view = {1: d(1, 0, weak), 2: d(2, 0, weak)}
    [rep] = p.on_message(9, request("vicinity", d(9), d(5), d(6)), 0.0)
    assert set(p.view("vicinity")) <= {5, 6, 9} and len(p.view("vicinity")) == 2
    assert not {1, 2} & {e.node_id for e in rep.msg.entries}
