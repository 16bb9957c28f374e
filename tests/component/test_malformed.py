"""A peer that receives malformed or oversized messages rejects and counts them, and keeps running."""

import asyncio

import grpc
import pytest

from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc, peer_pb2
from node.core.gossip import GossipConfig
from node.core.types import Descriptor
from node.transport import codec
from node.transport.shell import CONTROL_SERVICE, SERVICE, PeerShell


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

            # Control requests a peer must refuse: each INVALID_ARGUMENT, counted, nothing changed.
            c, rule = control_pb2, control_pb2.LinkRule
            bad_control = [
                ("Publish", b"\xff\xff\xff"),                                              # not protobuf
                ("Subscribe", c.TopicRequest(topic="").SerializeToString()),
                ("Subscribe", c.TopicRequest(topic="x" * (codec.MAX_NAME + 1)).SerializeToString()),
                ("Publish", c.PublishRequest(topic="", payload=b"p").SerializeToString()),
                ("Publish", c.PublishRequest(topic="a", payload=b"p" * (codec.MAX_PAYLOAD_BYTES + 1)).SerializeToString()),
                ("Join", c.JoinRequest(topics=[f"t{i}" for i in range(codec.MAX_TOPICS + 1)]).SerializeToString()),
                ("SetLinkRules", c.LinkRules(rules=[rule(delay_ms=float("nan"))]).SerializeToString()),
                ("SetLinkRules", c.LinkRules(rules=[rule(delay_ms=-1)]).SerializeToString()),
                ("SetLinkRules", c.LinkRules(rules=[rule(loss=1.5)]).SerializeToString()),
                ("SetLinkRules", c.LinkRules(base_delay_ms=[float("inf")]).SerializeToString()),
                ("ProbeLink", c.ProbeRequest(node_id=1, addr="x", count=codec.MAX_PROBES + 1).SerializeToString()),
            ]
            for method, data in bad_control:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await ch.unary_unary(f"/{CONTROL_SERVICE}/{method}")(data, timeout=10)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            stats = await ctl.GetStats(control_pb2.Empty(), timeout=5)
            assert stats.counters["malformed"] == len(bad) + len(bad_control)
            assert shells[0].core.topics == frozenset() and shells[0].links.rules == []
            hop_bomb = peer_pb2.EventMessage(event_id="e", topic="a", hops=codec.MAX_HOPS + 1).SerializeToString()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await raw["Forward"](hop_bomb, timeout=5)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

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
