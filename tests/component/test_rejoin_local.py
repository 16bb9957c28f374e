"""The rejoin rule on the local backend: a fresh rejoin starts the node's next life, whose core
draws from a seed of its own (not its first life's) and publishes under new event ids."""

from __future__ import annotations

import asyncio
import json
import random

import grpc
import pytest

from controller.backends.local import LocalRunner
from controller.backends.rundir import RunDir
from controller.experiment.schema import parse_experiment
from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc
from node.kit.rejoin import core_seed
from node.kit.types import Published
from node.protocols.cyclon.layer import CyclonConfig
from node.protocols.gossip.protocol import GossipConfig
from node.transport.shell import PeerShell
from tests.component.test_local_peers import otlp_spans

pytestmark = pytest.mark.component


def first_draws(shell: PeerShell, n: int = 10) -> list[float]:
    copy = random.Random()
    copy.setstate(shell.core.rng.getstate())
    return [copy.random() for _ in range(n)]


async def started_shell(tmp_path, incarnation: int) -> PeerShell:
    shell = PeerShell(4, "gossip", GossipConfig(cyclon=CyclonConfig(view_size=4, shuffle_length=2)), 9, "r",
                      tmp_path / f"traces-{incarnation}",
                      incarnation=incarnation)
    await shell.start()
    return shell


def test_a_peer_s_core_draws_from_its_life_s_own_seed(tmp_path):
    async def main():
        lives = [await started_shell(tmp_path, k) for k in (0, 1, 2)]
        try:
            return [first_draws(s) for s in lives], [s.core.incarnation for s in lives]
        finally:
            await asyncio.gather(*(s.stop() for s in lives))
    drawn, tags = asyncio.run(main())
    first_life = random.Random(core_seed(9, 4, 0))
    assert drawn[0] == [first_life.random() for _ in range(10)]
    assert drawn[1] != drawn[0] and drawn[2] not in (drawn[0], drawn[1])
    assert len(set(tags)) == 3


def words_from(seed: str, rng: random.Random, limit: int = 100_000) -> int | None:
    """How many 32-bit words a generator seeded ``seed`` has drawn to reach ``rng``'s state (every
    draw takes whole words), or None: ``rng`` draws from another seed."""
    ref = random.Random(seed)
    for n in range(limit):
        if ref.getstate() == rng.getstate():
            return n
        ref.getrandbits(32)
    return None


def test_a_peer_told_a_new_life_at_its_join_starts_that_life_over_grpc(tmp_path):
    """A host that came back on its own (a pod the StatefulSet restarts) starts as life 0; the
    controller's Join names the node's life, and the peer's core is that life's from then on."""
    async def main():
        shell = await started_shell(tmp_path, 0)
        first = shell.core
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{shell.control_port}") as channel:
                stub = control_pb2_grpc.ControlStub(channel)
                await stub.Join(control_pb2.JoinRequest(incarnation=3), timeout=10)
                stats = await stub.GetStats(control_pb2.Empty(), timeout=10)
            return first, shell.core, dict(stats.counters)
        finally:
            await shell.stop()
    first, core, counters = asyncio.run(main())
    assert core is not first and counters["life"] == 3
    assert words_from(core_seed(9, 4, 3), core.rng) is not None
    assert words_from(core_seed(9, 4, 0), core.rng, limit=2_000) is None
    assert core.incarnation != first.incarnation  # its event ids' tag


def test_a_fresh_rejoin_on_local_starts_the_node_s_next_life(tmp_path):
    exp = parse_experiment({
        "name": "fresh", "seed": 2, "backend": "local",
        "protocol": {"name": "gossip", "params": {"gamma": 1.0, "cyclon": {"view_size": 5, "shuffle_length": 3}}},
        "nodes": {"count": 8, "peers_per_process": 4, "bootstrap_contacts": 3},
        "workload": {"topics": 2, "subscriptions": {"min": 1, "max": 2}},
        "publications": {"count": 40, "rate_per_s": 4, "publisher": "any"},
        "network": {"delay": {"ms": 5}, "fidelity_links": 0},
        "churn": {"model": "sessions", "fraction": 0.25, "session": {"distribution": "constant", "mean_s": 4},
                  "downtime": {"distribution": "constant", "mean_s": 2}, "leave": "crash", "rejoin": "fresh"},
        "phases": {"warmup_s": 2, "drain_s": 2},
    })
    rd = RunDir.create(exp, tmp_path)
    LocalRunner().run(exp, rd)
    timeline = [json.loads(line) for line in (rd.path / "timeline.jsonl").read_text().splitlines()]
    rejoins: dict[int, int] = {}
    for e in timeline:
        if e["kind"] == "join" and not e.get("initial"):
            rejoins[e["node"]] = rejoins.get(e["node"], 0) + 1
    assert len(rejoins) == 2
    for node, n in rejoins.items():
        # the node's last process (its spare, loaded for the rejoin after the last) starts life n + 1
        cfg = json.loads((rd.path / "peers" / f"node-{node}.json").read_text())
        assert cfg["incarnations"] == {str(node): n + 1} and cfg["rejoin"] == "fresh" and cfg["state_dir"] is None
    published = [s["attrs"]["pubsub.event_id"] for s in otlp_spans(rd.traces) if s["name"] == "publish"]
    assert len(published) == len(set(published))
    for node in rejoins:  # one tag per life that published: never an earlier life's ids
        tags = {e.split("-")[1] for e in published if e.startswith(f"{node}-")}
        assert len(tags) >= 2


def test_a_keep_state_restart_publishes_no_id_twice(tmp_path):
    """``rejoin: keep_state``: the state is saved on timer ticks, so a peer killed after
    publishing comes back with a counter that predates some of its ids; none is used again."""
    async def life() -> tuple[list[str], int]:
        shell = PeerShell(4, "gossip", GossipConfig(), 9, "r", tmp_path / "traces", state_path=tmp_path / "state.pickle")
        await shell.start()
        try:
            shell.checkpoint()  # the last save before the kill
            ids = [next(a.event.event_id for a in shell.core.publish("t", b"p", shell.now) if isinstance(a, Published))
                   for _ in range(3)]
            return ids, shell.stats["restored_state"]
        finally:
            await shell.stop()  # no save: as a kill -9 would leave it
    first, restored_first = asyncio.run(life())
    second, restored_second = asyncio.run(life())
    assert (restored_first, restored_second) == (0, 1)
    assert [e.split("-")[2] for e in second] == ["1", "2", "3"]  # the saved counter, from before the three
    assert len(set(first + second)) == 6
