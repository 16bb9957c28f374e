"""A peer in a process of its own (``python -m tests.component.held_peer MODE N ADDR TRACES
[--no-delay]``): it joins the peer at ADDR, publishes N events while its links hold every
message for an hour (the longest delay SetLinkRules accepts), resets the rules, waits until what
it held has gone, and prints its memory as JSON: live Python blocks and RSS (after malloc_trim),
before, while holding and after. With --no-delay it publishes the same events without holding them: the
baseline a peer that held nothing ends at."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import sys
from pathlib import Path

from node._gen.overlaylab.v1 import control_pb2
from node.kit.links import MAX_DELAY_MS
from node.kit.types import Descriptor
from node.protocols.cyclon.layer import CyclonConfig
from node.protocols.gossip.protocol import GossipConfig
from node.transport.settings import TransportSettings
from node.transport.shell import PeerShell
from tests.helpers import eventually


def memory() -> dict[str, float]:
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return {"blocks": sys.getallocatedblocks(),
            "rss_mib": int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20}


def held(peer: PeerShell) -> int:
    return len(peer._held) + sum(len(messages) for _, messages in peer.peer_host._due.values())


async def main(mode: str, n: int, addr: str, traces: str, delay: bool) -> dict:
    # No shuffle during the test: a shuffle whose reply the held links never bring drops the
    # receiver from the view, and the publishes after it would send nothing.
    config = GossipConfig(cyclon=CyclonConfig(cycle_ms=MAX_DELAY_MS))
    peer = PeerShell(0, "gossip", config, 1, "held", Path(traces), transport=TransportSettings(mode=mode))
    await peer.start()
    peer._execute(peer.core.start(peer.now, [Descriptor(1, addr, frozenset({"a"}))]))
    await asyncio.sleep(0.5)
    out = {"before": memory()}
    if delay:
        await peer.SetLinkRules(control_pb2.LinkRules(rules=[control_pb2.LinkRule(delay_ms=MAX_DELAY_MS)]), None)
    for i in range(n):
        peer._execute(peer.core.publish("a", b"x" * 64, peer.now))
        if i % 500 == 0:
            await asyncio.sleep(0)
    if delay:  # on a loaded host, not every send has reached the hold yet
        await eventually(lambda: held(peer) >= n, 120)
    out["held"] = held(peer)
    out["holding"] = memory()
    await peer.SetLinkRules(control_pb2.LinkRules(), None)
    out["gone"] = await eventually(lambda: not peer._tasks and not held(peer)
                                   and all(link.idle() for link in peer.peer_host.links.values()), 120)
    await asyncio.sleep(0.5)
    out["after"] = memory()
    out["stats"] = dict(peer.stats)
    await peer.stop()
    return out


if __name__ == "__main__":
    mode, n, addr, traces = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    print(json.dumps(asyncio.run(main(mode, n, addr, traces, "--no-delay" not in sys.argv))))
