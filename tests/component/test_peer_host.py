"""The peers of one process share a host (node/transport/host.py): one Peer server and address,
one link (a control and an event stream) per other process, one span pipeline. Real gRPC on loopback: two hosts, A with 4
peers and B with 2, flooding over the complete graph (static_gossip) with streamed links."""

from __future__ import annotations

import asyncio
import json
import threading
import time

from node._gen.overlaylab.v1 import control_pb2
from node.kit.interpret import EVENTS_RECEIVED
from node.kit.types import Gossip
from node.protocols.cyclon.layer import CyclonConfig
from node.protocols.gossip.protocol import GossipConfig
from node.protocols.static_gossip.protocol import StaticGossipConfig
from node.transport import host as host_module
from node.transport.host import PeerHost
from node.transport.settings import TransportSettings
from node.transport.shell import PeerShell
from tests.helpers import eventually, running

EVENTS = 20


def span_threads() -> int:
    return sum(t.name == "overlaylab-spans" for t in threading.enumerate())


async def two_hosts(tmp_path) -> dict:
    transport = TransportSettings(mode="stream")
    threads_before = span_threads()
    hosts = [PeerHost(transport), PeerHost(transport)]
    shells = [PeerShell(i, "static_gossip", StaticGossipConfig(gamma=1.0), 1, "t", tmp_path / "traces",
                        transport=transport, peer_host=hosts[0 if i < 4 else 1]) for i in range(6)]
    async with running(shells) as control:
        for _ in range(EVENTS):
            await control[0].Publish(control_pb2.PublishRequest(topic="a", payload=b"x"), timeout=5)
        # Flooding the complete graph of 6: the publisher sends each event to 5, each of them to the other 4.
        # Wait for every copy, not only the first at each peer, before reading the counters.
        await eventually(lambda: sum(s.stats[EVENTS_RECEIVED] for s in shells) == EVENTS * (5 + 5 * 4))
        stats = [control_pb2.Stats.FromString((await ctl.GetStats(control_pb2.Empty(), timeout=5)).SerializeToString())
                 for ctl in control]
        for ctl in control:
            await ctl.Leave(control_pb2.Empty(), timeout=30)
        return {"addrs": [s.addr for s in shells], "host_addrs": [h.addr for h in hosts],
                "links": [sorted(h.links) for h in hosts], "seen": [len(s.core.seen) for s in shells],
                "counters": [dict(st.counters) for st in stats], "span_threads": span_threads() - threads_before}


def test_peers_of_one_process_share_a_server_one_stream_per_process_and_one_span_thread(tmp_path):
    r = asyncio.run(two_hosts(tmp_path))
    a, b = r["host_addrs"]
    assert r["addrs"] == [a] * 4 + [b] * 2 and a != b  # one address per process
    assert r["links"] == [[b], [a]]  # a stream to the other process only: none within one
    assert r["seen"] == [EVENTS] * 6
    # Copies between the processes travel in streams, those within one never: the streams carried
    # exactly the copies whose sender and receiver are in different processes (from the spans).
    host = [0] * 4 + [1] * 2
    receives, crossing = 0, 0
    for node in range(6):
        lines = (tmp_path / "traces" / f"node-{node}.jsonl").read_text().splitlines()
        batches = [rs for line in lines for rs in json.loads(line)["resourceSpans"]]
        resources = {a["value"]["intValue"] for rs in batches for a in rs["resource"]["attributes"]
                     if a["key"] == "overlaylab.node_id"}
        assert resources == {str(node)}  # each peer's spans in its own file, under its own resource
        for rs in batches:
            for span in rs["scopeSpans"][0]["spans"]:
                attrs = {a["key"]: a["value"] for a in span["attributes"]}
                if span["name"] == "receive":
                    receives += 1
                    crossing += host[int(attrs["pubsub.from"]["intValue"])] != host[node]
    counters_a, counters_b = r["counters"][0], r["counters"][4]  # a process's counters ride with its first peer
    assert 0 < crossing < receives
    assert counters_a["stream_messages"] + counters_b["stream_messages"] == crossing
    assert "stream_messages" not in r["counters"][1]
    assert sum(c.get("events_received", 0) for c in r["counters"]) == receives
    assert r["span_threads"] == 2  # one export thread per process, not per peer


async def blocked_events(tmp_path) -> dict:
    """Hosts A (peers 0, 1) and B (peers 2, 3) gossiping over CYCLON; B stops reading event
    copies after the first (its inbox is full and never drains). Counts the CYCLON messages B's
    peers get from A's after that."""
    transport = TransportSettings(mode="stream")
    hosts = [PeerHost(transport), PeerHost(transport)]
    cfg = GossipConfig(cyclon=CyclonConfig(view_size=3, shuffle_length=2, cycle_ms=200, timeout_ms=150))
    shells = [PeerShell(i, "gossip", cfg, 1, "t", tmp_path / "traces", transport=transport, peer_host=hosts[i // 2])
              for i in range(4)]
    b = hosts[1]
    b._queue_event = lambda *copy: b._inbox.append(copy)  # never drained
    gossip_from_a: list[float] = []
    for s in shells[2:]:
        def receive(src, msg, parent, reply_to=None, original=s.receive):
            if isinstance(msg, Gossip) and src < 2:
                gossip_from_a.append(time.monotonic())
            return original(src, msg, parent, reply_to)
        s.receive = receive
    async with running(shells) as control:
        for _ in range(5):
            await control[0].Publish(control_pb2.PublishRequest(topic="a", payload=b"x"), timeout=5)
        await eventually(lambda: b._inbox)
        blocked_at = time.monotonic()
        await asyncio.sleep(2.0)  # ten CYCLON cycles
        return {"inbox": len(b._inbox), "seen_at_b": [len(s.core.seen) for s in shells[2:]],
                "gossip_from_a_after": sum(t > blocked_at for t in gossip_from_a)}


def test_a_receiver_that_stops_reading_events_still_reads_gossip(tmp_path, monkeypatch):
    monkeypatch.setattr(host_module, "INBOX_EVENTS", 0)  # one queued copy stops the reading
    r = asyncio.run(blocked_events(tmp_path))
    assert r["inbox"] >= 1 and r["seen_at_b"] == [0, 0], r  # B's event lanes are held
    # Its control lanes are not: A's peers' CYCLON requests and replies keep arriving (each of
    # the two A peers starts an exchange every 200 ms; two of its three partners are B's).
    assert r["gossip_from_a_after"] >= 5, r


def test_first_copies_are_handled_before_copies_of_events_already_seen():
    """A flood's copies arrive in waves: the first copy of an event (which the next hop waits
    for) is handed over before copies of events the peer has seen, whatever their order of
    arrival; each lane keeps its own order."""
    from types import SimpleNamespace

    from node.kit.types import EventMsg
    from node.kit.views import DuplicateFilter

    handled = []
    seen = DuplicateFilter(100)
    seen.add("old")
    peer = SimpleNamespace(node_id=1, core=SimpleNamespace(seen=seen),
                           receive=lambda src, msg, parent: handled.append((msg.event_id, src)))

    async def main():
        host = PeerHost(TransportSettings(mode="stream"))
        host.peers[1] = peer
        host._loop = asyncio.get_running_loop()
        for src, event in [(2, "old"), (3, "old"), (4, "new"), (5, "old"), (6, "new")]:
            host._queue_event(peer, src, EventMsg(event, "t", b"", 9, 1), None)
        assert (len(host._inbox), len(host._seen_inbox)) == (2, 3)
        await host._draining

    asyncio.run(main())
    assert handled == [("new", 4), ("new", 6), ("old", 2), ("old", 3), ("old", 5)]
