"""Hostile clients against running peers (real gRPC on loopback), each case of issue 15: every
one ends in a clear refusal or a correct result, is counted, and the peer keeps serving good
traffic. Clients are built from proto/ and raw bytes, as an outsider would."""

import asyncio
import time
from pathlib import Path

import grpc
import pytest

from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc, peer_pb2
from node.kit.types import Descriptor, Gossip
from node.protocols.gossip.protocol import GossipConfig
from node.transport.security import Credentials, aio_channel, make_pki
from node.transport.settings import TransportSettings
from node.transport.shell import CONTROL_SERVICE, SERVICE, PeerShell
from node.wire import codec
from tests.helpers import eventually

EMPTY = control_pb2.Empty()


async def start(tmp_path: Path, n: int = 2, pki: Path | None = None, mode: str = "unary") -> list[PeerShell]:
    creds = Credentials.load(pki, "peer") if pki else None
    shells = [PeerShell(i, "gossip", GossipConfig(), 1, "t", tmp_path / "traces", credentials=creds,
                        transport=TransportSettings(mode=mode)) for i in range(n)]
    for s in shells:
        await s.start()
    return shells


async def stop(shells: list[PeerShell]) -> None:
    for s in shells:
        await s.stop()


async def joined_and_delivering(shells: list[PeerShell], ctl: control_pb2_grpc.ControlStub,
                                ctl1: control_pb2_grpc.ControlStub | None = None) -> None:
    """Good traffic still works: node 0 joins with node 1 as contact, publishes, node 1 gets it."""
    other = Descriptor(1, shells[1].addr, frozenset({"a"}))
    if ctl1 is not None:
        await ctl1.Join(control_pb2.JoinRequest(topics=["a"]), timeout=5)
    await ctl.Join(control_pb2.JoinRequest(contacts=[codec.descriptor_to_pb(other)], topics=["a"]), timeout=5)
    before = shells[1].stats["events_received"]
    reply = await ctl.Publish(control_pb2.PublishRequest(topic="a", payload=b"p"), timeout=5)
    assert reply.event_id.startswith(f"0-{shells[0].core.incarnation}-")
    if not await eventually(lambda: shells[1].stats["events_received"] > before):
        pytest.fail("the peer stopped serving good traffic")


# --- plaintext peers: input validation on both services --------------------------------------

async def _malformed(tmp_path):
    shells = await start(tmp_path)
    try:
        async with grpc.aio.insecure_channel(shells[0].addr) as ch, \
                grpc.aio.insecure_channel(f"127.0.0.1:{shells[0].control_port}") as control:
            raw = {m: ch.unary_unary(f"/{SERVICE}/{m}") for m in ("Exchange", "Forward")}
            bad = [
                ("Exchange", b"\xff\xff\xff\xff"),                                   # not protobuf
                ("Forward", b"\x0a\x05ab"),                                          # truncated
                ("Forward", peer_pb2.EventMessage(event_id="e", hops=1).SerializeToString()),  # no topic
                ("Exchange", b"\x00" * (codec.MAX_MESSAGE_BYTES + 10)),             # oversized
                ("Forward", peer_pb2.EventMessage(event_id="e", topic="a", hops=2**32 - 1).SerializeToString()),
            ]
            for method, data in bad:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await raw[method](data, timeout=5)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            ctl = control_pb2_grpc.ControlStub(control)
            assert (await ctl.GetStats(EMPTY, timeout=5)).counters["malformed"] == len(bad)

            # Control requests a peer must refuse: each INVALID_ARGUMENT, counted, nothing changed.
            c, rule = control_pb2, control_pb2.LinkRule
            bad_control = [
                ("Publish", b"\xff\xff\xff"),                                              # not protobuf
                ("Subscribe", c.TopicRequest(topic="").SerializeToString()),
                ("Subscribe", c.TopicRequest(topic="x" * (codec.MAX_NAME + 1)).SerializeToString()),
                ("Subscribe", c.TopicRequest(topic="x" * 1_000_000).SerializeToString()),
                ("Publish", c.PublishRequest(topic="", payload=b"p").SerializeToString()),
                ("Publish", c.PublishRequest(topic="a", payload=b"p" * (codec.MAX_PAYLOAD_BYTES + 1)).SerializeToString()),
                ("Join", c.JoinRequest(topics=[f"t{i}" for i in range(codec.MAX_TOPICS + 1)]).SerializeToString()),
                ("SetLinkRules", c.LinkRules(rules=[rule(delay_ms=float("nan"))]).SerializeToString()),
                ("SetLinkRules", c.LinkRules(rules=[rule(delay_ms=-1)]).SerializeToString()),
                ("SetLinkRules", c.LinkRules(rules=[rule(jitter_ms=float("inf"))]).SerializeToString()),
                ("SetLinkRules", c.LinkRules(rules=[rule(loss=1.5)]).SerializeToString()),
                ("SetLinkRules", c.LinkRules(base_delay_ms=[float("inf")]).SerializeToString()),
                ("SetLinkRules", c.LinkRules(rules=[rule(delay_ms=1e300)]).SerializeToString()),  # finite, huge
                ("SetLinkRules", c.LinkRules(base_delay_ms=[1e9]).SerializeToString()),
                ("SetLinkRules", c.LinkRules(bandwidth_kbps=1e-300).SerializeToString()),
                ("ProbeLink", c.ProbeRequest(node_id=1, addr="x", count=codec.MAX_PROBES + 1).SerializeToString()),
                *(("Join", c.JoinRequest(topics=["a"], contacts=[peer_pb2.NodeDescriptor(node_id=1, addr=addr)]).SerializeToString())
                  for addr in ("", "unix:///var/run/docker.sock", "127.0.0.1:0")),  # no peer's address
            ]
            for method, data in bad_control:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await control.unary_unary(f"/{CONTROL_SERVICE}/{method}")(data, timeout=10)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
                assert "Traceback" not in (err.value.details() or "")
            stats = await ctl.GetStats(EMPTY, timeout=5)
            assert stats.counters["malformed"] == len(bad) + len(bad_control)
            assert shells[0].core.topics == frozenset() and shells[0].links.rules == []

            # A join with the most topics allowed costs time linear in them (it took 201 s at 100,000).
            started = time.perf_counter()
            await ctl.Join(c.JoinRequest(topics=[f"t{i}" for i in range(codec.MAX_TOPICS)]), timeout=10)
            assert time.perf_counter() - started < 3.0 and len(shells[0].core.topics) == codec.MAX_TOPICS
            await ctl.Leave(EMPTY, timeout=5)
        await stop(shells[:1])
        shells[0] = (await start(tmp_path, 1))[0]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{shells[0].control_port}") as control:
            await joined_and_delivering(shells, control_pb2_grpc.ControlStub(control))
    finally:
        await stop(shells)


def test_malformed_and_out_of_range_input_is_refused_counted_and_survived(tmp_path):
    asyncio.run(_malformed(tmp_path))


async def _guessed_ids(tmp_path):
    """Forged copies sent ahead under the ids a publisher would use next do not pre-empt the real
    events, even once one of its ids has been seen: the guesses (``node-seq``, a wrong
    incarnation, the seen id's incarnation with the next sequence numbers, with and without the
    seen tag) never match, since each id ends with a tag keyed by the publisher's secret."""
    shells = await start(tmp_path)
    try:
        async with grpc.aio.insecure_channel(shells[1].addr) as ch, \
                grpc.aio.insecure_channel(f"127.0.0.1:{shells[0].control_port}") as c0, \
                grpc.aio.insecure_channel(f"127.0.0.1:{shells[1].control_port}") as c1:
            forward = ch.unary_unary(f"/{SERVICE}/Forward")
            ctl0, ctl1 = control_pb2_grpc.ControlStub(c0), control_pb2_grpc.ControlStub(c1)
            await ctl1.Join(control_pb2.JoinRequest(topics=["a"]), timeout=5)
            other = Descriptor(1, shells[1].addr, frozenset({"a"}))
            await ctl0.Join(control_pb2.JoinRequest(contacts=[codec.descriptor_to_pb(other)], topics=["a"]), timeout=5)
            seen = (await ctl0.Publish(control_pb2.PublishRequest(topic="a", payload=b"p"), timeout=5)).event_id
            node, incarnation, seq, tag = seen.split("-")
            assert (node, seq) == ("0", "1") and len(tag) == 16
            await eventually(lambda: shells[1].stats["events_received"] == 1)
            for n in range(2, 7):
                for guess in (f"0-{n}", f"0-00000000-{n}", f"0-{incarnation}-{n}", f"0-{incarnation}-{n}-{tag}"):
                    await forward(codec.encode(codec.EventMsg(guess, "a", b"forged", 0, 1), 0), timeout=5)
            forged = shells[1].stats["events_received"]
            assert forged == 1 + 5 * 4
            ids = [(await ctl0.Publish(control_pb2.PublishRequest(topic="a", payload=b"p"), timeout=5)).event_id
                   for _ in range(5)]
            assert len(set(ids)) == 5 and all(i.startswith(f"0-{incarnation}-") for i in ids)
            await eventually(lambda: shells[1].stats["events_received"] == forged + 5)
            assert shells[1].stats["events_received"] == forged + 5  # each a first copy, none taken for a duplicate
            assert shells[1].stats["duplicates"] == 0
    finally:
        await stop(shells)


def test_guessed_event_ids_do_not_pre_empt_real_events(tmp_path):
    asyncio.run(_guessed_ids(tmp_path))


# --- mutual TLS ----------------------------------------------------------------------------------

def listening_address(port: int) -> str:
    """The local address a TCP port listens on, from /proc/net/tcp{,6} (IPv4-mapped IPv6
    addresses, as gRPC binds them, given as IPv4)."""
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if int(p, 16) == port and state == "0A":  # LISTEN
                if table == "tcp6" and addr[:24] != "0000000000000000FFFF0000":
                    return addr
                return ".".join(str(int(addr[-8:][i:i + 2], 16)) for i in (6, 4, 2, 0))
    raise AssertionError(f"nothing listens on {port}")


async def _mtls(tmp_path, mode):
    pki, foreign = make_pki(tmp_path / "pki"), make_pki(tmp_path / "foreign")
    shells = await start(tmp_path, pki=pki, mode=mode)
    creds = {role: Credentials.load(pki, role) for role in ("peer", "controller", "loadgen")}
    control_addr = f"127.0.0.1:{shells[0].control_port}"
    try:
        assert listening_address(shells[0].control_port) == "127.0.0.1"

        # No certificate, or one from another run's CA: refused in the TLS handshake, both services.
        no_cert = Credentials(creds["peer"].ca, b"", b"")
        for addr in (shells[0].addr, control_addr):
            async with grpc.aio.insecure_channel(addr) as plain:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await control_pb2_grpc.ControlStub(plain).Leave(EMPTY, timeout=3)
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            for bad in (Credentials.load(foreign, "controller"),):
                async with aio_channel(addr, bad) as ch:
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await ch.unary_unary(f"/{CONTROL_SERVICE}/Leave")(b"", timeout=3)
                    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            ch = grpc.aio.secure_channel(addr, grpc.ssl_channel_credentials(no_cert.ca),
                                         options=[("grpc.ssl_target_name_override", "overlaylab.peer")])
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await ch.unary_unary(f"/{SERVICE}/Exchange")(b"", timeout=3)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            await ch.close()

        # Authenticated, but a role that may not: PERMISSION_DENIED, counted.
        denied = [
            ("loadgen", control_addr, CONTROL_SERVICE, "Leave", b""),
            ("loadgen", control_addr, CONTROL_SERVICE, "SetLinkRules", b""),
            ("loadgen", control_addr, CONTROL_SERVICE, "ProbeLink", b""),
            ("loadgen", control_addr, CONTROL_SERVICE, "GetSnapshot", b""),
            ("peer", control_addr, CONTROL_SERVICE, "Publish", b""),
            ("peer", control_addr, CONTROL_SERVICE, "Join", b""),
            ("controller", shells[0].addr, SERVICE, "Ping", b""),
        ]
        if mode == "unary":  # streams: the process's server has only Stream and Ping
            denied += [("controller", shells[0].addr, SERVICE, "Exchange", b"\x00"),   # view poisoning
                       ("loadgen", shells[0].addr, SERVICE, "Forward", b"\x00")]
        for role, addr, service, method, data in denied:
            async with aio_channel(addr, creds[role]) as ch:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await ch.unary_unary(f"/{service}/{method}")(data, timeout=5)
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, (role, method)
        if mode == "stream":
            async with aio_channel(shells[0].addr, creds["loadgen"]) as ch:  # a link stream, as a non-peer
                call = ch.stream_unary(f"/{SERVICE}/Stream")()
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await call.done_writing()  # no frame: the refusal precedes any read, and a write would race it
                    await call
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # Refusals by the Peer service are the process's own counters in stream mode.
        unauthorized = shells[0].stats["unauthorized"] + shells[0].peer_host.stats["unauthorized"]
        assert unauthorized == len(denied) + (mode == "stream") and shells[0].core.topics == frozenset()

        # The roles that may: the controller drives, Locust publishes, peers gossip over mTLS.
        async with aio_channel(control_addr, creds["controller"]) as c0, \
                aio_channel(f"127.0.0.1:{shells[1].control_port}", creds["controller"]) as c1:
            await joined_and_delivering(shells, control_pb2_grpc.ControlStub(c0), control_pb2_grpc.ControlStub(c1))
        async with aio_channel(control_addr, creds["loadgen"]) as ch:
            await control_pb2_grpc.ControlStub(ch).Publish(control_pb2.PublishRequest(topic="a", payload=b"q"), timeout=5)
        await eventually(lambda: shells[1].stats["events_received"] == 2)
        assert shells[1].stats["events_received"] == 2 and shells[1].stats["unauthorized"] == 0
    finally:
        await stop(shells)


@pytest.mark.parametrize("mode", ["unary", "stream"])
def test_mutual_tls_refuses_strangers_and_roles_out_of_place(tmp_path, mode):
    asyncio.run(_mtls(tmp_path, mode))


async def _impersonation(tmp_path):
    """A server with the controller's (or Locust's) certificate is refused by a peer's channel:
    each role's certificate names its role, and channels verify the peers' name."""
    pki = make_pki(tmp_path / "pki")
    results = {}
    for role in ("peer", "controller", "loadgen"):
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            SERVICE, {"Ping": grpc.unary_unary_rpc_method_handler(lambda data, ctx: data)})])
        port = server.add_secure_port("127.0.0.1:0", Credentials.load(pki, role).server())
        await server.start()
        try:
            async with aio_channel(f"127.0.0.1:{port}", Credentials.load(pki, "peer")) as ch:
                await ch.unary_unary(f"/{SERVICE}/Ping")(b"x", timeout=5)
            results[role] = "OK"
        except grpc.aio.AioRpcError as e:
            results[role] = e.code().name
        finally:
            await server.stop(0)
    return results


def test_only_the_peers_certificate_can_serve_as_a_peer(tmp_path):
    assert asyncio.run(_impersonation(tmp_path)) == {"peer": "OK", "controller": "UNAVAILABLE", "loadgen": "UNAVAILABLE"}


async def _foreign_ids(tmp_path):
    """A peer told the run's size refuses, counted, copies and gossip that name a node the run
    does not have, or carry an all-zero trace context, and keeps serving good traffic."""
    shell = PeerShell(0, "gossip", GossipConfig(), 1, "t", tmp_path / "traces", transport=TransportSettings(mode="unary"),
                      run_nodes=2)
    await shell.start()
    try:
        async with grpc.aio.insecure_channel(shell.addr) as ch:
            forward, exchange = ch.unary_unary(f"/{SERVICE}/Forward"), ch.unary_unary(f"/{SERVICE}/Exchange")
            stranger = Descriptor(7, "127.0.0.1:7000")
            bad = [
                (forward, codec.encode(codec.EventMsg("7-0-1", "a", b"p", 7, 1), 1)),   # a publisher of no node
                (forward, codec.encode(codec.EventMsg("1-0-1", "a", b"p", 1, 1), 9)),   # a sender of no node
                (forward, codec.encode(codec.EventMsg("1-0-2", "a", b"p", 1, 1), 1, (bytes(16), bytes(8)))),  # zero trace
                (exchange, codec.encode(Gossip("cyclon", Descriptor(1, "127.0.0.1:7001"), (stranger,)), 1)),
            ]
            for call, data in bad:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await call(data, timeout=5)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert shell.stats["malformed"] == len(bad)
            await forward(codec.encode(codec.EventMsg("1-0-3", "a", b"p", 1, 1), 1, (b"t" * 16, b"s" * 8)), timeout=5)
            assert shell.stats["events_received"] == 1
    finally:
        await shell.stop()


def test_ids_of_no_node_and_zero_trace_contexts_are_refused(tmp_path):
    asyncio.run(_foreign_ids(tmp_path))
