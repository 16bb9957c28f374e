"""The ``local`` backend: real gRPC peers as OS processes on 127.0.0.1.

Layout: nodes that never churn are grouped ``nodes.peers_per_process`` to a process; every node
the churn plan touches gets a process of its own, so a crash is a real SIGKILL of that peer and a
graceful leave is ``Control.Leave`` (flush traces) then SIGTERM. A rejoin restarts the process on
the same port; with ``churn.rejoin: keep_state`` the peer restores its core from the checkpoint
it writes every gossip tick (so even a crashed peer comes back with its views and
subscriptions), with ``fresh`` it starts empty.

Sequence: wait for every process's READY line; send link rules (the network plan's per-link
delays, jitter, loss, bandwidth and active partitions: emulated at send time by the peers,
because this kernel has no netem); join the initially online peers; then carry out the plan on
the wall clock (publications through ``Control.Publish``, churn, partitions on and off, each
recorded in the timeline as it is done); after the drain, snapshot (the same moment the simulator
snapshots), probe sampled links for the fidelity check, ``Leave`` (flushes traces) and read the
counters. Whatever happens (an error,
Ctrl-C), every process it started is stopped and what was written stays.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

import grpc

from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc, peer_pb2
from node.transport import codec

from loadgen.plan import write_load_plan

from .. import plans
from ..config import Experiment
from ..progress import console, phase
from ..rundir import RunDir, Timeline, run_meta, snapshot_rows
from .base import Runner

READY_TIMEOUT_S = 60.0
RPC_TIMEOUT_S = 30.0
EMPTY = control_pb2.Empty()


class PeerProcessError(RuntimeError):
    pass


ROOT = Path(__file__).resolve().parent.parent.parent
LOCUSTFILE = ROOT / "loadgen" / "locustfile.py"


class LocalRunner(Runner):
    def __init__(self, load_ui: bool = False) -> None:
        self.procs: list[subprocess.Popen] = []
        self.load_ui = load_ui
        """Run Locust with its web UI; the load phase ends at the first Ctrl-C."""

    def run(self, exp: Experiment, rd: RunDir) -> None:
        try:
            asyncio.run(_LocalRun(self, exp, rd).run())
        finally:
            stop_processes(self.procs)


class _LocalRun:
    def __init__(self, runner: LocalRunner, exp: Experiment, rd: RunDir) -> None:
        self.runner = runner
        self.exp = exp
        self.rd = rd
        self.plan = plans.render(exp)
        self.n = exp.nodes.count
        self.addrs: dict[int, str] = {}
        self.ctl: dict[int, control_pb2_grpc.ControlStub] = {}
        self.channels: dict[int, grpc.aio.Channel] = {}
        self.solo: dict[int, subprocess.Popen] = {}
        self.alive: set[int] = set()
        self.partitions: list[frozenset[int]] = []
        self.failures: dict[str, int] = {}
        self.locks: dict[int, asyncio.Lock] = {}
        """One lock per churning node: its joins and departures happen one at a time, in order."""
        self.timeline = Timeline(rd)
        (rd.path / "peers").mkdir(exist_ok=True)
        (rd.path / "logs").mkdir(exist_ok=True)
        self.state_dir = rd.path / "state"
        if exp.churn.rejoin == "keep_state" and self.plan.churn.churning:
            self.state_dir.mkdir(exist_ok=True)

    # --- processes --------------------------------------------------------------------------

    def _spawn(self, name: str, nodes: list[int], ports: dict[int, int] | None = None,
               state: bool = False) -> tuple[subprocess.Popen, Path]:
        exp, rd = self.exp, self.rd
        cfg = {
            "run_id": rd.run_id, "protocol": exp.protocol.name, "params": asdict(exp.protocol.params),
            "seed": exp.seed, "nodes": nodes, "trace_dir": str(rd.traces.resolve()), "host": "127.0.0.1",
            "ports": {str(k): v for k, v in (ports or {}).items()},
            "state_dir": str(self.state_dir.resolve()) if state else None,
        }
        path = rd.path / "peers" / f"{name}.json"
        path.write_text(json.dumps(cfg))
        log_path = rd.path / "logs" / f"{name}.log"
        with open(log_path, "a") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "node", "--config", str(path)],
                stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.runner.procs.append(proc)
        return proc, log_path

    async def _ready(self, proc: subprocess.Popen, log_path: Path) -> dict[int, str]:
        loop = asyncio.get_running_loop()
        line = await asyncio.wait_for(loop.run_in_executor(None, proc.stdout.readline), READY_TIMEOUT_S)
        if not line.startswith("READY "):
            tail = log_path.read_text()[-2000:]
            raise PeerProcessError(f"peer process {proc.pid} exited before it was ready; log {log_path}:\n{tail}")
        return {int(node): f"127.0.0.1:{port}" for node, port in json.loads(line[6:]).items()}

    def _connect(self, node: int, addr: str) -> None:
        self.addrs[node] = addr
        self.channels[node] = grpc.aio.insecure_channel(addr)
        self.ctl[node] = control_pb2_grpc.ControlStub(self.channels[node])

    async def _start_all(self) -> None:
        churning = self.plan.churn.churning
        keep = self.exp.churn.rejoin == "keep_state"
        stable = [i for i in range(self.n) if i not in churning]
        ppp = self.exp.nodes.peers_per_process
        started = [self._spawn(f"group-{k // ppp}", stable[k:k + ppp]) for k in range(0, len(stable), ppp)]
        for node in sorted(churning):
            proc, log = self._spawn(f"node-{node}", [node], state=keep)
            self.solo[node] = proc
            started.append((proc, log))
        console.print(f"local: starting {self.n} peers in {len(started)} processes")
        for addrs in await asyncio.gather(*(self._ready(p, lp) for p, lp in started)):
            for node, addr in addrs.items():
                self._connect(node, addr)

    # --- peers --------------------------------------------------------------------------------

    def _link_rules(self, node: int) -> control_pb2.LinkRules:
        net = self.plan.network
        r = net.rule
        return control_pb2.LinkRules(
            rules=[control_pb2.LinkRule(delay_ms=r.delay_ms, jitter_ms=r.jitter_ms, loss=r.loss)],
            base_delay_ms=net.row(node, self.n) if net.emulated else [],
            partitions=[control_pb2.NodeList(nodes=sorted(p)) for p in self.partitions],
            bandwidth_kbps=net.bandwidth_kbps or 0.0,
        )

    def _descriptor(self, j: int) -> peer_pb2.NodeDescriptor:
        return peer_pb2.NodeDescriptor(node_id=j, addr=self.addrs[j], topics=sorted(self.plan.subscriptions[j]))

    async def _join(self, node: int, contacts: list[int], initial: bool = False) -> None:
        await self.ctl[node].SetLinkRules(self._link_rules(node), timeout=RPC_TIMEOUT_S)
        self.alive.add(node)
        self.timeline.record(time.time_ns(), "join", node, **({"initial": True} if initial else {}))
        await self.ctl[node].Join(control_pb2.JoinRequest(
            contacts=[self._descriptor(j) for j in contacts], topics=sorted(self.plan.subscriptions[node]),
        ), timeout=RPC_TIMEOUT_S)

    def _lock(self, node: int) -> asyncio.Lock:
        return self.locks.setdefault(node, asyncio.Lock())

    async def _rejoin(self, node: int, at_s: float) -> None:
        async with self._lock(node):
            await self._rejoin_locked(node, at_s)

    async def _rejoin_locked(self, node: int, at_s: float) -> None:
        if node in self.alive:
            return
        if self.solo[node].poll() is not None:  # it went down: restart it on the same port
            if self.exp.churn.rejoin == "fresh":
                (self.state_dir / f"node-{node}.pickle").unlink(missing_ok=True)
            await self.channels[node].close()
            port = int(self.addrs[node].rsplit(":", 1)[1])
            proc, log = self._spawn(f"node-{node}", [node], {node: port}, state=self.exp.churn.rejoin == "keep_state")
            self.solo[node] = proc
            self._connect(node, (await self._ready(proc, log))[node])
        await self._join(node, plans.join_contacts(self.exp, node, at_s, self.alive))

    async def _depart(self, node: int, kind: str) -> None:
        async with self._lock(node):
            await self._depart_locked(node, kind)

    async def _depart_locked(self, node: int, kind: str) -> None:
        if node not in self.alive:
            return
        self.alive.discard(node)
        proc = self.solo[node]
        self.timeline.record(time.time_ns(), kind, node)
        if kind == "leave":
            try:
                await self.ctl[node].Leave(EMPTY, timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError:
                self._fail("leave")
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.get_running_loop().run_in_executor(None, proc.wait)

    async def _partition(self, cut: frozenset[int], on: bool) -> None:
        (self.partitions.append if on else self.partitions.remove)(cut)
        self.timeline.record(time.time_ns(), "fault_on" if on else "fault_off", None,
                             fault="partition", nodes=sorted(cut))
        await asyncio.gather(*(self.ctl[i].SetLinkRules(self._link_rules(i), timeout=RPC_TIMEOUT_S)
                               for i in sorted(self.alive)), return_exceptions=True)

    async def _publish(self, k: int, p: plans.Publication) -> None:
        if p.node not in self.alive:
            self._fail("publish_to_dead_peer")
            return
        try:
            await self.ctl[p.node].Publish(control_pb2.PublishRequest(topic=p.topic, payload=plans.payload(self.exp, k)),
                                           timeout=RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError:
            self._fail("publish")

    def _fail(self, what: str) -> None:
        self.failures[what] = self.failures.get(what, 0) + 1

    # --- the run ------------------------------------------------------------------------------

    def _schedule(self) -> list[tuple[float, int, object]]:
        """(run time, order, coroutine factory) of every planned action."""
        items: list[tuple[float, int, object]] = []
        for e in self.plan.churn.events:
            fn = (lambda e=e: self._rejoin(e.node, e.at_s)) if e.kind == "join" else (lambda e=e: self._depart(e.node, e.kind))
            items.append((e.at_s, len(items), fn))
        for w in self.plan.network.partitions:
            items.append((w.start_s, len(items), lambda w=w: self._partition(w.nodes, True)))
            items.append((w.end_s, len(items), lambda w=w: self._partition(w.nodes, False)))
        if self.exp.publications.driver == "locust":
            items.append((self.exp.phases.warmup_s, len(items), self._locust))
        else:
            for k, p in enumerate(self.plan.publications):
                items.append((p.at_s, len(items), lambda k=k, p=p: self._publish(k, p)))
        return sorted(items, key=lambda x: (x[0], x[1]))

    async def _locust(self) -> None:
        """The load phase: Locust publishes at the planned rate for count / rate seconds (or, with
        the web UI, until the first Ctrl-C); its CSV statistics and HTML report go to locust/."""
        p, rd = self.exp.publications, self.rd
        out = rd.path / "locust"
        out.mkdir(exist_ok=True)
        write_load_plan(out / "plan.json", addrs=self.addrs, subscriptions=self.plan.subscriptions,
                        topic_choice=p.topic_choice, payload_bytes=p.payload_bytes, seed=self.exp.seed)
        users = p.locust_users
        duration = p.count / p.rate_per_s
        cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "-u", str(users), "-r", str(users),
               "--csv", str(out / "stats"), "--csv-full-history", "--html", str(out / "report.html"),
               "--stop-timeout", "2", "--exit-code-on-error", "0", "--loglevel", "WARNING"]
        if self.runner.load_ui:
            cmd += ["--web-host", "127.0.0.1", "--web-port", "8089", "--autostart", "--autoquit", "1"]
        else:
            cmd += ["--headless", "--only-summary", "-t", f"{max(1, round(duration))}s"]
        env = {**os.environ, "OVERLAYLAB_LOAD_PLAN": str(out / "plan.json"),
               "OVERLAYLAB_RATE_PER_USER": str(p.rate_per_s / users), "PYTHONPATH": str(ROOT)}
        with open(out / "locust.log", "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.runner.procs.append(proc)
        self.timeline.record(time.time_ns(), "load_start", None, driver="locust", users=users, rate_per_s=p.rate_per_s)
        loop = asyncio.get_running_loop()
        if self.runner.load_ui:
            stop = asyncio.Event()
            loop.add_signal_handler(signal.SIGINT, stop.set)
            console.print("Locust web UI: http://127.0.0.1:8089 (the load is running; Ctrl-C ends the load phase)")
            await stop.wait()
            loop.remove_signal_handler(signal.SIGINT)
            try:  # stop the swarm, keep the web UI's HTML report; --autoquit then exits Locust
                report = await loop.run_in_executor(None, lambda: _http("http://127.0.0.1:8089/stats/report"))
                (out / "report.html").write_bytes(report)
                await loop.run_in_executor(None, lambda: _http("http://127.0.0.1:8089/stop", post=True))
                await asyncio.wait_for(loop.run_in_executor(None, proc.wait), 30)
            except (OSError, asyncio.TimeoutError):
                os.killpg(proc.pid, signal.SIGTERM)
        await loop.run_in_executor(None, proc.wait)
        self.timeline.record(time.time_ns(), "load_end", None, exit_code=proc.returncode)

    async def run(self) -> None:
        exp, rd, plan = self.exp, self.rd, self.plan
        rd.write_jsonl("subscriptions.jsonl", ({"node": i, "topics": sorted(t)} for i, t in enumerate(plan.subscriptions)))
        try:
            await self._start_all()
            loop = asyncio.get_running_loop()
            started_ns = time.time_ns()
            t0 = loop.time()
            await asyncio.gather(*(self._join(i, plans.initial_contacts(plan, i), initial=True)
                                   for i in range(self.n) if i not in plan.churn.offline_at_start))
            tasks = []
            load_end = plan.end_s - exp.phases.drain_s
            with phase(f"local: {self.n} peers, {plan.end_s:.0f} s (warm-up {exp.phases.warmup_s:g} s)", plan.end_s) as advance:
                for at, _, fn in self._schedule():
                    while (now := loop.time() - t0) < at:
                        advance(now)
                        await asyncio.sleep(min(0.5, at - now))
                    tasks.append(asyncio.ensure_future(fn()))
                while (now := loop.time() - t0) < load_end:
                    advance(now)
                    await asyncio.sleep(min(0.5, load_end - now))
                for r in await asyncio.gather(*tasks, return_exceptions=True):
                    if isinstance(r, Exception):
                        self._fail(type(r).__name__)
                drain_end = loop.time() + exp.phases.drain_s
                while (left := drain_end - loop.time()) > 0:
                    advance(plan.end_s - left)
                    await asyncio.sleep(min(0.5, left))
                advance(plan.end_s)
            ended_ns = time.time_ns()
            measure_start_ns = started_ns + round(exp.phases.warmup_s * 1e9)
            alive = sorted(self.alive)
            snaps = await asyncio.gather(*(self.ctl[i].GetSnapshot(EMPTY, timeout=RPC_TIMEOUT_S) for i in alive))
            fidelity = await self._fidelity()
            await asyncio.gather(*(self.ctl[i].Leave(EMPTY, timeout=RPC_TIMEOUT_S) for i in alive))
            stats = await asyncio.gather(*(self.ctl[i].GetStats(EMPTY, timeout=RPC_TIMEOUT_S) for i in alive))
            counters_ns = time.time_ns()
            for i in alive:
                self.timeline.record(time.time_ns(), "leave", i, end_of_run=True)
        finally:
            self.timeline.close()
            for c in self.channels.values():
                await c.close()
        if self.failures:
            console.print(f"[yellow]failed actions: {self.failures}[/]")
        rd.write_jsonl("snapshots.jsonl", (row for s in snaps for row in snapshot_rows(codec.snapshot_from_pb(s), ended_ns)))
        rd.write_jsonl("stats.jsonl", ({"node": s.node_id, "counters": dict(s.counters)} for s in stats))
        if fidelity:
            rd.write_json("fidelity.json", fidelity)
        rd.write_json("run.json", run_meta(
            exp, rd, started_ns=started_ns, measure_start_ns=measure_start_ns, ended_ns=ended_ns,
            counters_ns=counters_ns, skipped_publications=plan.skipped_publications, failed_actions=self.failures,
        ))

    async def _fidelity(self) -> dict | None:
        """Probe sampled links and compare delay, jitter and loss with the plan."""
        net, k = self.plan.network, self.exp.network.fidelity_links
        alive = sorted(self.alive)
        if not net.emulated or k == 0 or len(alive) < 2:
            return None
        rng = random.Random(f"{self.exp.seed}:fidelity")
        links = set()
        while len(links) < min(k, len(alive) * (len(alive) - 1)):
            src, dst = rng.sample(alive, 2)
            links.add((src, dst))
        links = sorted(links)
        count = self.exp.network.fidelity_probes
        interval = self.exp.network.fidelity_interval_ms
        with phase(f"fidelity: {len(links)} links x {count} probes", 1) as advance:
            reports = await asyncio.gather(*(
                self.ctl[s].ProbeLink(control_pb2.ProbeRequest(node_id=d, addr=self.addrs[d], count=count, interval_ms=interval),
                                      timeout=RPC_TIMEOUT_S + count * interval / 1000)
                for s, d in links))
            advance(1)
        return fidelity_summary(net, links, reports)


def _http(url: str, post: bool = False) -> bytes:
    with urllib.request.urlopen(url, data=b"" if post else None, timeout=10) as response:
        return response.read()


def fidelity_summary(net, links, reports) -> dict:
    """Measured against planned: mean one-way delay, jitter (stddev around each link's planned
    delay; uniform jitter j has stddev j/sqrt(3)) and loss, pooled over the probed links."""
    planned, measured, residuals, per_link = [], [], [], []
    sent = received = 0
    for (src, dst), rep in zip(links, reports):
        base = net.base_delay(src, dst) + net.rule.delay_ms
        sent += rep.sent
        received += len(rep.delays_ms)
        planned += [base] * len(rep.delays_ms)
        measured += list(rep.delays_ms)
        residuals += [d - base for d in rep.delays_ms]
        per_link.append({"src": src, "dst": dst, "planned_ms": base, "sent": rep.sent, "received": len(rep.delays_ms),
                         "measured_mean_ms": statistics.fmean(rep.delays_ms) if rep.delays_ms else None})
    planned_mean = statistics.fmean(planned) if planned else None
    measured_mean = statistics.fmean(measured) if measured else None
    loss = 1 - received / sent if sent else None
    return {
        "links": len(links), "probes_sent": sent, "probes_received": received,
        "delay_ms": {"planned_mean": planned_mean, "measured_mean": measured_mean,
                     "error_pct": 100 * (measured_mean - planned_mean) / planned_mean
                     if planned_mean and measured_mean is not None else None},
        "jitter_ms": {"planned_stddev": net.rule.jitter_ms / math.sqrt(3),
                      "measured_stddev": statistics.pstdev(residuals) if len(residuals) > 1 else None},
        "loss": {"planned": net.rule.loss, "measured": loss,
                 "error_pp": 100 * (loss - net.rule.loss) if loss is not None else None},
        "per_link": per_link,
    }


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
