"""Messages held by the link emulation go when the rules change: a peer that published 30,000
events under an hour's delay ends, once the rules are reset, with no more memory than a peer that
published them without delay (issue 52). The peer under test runs in a process of its own."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from node.protocols.gossip.protocol import GossipConfig
from node.transport.settings import TransportSettings
from node.transport.shell import PeerShell

pytestmark = pytest.mark.component
PUBLISHES = 30_000


async def run_peer(tmp_path, mode: str, *flags: str) -> dict:
    receiver = PeerShell(1, "gossip", GossipConfig(), 1, "held", tmp_path / "receiver", transport=TransportSettings(mode=mode))
    await receiver.start()
    try:
        receiver._execute(receiver.core.subscribe_all(["a"], receiver.now))
        receiver._execute(receiver.core.start(receiver.now, []))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.component.held_peer", mode, str(PUBLISHES), receiver.addr,
            str(tmp_path / f"peer-{mode}{''.join(flags)}"), *flags, stdout=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(proc.communicate(), 240)
        assert proc.returncode == 0
        return json.loads(out.decode().splitlines()[-1])
    finally:
        await receiver.stop()


@pytest.mark.parametrize("mode", ["stream", "unary"])
def test_a_peer_s_memory_returns_when_rules_that_held_30000_publishes_for_an_hour_are_reset(tmp_path, mode):
    held = asyncio.run(run_peer(tmp_path, mode))
    baseline = asyncio.run(run_peer(tmp_path, mode, "--no-delay"))
    assert held["held"] == PUBLISHES and held["stats"]["held_retimed"] == held["held"]
    assert held["gone"] and baseline["held"] == 0
    # Live Python blocks are the exact measure: the held messages, their copies and timers are
    # Python objects. RSS after malloc_trim also carries allocator arenas that the interleaving of
    # held and freed objects leaves fragmented, and that varies with the host's load: stream
    # 1.13x the baseline idle, 1.21x beside two CPU hogs (make test-busy), unary below its
    # baseline. So RSS is bounded loosely, against a gross leak only.
    assert held["after"]["blocks"] <= 1.1 * baseline["after"]["blocks"], (held, baseline)
    assert held["after"]["rss_mib"] <= 1.5 * baseline["after"]["rss_mib"], (held, baseline)
