"""The ``local`` backend: real gRPC peers as OS processes on 127.0.0.1.

Peers are grouped ``nodes.peers_per_process`` to a process (``python -m node``), each with its
own gRPC server on an ephemeral port. The controller waits for every process's READY line, sets
the link rules (delay, jitter, loss: emulated at send time by the peers), joins every peer with
its bootstrap contacts and subscriptions, waits out the warm-up, publishes on schedule through
the control API, drains, then collects snapshots, flushes traces (``Leave``) and collects
counters. Whatever happens (an error, Ctrl-C), every process it started is stopped and what was
written stays.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import grpc

from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc, peer_pb2
from node.transport import codec

from .. import plans
from ..config import Experiment
from ..progress import console, phase
from ..rundir import RunDir, Timeline, run_meta, snapshot_rows
from .base import Runner

READY_TIMEOUT_S = 60.0
RPC_TIMEOUT_S = 30.0


class PeerProcessError(RuntimeError):
    pass


class LocalRunner(Runner):
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def run(self, exp: Experiment, rd: RunDir) -> None:
        try:
            asyncio.run(self._run(exp, rd))
        finally:
            stop_processes(self.procs)

    # --- processes --------------------------------------------------------------------------

    def _spawn(self, exp: Experiment, rd: RunDir) -> list[tuple[subprocess.Popen, Path]]:
        (rd.path / "peers").mkdir(exist_ok=True)
        (rd.path / "logs").mkdir(exist_ok=True)
        ids = list(range(exp.nodes.count))
        ppp = exp.nodes.peers_per_process
        started = []
        for k in range(0, len(ids), ppp):
            cfg = {
                "run_id": rd.run_id, "protocol": exp.protocol.name, "params": asdict(exp.protocol.params),
                "seed": exp.seed, "nodes": ids[k:k + ppp], "trace_dir": str(rd.traces.resolve()), "host": "127.0.0.1",
            }
            path = rd.path / "peers" / f"proc-{k // ppp}.json"
            path.write_text(json.dumps(cfg))
            log_path = rd.path / "logs" / f"proc-{k // ppp}.log"
            with open(log_path, "w") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "node", "--config", str(path)],
                    stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
            self.procs.append(proc)
            started.append((proc, log_path))
        return started

    async def _await_ready(self, started) -> dict[int, str]:
        loop = asyncio.get_running_loop()
        addrs: dict[int, str] = {}

        async def one(proc: subprocess.Popen, log_path: Path) -> None:
            line = await asyncio.wait_for(loop.run_in_executor(None, proc.stdout.readline), READY_TIMEOUT_S)
            if not line.startswith("READY "):
                tail = log_path.read_text()[-2000:]
                raise PeerProcessError(f"peer process {proc.pid} exited before it was ready; log {log_path}:\n{tail}")
            for node, port in json.loads(line[6:]).items():
                addrs[int(node)] = f"127.0.0.1:{port}"

        await asyncio.gather(*(one(p, lp) for p, lp in started))
        return addrs

    # --- the experiment ---------------------------------------------------------------------

    async def _run(self, exp: Experiment, rd: RunDir) -> None:
        subs = plans.subscriptions(exp)
        contacts = plans.bootstrap_contacts(exp)
        pubs = plans.publications(exp, subs)
        rd.write_jsonl("subscriptions.jsonl", ({"node": i, "topics": sorted(t)} for i, t in enumerate(subs)))
        n = exp.nodes.count
        console.print(f"local: starting {n} peers in {-(-n // exp.nodes.peers_per_process)} processes")
        addrs = await self._await_ready(self._spawn(exp, rd))
        channels = {i: grpc.aio.insecure_channel(a) for i, a in addrs.items()}
        ctl = {i: control_pb2_grpc.ControlStub(c) for i, c in channels.items()}
        timeline = Timeline(rd)
        started_ns = time.time_ns()
        try:
            rules = control_pb2.LinkRules(rules=[
                control_pb2.LinkRule(nodes=sorted(r.nodes), delay_ms=r.delay_ms, jitter_ms=r.jitter_ms,
                                     loss=r.loss, partitioned=r.partitioned)
                for r in plans.link_rules(exp)
            ])
            await _all(ctl[i].SetLinkRules(rules, timeout=RPC_TIMEOUT_S) for i in ctl)

            def descriptor(j: int) -> peer_pb2.NodeDescriptor:
                return peer_pb2.NodeDescriptor(node_id=j, addr=addrs[j], topics=sorted(subs[j]))

            for i in range(n):
                timeline.record(time.time_ns(), "join", i)
            await _all(
                ctl[i].Join(control_pb2.JoinRequest(contacts=[descriptor(j) for j in contacts[i]], topics=sorted(subs[i])),
                            timeout=RPC_TIMEOUT_S)
                for i in range(n)
            )
            await _wait("warm-up", exp.phases.warmup_s)
            measure_start_ns = time.time_ns()
            await self._publish(exp, ctl, pubs)
            await _wait("drain", exp.phases.drain_s)
            ended_ns = time.time_ns()
            snaps = await _all(ctl[i].GetSnapshot(control_pb2.Empty(), timeout=RPC_TIMEOUT_S) for i in range(n))
            await _all(ctl[i].Leave(control_pb2.Empty(), timeout=RPC_TIMEOUT_S) for i in range(n))
            stats = await _all(ctl[i].GetStats(control_pb2.Empty(), timeout=RPC_TIMEOUT_S) for i in range(n))
            for i in range(n):
                timeline.record(time.time_ns(), "leave", i)
        finally:
            timeline.close()
            for c in channels.values():
                await c.close()
        rd.write_jsonl("snapshots.jsonl", (row for s in snaps for row in snapshot_rows(codec.snapshot_from_pb(s))))
        rd.write_jsonl("stats.jsonl", ({"node": s.node_id, "counters": dict(s.counters)} for s in stats))
        rd.write_json("run.json", run_meta(
            exp, rd, started_ns=started_ns, measure_start_ns=measure_start_ns, ended_ns=ended_ns,
        ))

    async def _publish(self, exp: Experiment, ctl, pubs) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        tasks = []
        failures = 0
        with phase(f"publish: {len(pubs)} events at {exp.publications.rate_per_s:g}/s", len(pubs)) as advance:
            for k, p in enumerate(pubs):
                await asyncio.sleep(max(0.0, t0 + p.at_s - loop.time()))
                req = control_pb2.PublishRequest(topic=p.topic, payload=plans.payload(exp, k))
                tasks.append(asyncio.ensure_future(ctl[p.node].Publish(req, timeout=RPC_TIMEOUT_S)))
                advance(k + 1)
            for r in await asyncio.gather(*tasks, return_exceptions=True):
                failures += isinstance(r, Exception)
        if failures:
            console.print(f"[yellow]{failures} of {len(pubs)} publish calls failed[/]")


async def _all(calls):
    return await asyncio.gather(*calls)


async def _wait(name: str, seconds: float) -> None:
    if seconds <= 0:
        return
    with phase(f"{name}: {seconds:g} s", seconds) as advance:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while (done := loop.time() - t0) < seconds:
            advance(done)
            await asyncio.sleep(min(0.5, seconds - done))
        advance(seconds)


def stop_processes(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM every peer process (they flush traces), then SIGKILL what is left."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if p.stdout:
            p.stdout.close()
