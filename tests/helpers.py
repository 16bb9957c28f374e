"""Test helpers: a seeded fake network of real cores (the simulator with small, explicit plans), local ports, synthetic runs."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest
import yaml

from controller.cli.main import main
from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc
from node.kit import create_protocol
from node.kit.links import LinkRule
from node.kit.types import Descriptor
from node.protocols.cyclon.layer import CyclonConfig
from node.protocols.gossip.protocol import GossipConfig
from node.sim import Simulation
from node.wire import codec

if TYPE_CHECKING:
    from node.transport.shell import PeerShell


def gossip_network(n: int, *, seed: int = 0, gamma: float = 1.0, view_size: int = 8, shuffle_length: int = 4,
                   topics: int = 4, subs_per_node: int = 1, contacts: int = 3,
                   delay_ms: float = 10.0, jitter_ms: float = 2.0, loss: float = 0.0,
                   timeout_ms: float = 500.0, repair_window_ms: float = GossipConfig.repair_window_ms) -> tuple[Simulation, list[frozenset[str]]]:
    rng = random.Random(seed)
    names = [f"t{i}" for i in range(topics)]
    subs = [frozenset(rng.sample(names, subs_per_node)) for _ in range(n)]
    cfg = GossipConfig(gamma=gamma, repair_window_ms=repair_window_ms,
                       cyclon=CyclonConfig(view_size=view_size, shuffle_length=shuffle_length, timeout_ms=timeout_ms))
    sim = Simulation(seed=seed, link_rules=[LinkRule(delay_ms=delay_ms, jitter_ms=jitter_ms, loss=loss)], validate=True)
    for i in range(n):
        sim.add_node(create_protocol("gossip", Descriptor(i, f"n{i}", subs[i]), cfg, random.Random(f"{seed}:{i}")))
    for i in range(n):
        others = [j for j in range(n) if j != i]
        sim.start_node(i, [Descriptor(j, f"n{j}", subs[j]) for j in rng.sample(others, contacts)])
    return sim, subs


def spans(sim: Simulation) -> list[dict]:
    cols = sim.spans.columns
    return [dict(zip(cols, row)) for row in zip(*cols.values())]


CONFORMANCE_PARAMS = {"static_gossip": {"gamma": 1.0}}
"""Parameters a protocol needs to deliver every event of the conformance run (static gossip
below gamma 1 reaches a share of the graph by design)."""
CONFORMANCE_CONTACTS = {"stan": "per_topic", "dps": "seed", **dict.fromkeys(("spidercast", "similarity", "random_overlay", "ring_per_topic"), "all")}
"""The contacts a protocol starts from where a ring is not its bootstrap (StaN's per-topic views,
SpiderCast's full membership)."""


def one_per_module(names: list[str]) -> list[str]:
    """A protocol of each protocol module among ``names``: the one named after its module or its
    folder where there is one. SpiderCast's comparison overlays run its module's code with other selection
    rules, so the slow end-to-end checks run one of them; the unit suite runs every protocol."""
    from node.kit import protocol_spec

    by_module: dict[str, list[str]] = {}
    for name in names:
        by_module.setdefault(protocol_spec(name).build.__module__, []).append(name)
    return sorted(next((n for n in group if n in module.split(".")), group[0])
                  for module, group in by_module.items())


def conformance_experiment(protocol: str, **sections) -> dict:
    """The small static run every registered protocol must pass (tests/*/test_conformance.py):
    16 peers on a ring of contacts, 4 topics, 24 events after a 6 s warm-up, 20 ms links."""
    return {
        "name": f"conformance-{protocol}", "seed": 3, "backend": "sim",
        "protocol": {"name": protocol, "params": CONFORMANCE_PARAMS.get(protocol, {})},
        "nodes": {"count": 16, "peers_per_process": 4, "bootstrap_contacts": 4,
                  "contacts": CONFORMANCE_CONTACTS.get(protocol, "ring")},
        "workload": {"model": "uniform", "topics": 4, "subscriptions": {"min": 2, "max": 2}},
        "publications": {"count": 24, "rate_per_s": 6},
        "network": {"delay": {"model": "constant", "ms": 20}},
        "phases": {"warmup_s": 6, "drain_s": 2},
        **sections,
    }


def reached_sets(rd) -> dict[tuple[int, str], frozenset[int]]:
    """(publisher, sequence number) -> the nodes with a span of that event, from a run directory's
    traces (event ids differ across backends only in their incarnation and tag)."""
    from analysis.crosscheck import read_spans

    out: dict[tuple[int, str], set[int]] = {}
    for s in read_spans(rd / "traces"):
        publisher, _, seq = s["event_id"].split("-")[:3]
        out.setdefault((int(publisher), seq), set()).add(s["node"])
    return {k: frozenset(v) for k, v in out.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def black_hole(port: int) -> list[socket.socket]:
    """A listener on 127.0.0.2:``port`` that never accepts, its one-slot queue filled: a connect
    to it hangs as one to a vanished pod's address does."""
    listener = socket.socket()
    listener.bind(("127.0.0.2", port))
    listener.listen(0)
    held = [listener]
    for _ in range(2):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.2", port))
        held.append(s)
    return held


async def eventually(condition, timeout_s: float = 30.0) -> bool:
    """Whether ``condition()`` became true within ``timeout_s``: a deadline generous enough for a
    machine under load, polled every 50 ms, instead of a fixed wait."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def wait_for_port(port: int, tries: int = 300) -> None:
    for _ in range(tries):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def synthetic_run(rd, spans: int, nodes: int, topics: int, analyse: bool = False):
    """A synthetic run (analysis/synthetic.py) written to ``rd``, analysed here (local Spark) if
    ``analyse``."""
    argvs = [["synthetic", str(rd), "--spans", str(spans), "--nodes", str(nodes), "--topics", str(topics)]]
    for argv in argvs + [["analyze", str(rd)]] * analyse:
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
    return rd


@contextlib.asynccontextmanager
async def running(shells: list[PeerShell], contacts_per_peer: int | None = None):
    """Start the peers, join each to topic a with all the others (or the first
    ``contacts_per_peer`` of them) as contacts, and yield their Control stubs; close the
    channels and stop the peers afterwards."""
    for s in shells:
        await s.start()
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{s.control_port}") for s in shells]
    control = [control_pb2_grpc.ControlStub(ch) for ch in channels]
    try:
        for i, ctl in enumerate(control):
            contacts = [codec.descriptor_to_pb(s.core.me) for j, s in enumerate(shells) if j != i][:contacts_per_peer]
            await ctl.Join(control_pb2.JoinRequest(topics=["a"], contacts=contacts), timeout=5)
        yield control
    finally:
        for ch in channels:
            await ch.close()
        for s in shells:
            await s.stop()


def cli_run(exp: dict, tmp: Path) -> Path:
    """``overlaylab run`` of the experiment ``exp`` (written to ``tmp``); its run directory."""
    path = tmp / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    with pytest.raises(SystemExit) as done:
        main(["run", str(path), "--out", str(tmp / "runs")])
    assert done.value.code == 0
    [rd] = (tmp / "runs").iterdir()
    return rd
