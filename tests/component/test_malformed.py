"""A peer that receives malformed or oversized messages rejects and counts them, and keeps running."""

import asyncio

import grpc
import pytest

from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc, peer_pb2
from node.core.gossip import GossipConfig
from node.core.types import Descriptor
from node.transport import codec
from node.transport.shell import SERVICE, PeerShell


async def _scenario(tmp_path):
    shells = [PeerShell(i, "gossip", GossipConfig(), 1, "t", tmp_path) for i in range(2)]
    ports = [await s.start() for s in shells]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports[0]}") as ch:
            raw = {m: ch.unary_unary(f"/{SERVICE}/{m}") for m in ("Exchange", "Forward")}
            bad = [
                ("Exchange", b"\xff\xff\xff\xff"),                                   # not protobuf
                ("Forward", b"\x0a\x05ab"),                                          # truncated
                ("Forward", peer_pb2.EventMessage(event_id="e", hops=1).SerializeToString()),  # no topic
                ("Exchange", b"\x00" * (codec.MAX_MESSAGE_BYTES + 10)),             # oversized
            ]
            for method, data in bad:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await raw[method](data, timeout=5)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            ctl = control_pb2_grpc.ControlStub(ch)
            stats = await ctl.GetStats(control_pb2.Empty(), timeout=5)
            assert stats.counters["malformed"] == len(bad)

            # Still a working peer: it joins, exchanges gossip and forwards a published event.
            other = Descriptor(1, shells[1].addr, frozenset({"a"}))
            await ctl.Join(control_pb2.JoinRequest(contacts=[codec.descriptor_to_pb(other)], topics=["a"]), timeout=5)
            reply = await ctl.Publish(control_pb2.PublishRequest(topic="a", payload=b"p"), timeout=5)
            assert reply.event_id == f"0-{shells[0].core.incarnation}-1"
            for _ in range(50):
                if shells[1].stats["events_received"]:
                    break
                await asyncio.sleep(0.05)
            assert shells[1].stats["events_received"] == 1
    finally:
        for s in shells:
            await s.stop()


def test_malformed_messages_are_rejected_counted_and_survived(tmp_path):
    asyncio.run(_scenario(tmp_path))
