"""A peer whose address a sender looked up went away without a reset (a Kubernetes pod deleted
and brought back on a new IP: connects to the old one hang, they are never refused): the sender's
call times out on a channel that never connected, and that drops the channel and the looked-up
address, so the next send reaches the peer where it is now. Real gRPC on loopback; the old
address is a listener on 127.0.0.2 whose accept queue is full, so SYNs to it go unanswered. A
timeout on an address the name still gives (a slow connect) keeps the channel."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from node._gen.overlaylab.v1 import control_pb2
from node.protocols.static_gossip.protocol import StaticGossipConfig
from node.transport.channels import Channels
from node.transport.settings import TransportSettings
from node.transport.shell import PeerShell
from tests.helpers import black_hole, running


async def until(condition, limit_s: float) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < limit_s, "timed out"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def stale_then_moved(tmp_path, transport: TransportSettings) -> dict:
    shells = [PeerShell(i, "static_gossip", StaticGossipConfig(gamma=1.0), 1, "t", tmp_path / "traces",
                        transport=transport) for i in range(2)]
    async with running(shells) as control:
        a, b = shells
        channels = a.channels if transport.mode == "unary" else a.peer_host.channels
        holes = black_hole(int(b.addr.rpartition(":")[2]))
        try:
            # As the sender last looked it up: peer b's host at its old address.
            channels.forget(b.addr)
            channels._hosts["127.0.0.1"] = "127.0.0.2"
            await control[0].Publish(control_pb2.PublishRequest(topic="a", payload=b"1"), timeout=5)
            failed_after = await until(lambda: a.stats["send_failed"] >= 1, 15)
            await control[0].Publish(control_pb2.PublishRequest(topic="a", payload=b"2"), timeout=5)
            await until(lambda: len(b.core.seen) >= 1, 5)
            return {"failed_after": failed_after, "send_failed": a.stats["send_failed"], "b_seen": len(b.core.seen),
                    "connected": channels.connected(b.addr), "looked_up": dict(channels._hosts)}
        finally:
            for s in holes:
                s.close()


@pytest.mark.parametrize("transport", [TransportSettings(mode="unary"), TransportSettings(mode="stream", deadline_ms=1000)],
                         ids=["unary", "stream"])
def test_a_send_that_timed_out_unconnected_looks_the_peer_up_again(tmp_path, transport):
    r = asyncio.run(stale_then_moved(tmp_path, transport))
    assert r["send_failed"] == 1 and r["b_seen"] == 1  # the first copy lost to the old address, the next delivered
    assert r["connected"] and "127.0.0.1" not in r["looked_up"]
    # a connect that hung until its timeout (unary) or the stream's deadline, never a refusal
    assert r["failed_after"] > 0.9 * (transport.connect_timeout_ms if transport.mode == "unary" else transport.deadline_ms) / 1000


async def stale_verdicts() -> dict:
    """``Channels.stale`` on real channels to a black hole, after a call on each timed out."""
    holes = black_hole(0)
    port = holes[0].getsockname()[1]
    channels = Channels(None, asyncio.ensure_future, TransportSettings().connect_timeout_ms)
    deadline = grpc.StatusCode.DEADLINE_EXCEEDED
    try:
        async def timed_out(addr: str) -> grpc.aio.Channel:
            """A channel to ``addr``, its host looked up as the black hole, and a call on it timed out."""
            channels._hosts[addr.rpartition(":")[0]] = "127.0.0.2"
            channel = channels.get(addr)
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await channel.unary_unary("/overlaylab.v1.Peer/Ping")(b"", timeout=0.5)
            assert failed.value.code() == deadline
            return channel

        held = await timed_out(f"127.0.0.2:{port}")  # the name still gives that address: a slow connect
        verdicts = {"address_holds": await channels.stale(f"127.0.0.2:{port}", held, deadline),
                    "address_holds_unavailable": await channels.stale(f"127.0.0.2:{port}", held, grpc.StatusCode.UNAVAILABLE)}
        moved = await timed_out(f"127.0.0.1:{port}")  # the name now gives another address
        verdicts["moved"] = await channels.stale(f"127.0.0.1:{port}", moved, deadline)
        channels.forget(f"127.0.0.1:{port}")
        channels.get(f"127.0.0.1:{port}")
        verdicts["moved_but_reopened"] = await channels.stale(f"127.0.0.1:{port}", moved, deadline)  # a newer channel
        return verdicts
    finally:
        await channels.close()
        for s in holes:
            s.close()


def test_only_a_timeout_on_an_address_the_name_no_longer_gives_drops_the_channel():
    assert asyncio.run(stale_verdicts()) == {"address_holds": False, "address_holds_unavailable": True,
                                             "moved": True, "moved_but_reopened": False}
