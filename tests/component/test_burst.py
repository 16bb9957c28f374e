"""A publication burst on real gRPC peers over streamed links (transport.mode stream, the
default): 2,000
publishes offered at 400/s into one peer of 8 flooding peers hosted in this one process (one
event loop, as with nodes.peers_per_process: 8). Over the complete graph (static_gossip, every
peer floods to its 7 neighbours: 112,000 copies) every subscriber receives at least 99.9% of the
events; over CYCLON (gossip, CYCLON at its defaults) no view is empty afterwards and a publish
after the burst reaches every peer (the collapse this guards against: after a burst, a publish
reached nobody).

Measured with this harness (the closing note of the transport issue): streams deliver 2,000 of
2,000 events to every peer in both setups; the unary transport 1,124 of 2,000 (complete graph,
19,246 failed sends) and 1,520-1,751 (CYCLON). Before the raised gRPC pending-call limit and
CYCLON's refill, the unary transport delivered 12-24% and left every CYCLON view empty."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import grpc
import pytest

from node._gen.overlaylab.v1 import control_pb2
from node.protocols.cyclon.layer import CyclonConfig
from node.protocols.gossip.protocol import GossipConfig
from node.protocols.static_gossip.protocol import StaticGossipConfig
from node.transport.settings import TransportSettings
from node.transport.shell import PeerShell
from tests.helpers import running

PEERS, EVENTS, RATE = 8, 2000, 400.0
MIN_AFTER, MAX_AFTER = 10, 100
"""After the burst, publishes at 10/s until every receiver has MIN_AFTER of them, MAX_AFTER at most."""


async def burst(tmp_path, mode: str, protocol: str = "gossip", events: int = EVENTS, rate: float = RATE) -> dict:
    """Publish ``events`` at ``rate`` into peer 0 of 8 flooding peers in this process: ``gossip``
    over CYCLON (3 contacts each), or ``static_gossip`` over the complete graph; the offered
    time, each receiver's first copies, and whether every view stayed non-empty."""
    cfg = GossipConfig(cyclon=CyclonConfig(view_size=20, shuffle_length=10, cycle_ms=1000, timeout_ms=500)) \
        if protocol == "gossip" else StaticGossipConfig(gamma=1.0)
    transport = TransportSettings(mode=mode)
    shells = [PeerShell(i, protocol, cfg, 1, "t", tmp_path, transport=transport) for i in range(PEERS)]
    layer = "cyclon" if protocol == "gossip" else "static"
    contacts_per_peer = 3 if protocol == "gossip" else PEERS - 1
    async with running(shells, contacts_per_peer) as control:
        await asyncio.sleep(2.0)  # two CYCLON cycles
        start = time.monotonic()
        calls = []
        for k in range(events):
            await asyncio.sleep(max(0.0, start + k / rate - time.monotonic()))
            calls.append(asyncio.ensure_future(control[0].Publish(control_pb2.PublishRequest(topic="a", payload=b"x" * 64),
                                                                  timeout=60)))
        offered_s = time.monotonic() - start
        results = await asyncio.gather(*calls, return_exceptions=True)
        published = sum(not isinstance(r, Exception) for r in results)
        refused = Counter(r.code().name if isinstance(r, grpc.aio.AioRpcError) else type(r).__name__
                          for r in results if isinstance(r, Exception))
        for _ in range(150):  # until every receiver has a first copy of every event (or 15 s)
            if min(len(s.core.seen) for s in shells[1:]) >= published:
                break
            await asyncio.sleep(0.1)
        first_copies = [len(s.core.seen) for s in shells[1:]]
        views_ok = True
        for _ in range(6):  # views over the next 3 s (three CYCLON cycles)
            views_ok &= all(s.core.view(layer) for s in shells)
            await asyncio.sleep(0.5)
        after: list[str] = []  # then publishes at 10/s until each receiver has MIN_AFTER of them

        def received_after() -> list[int]:
            return [sum(e in s.core.seen for e in after) for s in shells[1:]]
        while len(after) < MAX_AFTER and min(received_after()) < MIN_AFTER:
            reply = await control[0].Publish(control_pb2.PublishRequest(topic="a", payload=b"x"), timeout=10)
            await asyncio.sleep(0.1)
            after.append(reply.event_id)
        await asyncio.sleep(1.0)
        return {"offered_s": offered_s, "published": published, "refused": refused, "first_copies": first_copies,
                "views_ok": views_ok,
                "after": received_after(), "after_published": len(after),
                "send_failed": sum(s.stats["send_failed"] for s in shells),
                "send_failed_by_publisher": shells[0].stats["send_failed"]}


@pytest.mark.component
@pytest.mark.alone
def test_a_burst_into_one_peer_reaches_every_subscriber(tmp_path):
    r = asyncio.run(burst(tmp_path, TransportSettings().mode, "static_gossip"))
    assert r["offered_s"] < EVENTS / RATE * 1.5, r  # the burst was offered at (about) its rate
    assert r["published"] == EVENTS and min(r["first_copies"]) >= 0.999 * EVENTS, r


@pytest.mark.component
@pytest.mark.alone
def test_a_burst_over_cyclon_leaves_no_view_empty(tmp_path):
    r = asyncio.run(burst(tmp_path, "stream", "gossip"))
    assert r["views_ok"] and r["published"] == EVENTS, r
    # During the burst, CYCLON's own view changes (a shuffle's partner leaves the initiator's
    # view, for good when its reply misses the deadline on the overloaded loop) can leave a node
    # out of every view for a while: up to 163 events of 2,000 missed at one peer on a busy CI
    # machine, 23-43 here with two CPU hogs beside the test, 0-14 unloaded. 90% still tells a
    # working transport from the unary one (1,520-1,751) and from the collapse (12-24%).
    assert min(r["first_copies"]) >= 0.9 * EVENTS, r
    # Once the burst is over, the views carry events to every peer again (the collapse: none
    # reached). Not each one: with 8 nodes and views of 20, CYCLON keeps some node in no view at
    # all about a tenth of the time even unloaded (sampled every 10 ms: 391 of 3,915 samples),
    # and on a busy machine for longer (13 of 20 at one peer once, with two CPU hogs beside the
    # tests), so the publishes go on until every peer has MIN_AFTER of them.
    assert min(r["after"]) >= MIN_AFTER, r


@pytest.mark.component
@pytest.mark.alone
def test_a_burst_over_unary_calls_counts_every_undelivered_copy(tmp_path):
    """The unary transport loses much of the burst, but never silently: over the complete graph a
    receiver misses an event only if the publisher's own copy to it failed, so the publisher's
    failed sends (what summary.json reports under errors.send_failed) bound the misses."""
    r = asyncio.run(burst(tmp_path, "unary", "static_gossip"))
    missed = sum(r["published"] - n for n in r["first_copies"])
    assert r["published"] == EVENTS and missed > 0, r  # a burst the unary transport cannot carry
    assert missed <= r["send_failed_by_publisher"], r
