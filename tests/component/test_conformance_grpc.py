"""The gRPC half of the conformance suite (tests/unit/test_conformance.py): a protocol of each
protocol module delivers every event on 16 real peers as in the simulator (scored by the
plain-Python crosscheck; the streamed run by Spark too, and the two agree), and a running peer
of every registered protocol rejects, counts and survives malformed bytes of every message type
of the Peer service, as unary calls and inside the frames of a link stream."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
import yaml
from pydantic import TypeAdapter

from analysis.crosscheck import compare, compute
from analysis.runfiles import read_stats
from controller.cli.main import main
from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc, peer_pb2
from node.kit import protocol_config_class, protocol_names
from node.kit.types import EventMsg
from node.transport.settings import TransportSettings
from node.transport.shell import SERVICE, PeerShell
from node.wire import codec
from tests.conftest import PLUGIN_ENV
from tests.helpers import conformance_experiment, one_per_module

PROTOCOLS = protocol_names()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "transport"), [(n, "unary") for n in one_per_module(PROTOCOLS)]
                         + [("poldercast", "stream")])  # three layers of exchanges over streamed links
def test_sim_and_local_both_deliver_every_event(name, transport, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OVERLAYLAB_PROTOCOLS", PLUGIN_ENV["OVERLAYLAB_PROTOCOLS"])  # for the peer processes
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**conformance_experiment(name), "transport": {"mode": transport}}))
    summaries = {}
    spark = transport == "stream"  # one local run is analysed by Spark too, and the two must agree
    for backend in ("sim", "local"):
        out = tmp_path / backend
        with pytest.raises(SystemExit) as done:
            main(["run", str(path), "--backend", backend, "--out", str(out),
                  *([] if backend == "local" and spark else ["--no-analyze"])])
        assert done.value.code == 0
        [rd] = out.iterdir()
        assert json.loads((rd / "run.json").read_text())["protocol"] == name
        if backend == "local" and spark:
            summaries[backend] = json.loads((rd / "summary.json").read_text())
            disagree = [r for r in compare(rd) if not r["agree"]]
            assert not disagree, (backend, disagree)  # Spark's summary against the plain-Python one
        else:  # scored by the plain-Python computation alone (Spark's agrees: above and test_crosscheck.py)
            summaries[backend] = compute(rd)
            stats = read_stats(rd)
            summaries[backend]["errors"] = {"malformed": sum(r["counters"].get("malformed", 0) for r in stats)}
            summaries[backend]["spans"]["dropped"] = sum(r["counters"].get("spans_dropped", 0) for r in stats)
    capsys.readouterr()
    for backend, s in summaries.items():
        assert s["events"] == 24, backend
        assert s["hit_ratio"] == 1.0 and s["complete_event_ratio"] == 1.0, (backend, s["hit_ratio"])
        assert s["errors"]["malformed"] == 0 and s["spans"]["dropped"] == 0, backend


# Bytes no correct peer sends, for any message type: not protobuf, a truncated field, an
# empty message (every type needs some field), more than the size limit.
GARBAGE = [b"\xff\xff\xff\xff", b"\x0a\x05ab", b"", b"\x00" * (codec.MAX_MESSAGE_BYTES + 10)]


async def _malformed(name: str, tmp_path) -> None:
    params = TypeAdapter(protocol_config_class(name)).validate_python({})
    shell = PeerShell(0, name, params, 1, "t", tmp_path, transport=TransportSettings(mode="unary"))  # one call per message type
    port = await shell.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch, \
                grpc.aio.insecure_channel(f"127.0.0.1:{shell.control_port}") as control:
            ctl = control_pb2_grpc.ControlStub(control)
            await ctl.Join(control_pb2.JoinRequest(topics=["a"]), timeout=5)
            sent = 0
            for wire in codec.WIRE_TYPES:
                call = ch.unary_unary(f"/{SERVICE}/{wire.rpc}")
                for data in GARBAGE:
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await call(data, timeout=5)
                    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (wire.rpc, data[:8])
                    sent += 1
            stats = await ctl.GetStats(control_pb2.Empty(), timeout=5)
            assert stats.counters["malformed"] == sent == len(codec.WIRE_TYPES) * len(GARBAGE)
            reply = await ctl.Publish(control_pb2.PublishRequest(topic="a", payload=b"p"), timeout=5)
            assert reply.event_id.startswith(f"0-{shell.core.incarnation}-1-")  # still a working peer
    finally:
        await shell.stop()


async def _malformed_frames(tmp_path) -> None:
    shell = PeerShell(0, "gossip", TypeAdapter(protocol_config_class("gossip")).validate_python({}), 1, "t", tmp_path,
                      transport=TransportSettings(mode="stream"))
    port = await shell.start()
    good = codec.encode(EventMsg("0-x-1", "a", b"p", 0, 0), 3, codec.NO_TRACE)
    bad = [b"\xff\xff\xff\xff"]  # not a frame
    bad += [peer_pb2.Frame(messages=[peer_pb2.Envelope(rpc=w.rpc, data=d, dst=0)]).SerializeToString()
            for w in codec.WIRE_TYPES for d in GARBAGE[:3]]  # a bad message of each type
    bad.append(peer_pb2.Frame(messages=[peer_pb2.Envelope(rpc="Nope", data=b"", dst=0)]).SerializeToString())
    bad.append(peer_pb2.Frame(messages=[peer_pb2.Envelope(rpc="Forward", data=good)]).SerializeToString())  # for no node
    bad.append(peer_pb2.Frame(messages=[peer_pb2.Envelope(rpc="Forward", data=good, dst=5)]).SerializeToString())  # not here
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch, \
                grpc.aio.insecure_channel(f"127.0.0.1:{shell.control_port}") as control:
            ctl = control_pb2_grpc.ControlStub(control)
            await ctl.Join(control_pb2.JoinRequest(topics=["a"]), timeout=5)
            call = ch.stream_unary(f"/{SERVICE}/Stream")()
            for data in bad:  # one stream: each bad frame or message is refused and the stream goes on
                await call.write(data)
            await call.done_writing()
            assert await call == b""
            stats = await ctl.GetStats(control_pb2.Empty(), timeout=5)
            assert stats.counters["malformed"] == len(bad)
            reply = await ctl.Publish(control_pb2.PublishRequest(topic="a", payload=b"p"), timeout=5)
            assert reply.event_id.startswith(f"0-{shell.core.incarnation}-1-")
    finally:
        await shell.stop()


def test_malformed_frames_and_messages_on_a_link_stream_are_rejected_counted_and_survived(tmp_path):
    asyncio.run(_malformed_frames(tmp_path))


@pytest.mark.parametrize("name", PROTOCOLS)
def test_malformed_bytes_of_every_message_type_are_rejected_counted_and_survived(name, tmp_path):
    asyncio.run(_malformed(name, tmp_path))
