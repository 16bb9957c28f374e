"""PolderCast's ring_failover over real gRPC: a Forward to a crashed ring successor fails (a unary
call, or the write to a link stream), the peer counts it and sends the event to the next
successor instead."""

import asyncio

import grpc
import pytest

from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc
from node.kit.types import Descriptor
from node.protocols.cyclon.layer import CyclonConfig
from node.protocols.poldercast.protocol import PolderCastConfig
from node.transport.settings import TransportSettings
from node.transport.shell import PeerShell
from tests.helpers import eventually

NEVER_MS = 1e9  # no gossip tick during the test: the ring is set by hand


async def _scenario(tmp_path, mode):
    cfg = PolderCastConfig(cyclon=CyclonConfig(cycle_ms=NEVER_MS), cycle_ms=NEVER_MS, ring_failover=True)
    shells = [PeerShell(i, "poldercast", cfg, 1, "t", tmp_path, transport=TransportSettings(mode=mode)) for i in range(3)]
    for s in shells:
        await s.start()
    try:
        for shell in shells:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{shell.control_port}") as ch:
                await control_pb2_grpc.ControlStub(ch).Join(control_pb2.JoinRequest(topics=["a"]), timeout=5)
        rings = shells[0].core.layers["rings"]
        crashed, standby = (Descriptor(i, shells[i].addr, frozenset({"a"})) for i in (1, 2))
        rings.view = {1: crashed, 2: standby}
        rings.succ["a"], rings.pred["a"] = [1, 2], []
        await shells[1].stop()

        async with grpc.aio.insecure_channel(f"127.0.0.1:{shells[0].control_port}") as ch:
            await control_pb2_grpc.ControlStub(ch).Publish(control_pb2.PublishRequest(topic="a", payload=b"p"), timeout=5)
        await eventually(lambda: shells[2].stats["events_received"])
        assert shells[0].stats["send_failed"] == 1
        assert shells[2].stats["events_received"] == 1
        assert rings.succ["a"] == [2] and 1 not in rings.view
    finally:
        for s in (shells[0], shells[2]):
            await s.stop()


@pytest.mark.parametrize("mode", ["unary", "stream"])
def test_failed_forward_goes_to_the_next_ring_neighbour(tmp_path, mode):
    asyncio.run(_scenario(tmp_path, mode))
