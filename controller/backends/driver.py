"""Carrying out a rendered plan over the peers' Control API, wherever the peers run.

``Driver`` is the part of a run that does not care how peers are hosted: link rules (the
network plan's per-link delays, jitter, loss, bandwidth and active partitions, emulated at send
time by the peers), the initial joins, then the plan on the wall clock (publications through
``Control.Publish`` or a load phase, churn, partitions on and off, each recorded in the timeline
as it is done); after the drain, snapshots (the same moment the simulator snapshots), the
fidelity probes, ``Leave`` (flushes traces) and the counters, then ``run.json``.

A subclass hosts the peers: ``start_peers`` (connect every node), ``take_down`` (a crash or the
end of a graceful leave), ``bring_back`` (before a rejoin) and ``load_phase`` (Locust). The
``local`` backend hosts them as OS processes (``local.py``), the ``k8s`` backend's in-cluster
controller as pods (``cluster.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import statistics
import time
import urllib.request
from abc import ABC, abstractmethod

import grpc

from controller.backends.rundir import RunDir, Snapshots, Timeline, run_meta, snapshot_table, write_stats
from controller.cli.progress import console, phase
from controller.experiment import plans
from controller.experiment.schema import Experiment
from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc, peer_pb2
from node.transport.security import Credentials, aio_channel
from node.wire import codec

RPC_TIMEOUT_S = 30.0
WATCH_S = 0.5
LOAD_EVERY_S = 1.0
"""How often the controller reads each host process's load counters."""
LOAD_TIMEOUT_S = 1.0
"""How often the hosts are checked for peers that died unplanned."""
EMPTY = control_pb2.Empty()


class Driver(ABC):
    def __init__(self, exp: Experiment, rd: RunDir) -> None:
        self.exp = exp
        self.rd = rd
        self.plan = plans.render(exp)
        self.n = exp.nodes.count
        self.addrs: dict[int, str] = {}
        """Each node's Peer service address (what other peers dial)."""
        self.control_addrs: dict[int, str] = {}
        """Each node's Control service address (the controller's and Locust's only)."""
        self.credentials: Credentials | None = None
        """The controller's certificate when the run uses mutual TLS (set by the host)."""
        self.caller_token: str | None = None
        """The run's caller token, which every call of the controller carries (set by the host
        that gives it to the peers: node/transport/security.py CALLER_TOKEN_ENV)."""
        self.ctl: dict[int, control_pb2_grpc.ControlStub] = {}
        self.channels: dict[int, grpc.aio.Channel] = {}
        self.alive: set[int] = set()
        self.lives: dict[int, int] = {}
        """Each node's current life (absent: its first, 0), counted by its rejoins: what ``Join``
        tells the peer (the rejoin rule, node/kit/rejoin.py)."""
        self.partitions: list[frozenset[int]] = []
        self.failures: dict[str, int] = {}
        self.locks: dict[int, asyncio.Lock] = {}
        """One lock per churning node: its joins and departures happen one at a time, in order."""
        self.timeline = Timeline(rd)
        self.t0 = 0.0
        """Event-loop time of the run's start (plan times are seconds after it)."""

    # --- hosting (the subclass's part) --------------------------------------------------------

    @abstractmethod
    async def start_peers(self) -> None:
        """Start (or find) every peer and ``_connect`` each node to its address."""

    @abstractmethod
    async def take_down(self, node: int, graceful: bool) -> None:
        """Stop the node's host: after ``Leave`` when graceful, a crash otherwise."""

    @abstractmethod
    async def bring_back(self, node: int) -> None:
        """Before a rejoin: make sure the node's host runs again (and ``_connect`` it anew)."""

    async def load_phase(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no load phase (publications.driver: locust)")

    def _connect(self, node: int, addr: str, control_addr: str) -> None:
        self.addrs[node], self.control_addrs[node] = addr, control_addr
        self.channels[node] = aio_channel(control_addr, self.credentials, caller_token=self.caller_token)
        self.ctl[node] = control_pb2_grpc.ControlStub(self.channels[node])

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

    def _descriptor(self, node: int, j: int) -> peer_pb2.NodeDescriptor:
        """Contact ``j`` as handed to ``node``."""
        return peer_pb2.NodeDescriptor(node_id=j, addr=self.addrs[j], topics=sorted(plans.contact_topics(self.plan, node, j)))

    async def _join(self, node: int, contacts: list[int], initial: bool = False) -> None:
        await self.ctl[node].SetLinkRules(self._link_rules(node), timeout=RPC_TIMEOUT_S)
        self.alive.add(node)
        self.timeline.record(time.time_ns(), "join", node, **({"initial": True} if initial else {}))
        await self.ctl[node].Join(control_pb2.JoinRequest(
            contacts=[self._descriptor(node, j) for j in contacts], topics=sorted(self.plan.subscriptions[node]),
            incarnation=self.lives.get(node, 0),
        ), timeout=RPC_TIMEOUT_S)

    def _lock(self, node: int) -> asyncio.Lock:
        return self.locks.setdefault(node, asyncio.Lock())

    async def _rejoin(self, node: int, at_s: float) -> None:
        async with self._lock(node):
            await self._rejoin_locked(node, at_s)

    async def _rejoin_locked(self, node: int, at_s: float) -> None:
        if node in self.alive:
            return
        self.lives[node] = self.lives.get(node, 0) + 1
        await self.bring_back(node)
        await self._join(node, plans.join_contacts(self.exp, self.plan, node, at_s, self.alive))

    async def _depart(self, node: int, kind: str) -> None:
        async with self._lock(node):
            await self._depart_locked(node, kind)

    async def _depart_locked(self, node: int, kind: str) -> None:
        if node not in self.alive:
            return
        self.alive.discard(node)
        self.timeline.record(time.time_ns(), kind, node)
        if kind == "leave":
            try:
                await self.ctl[node].Leave(EMPTY, timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError:
                self._fail("leave")
        await self.take_down(node, graceful=kind == "leave")

    async def _partition(self, cut: frozenset[int], on: bool) -> None:
        (self.partitions.append if on else self.partitions.remove)(cut)
        self.timeline.record(time.time_ns(), "fault_on" if on else "fault_off", None,
                             fault="partition", nodes=sorted(cut))
        await self.apply_partition(cut, on)

    async def apply_partition(self, cut: frozenset[int], on: bool) -> None:
        """Put the cut in place or lift it: by default the peers' link emulation does it."""
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

    def steps(self) -> list[plans.Step]:
        """The plan's schedule (``plans.schedule``, which the simulator carries out too)."""
        return plans.schedule(self.exp, self.plan)

    def _step(self, step: plans.Step):
        """The coroutine that carries out one step of the plan's schedule."""
        if step.kind == "join":
            return self._rejoin(step.node, step.at_s)
        if step.kind in ("leave", "crash"):
            return self._depart(step.node, step.kind)
        if step.kind in ("partition_on", "partition_off"):
            return self._partition(step.nodes, step.kind == "partition_on")
        if step.kind == "load":
            return self.load_phase()
        return self._publish(step.index, step.publication)

    async def run(self) -> None:
        """Carry out the plan. ``run.json`` is written once the peers are up (status
        ``running``) and again however the run ends: ``complete``, ``interrupted`` (Ctrl-C) or
        ``failed``; a run whose controller was killed keeps ``running``. Each is analysable."""
        exp, rd, plan = self.exp, self.rd, self.plan
        rd.write_jsonl("subscriptions.jsonl", ({"node": i, "topics": sorted(t)} for i, t in enumerate(plan.subscriptions)))
        meta: dict = {}
        watcher = snapshotter = load_watcher = prober = None
        snapshots = Snapshots(rd)
        try:
            await self.start_peers()
            loop = asyncio.get_running_loop()
            started_ns = time.time_ns()
            t0 = self.t0 = loop.time()
            meta = dict(status="running", started_ns=started_ns,
                        measure_start_ns=started_ns + round(exp.phases.warmup_s * 1e9),
                        planned_end_ns=started_ns + round(plan.end_s * 1e9),
                        load_end_ns=started_ns + round((plan.end_s - exp.phases.drain_s) * 1e9),
                        events_planned=len(plan.publications) + plan.skipped_publications,
                        skipped_publications=plan.skipped_publications, **plans.manifest(plan))
            rd.write_json("run.json", run_meta(exp, rd, **meta))
            watcher = asyncio.ensure_future(self._watch_hosts())
            load_watcher = asyncio.ensure_future(self._watch_load())
            if exp.network.fidelity_every_s:
                prober = asyncio.ensure_future(self._probe_during_run())
            if exp.outputs.snapshot_every_s:
                snapshotter = asyncio.ensure_future(self._snapshot_every(exp.outputs.snapshot_every_s, plan.end_s, snapshots))
            await asyncio.gather(*(self._join(i, plans.initial_contacts(plan, i), initial=True)
                                   for i in range(self.n) if i not in plan.churn.offline_at_start))
            tasks = []
            load_end = plan.end_s - exp.phases.drain_s
            with phase(f"local: {self.n} peers, {plan.end_s:.0f} s (warm-up {exp.phases.warmup_s:g} s)", plan.end_s) as advance:
                for step in self.steps():
                    while (now := loop.time() - t0) < step.at_s:
                        advance(now)
                        await asyncio.sleep(min(0.5, step.at_s - now))
                    tasks.append(asyncio.ensure_future(self._step(step)))
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
            for task in (snapshotter, load_watcher, prober):
                if task is not None:
                    task.cancel()
            meta["ended_ns"] = time.time_ns()
            fidelity = await self._fidelity()
            # The final views next to the final counters: nothing changes a view after Leave,
            # while the probes above take seconds in which the overlay goes on.
            snaps = await self._each_alive("GetSnapshot")
            await self._each_alive("Leave")
            stats = await self._each_alive("GetStats")
            meta["counters_ns"] = time.time_ns()
            for i, s in sorted(stats.items()):  # Control calls that came from outside the run
                calls = {k.removeprefix("unplanned."): v for k, v in s.counters.items() if k.startswith("unplanned.")}
                if calls:
                    self.timeline.record(time.time_ns(), "unplanned_control", i, calls=calls)
            for i in sorted(self.alive):
                self.timeline.record(time.time_ns(), "leave", i, end_of_run=True)
            snapshots.write(snapshot_table((codec.snapshot_from_pb(s) for s in snaps.values()), meta["ended_ns"]))
            write_stats(rd, ((s.node_id, dict(s.counters)) for s in stats.values()))
            if fidelity:
                rd.write_json("fidelity.json", fidelity)
            meta["status"] = "complete"
        except BaseException as e:
            if meta:
                meta.setdefault("ended_ns", time.time_ns())
                if isinstance(e, (KeyboardInterrupt, asyncio.CancelledError)):
                    meta["status"] = "interrupted"
                else:
                    meta.update(status="failed", error=f"{type(e).__name__}: {e}")
            raise
        finally:
            for task in (watcher, snapshotter, load_watcher, prober):
                if task is not None:
                    task.cancel()
            self.timeline.close()
            for c in self.channels.values():
                await c.close()
            if self.failures:
                console.print(f"[yellow]failed actions: {self.failures}[/]")
            if meta:
                rd.write_json("run.json", run_meta(exp, rd, **meta, failed_actions=self.failures))

    async def _snapshot_every(self, every: float, end_s: float, out: Snapshots) -> None:
        """``outputs.snapshot_every_s``: every live node's links at each multiple of ``every``
        seconds into the run, before its end (a node that does not answer is left out)."""
        loop = asyncio.get_running_loop()
        for k in range(1, math.ceil(end_s / every)):
            await asyncio.sleep(max(0.0, self.t0 + k * every - loop.time()))
            at, alive = time.time_ns(), sorted(self.alive)
            replies = await asyncio.gather(*(self.ctl[i].GetSnapshot(EMPTY, timeout=RPC_TIMEOUT_S) for i in alive),
                                           return_exceptions=True)
            out.write(snapshot_table((codec.snapshot_from_pb(r) for r in replies if not isinstance(r, BaseException)), at))

    async def _each_alive(self, method: str) -> dict:
        """``method`` on every live node, concurrently; a node that does not answer is left out
        of the reply, and recorded as unresponsive if its host still runs (busy is not dead),
        else as an unplanned crash."""
        alive = sorted(self.alive)
        replies = await asyncio.gather(*(getattr(self.ctl[i], method)(EMPTY, timeout=RPC_TIMEOUT_S) for i in alive),
                                       return_exceptions=True)
        out = {}
        for i, r in zip(alive, replies):
            if isinstance(r, grpc.aio.AioRpcError):
                self._fail(method)
                why = f"{method}: {r.code().name}"
                if await self.host_running(i):
                    self.timeline.record(time.time_ns(), "unresponsive", i, why=why)
                else:
                    self._crashed(i, why)
            elif isinstance(r, BaseException):
                raise r
            else:
                out[i] = r
        return out

    def _crashed(self, node: int, why: str) -> None:
        """Record a crash nobody planned (a peer killed from outside, or one that died): the node
        is out of the run from now on, unless the plan rejoins it."""
        if node in self.alive:
            self.alive.discard(node)
            self.timeline.record(time.time_ns(), "crash", node, unplanned=True, why=why)
            console.print(f"[yellow]node {node} crashed ({why}); the run carries on[/]")

    async def hosts_gone(self) -> dict[int, str]:
        """Nodes whose host is gone though the plan did not take it down: node -> why. The
        default knows of none (a host may override it)."""
        return {}

    def host_groups(self) -> list[list[int]]:
        """The live nodes grouped by the process that hosts them (whose event loop they share).
        The default knows of none: no load is watched."""
        return []

    async def _watch_load(self) -> None:
        """Every ``LOAD_EVERY_S``, each host process's load counters (node/transport/loopwatch.py),
        read from its first live node, as a ``host`` line of the timeline (``answered: false``
        when it did not answer within ``LOAD_TIMEOUT_S``): what fidelity.verdict is made of."""
        while True:
            await asyncio.sleep(LOAD_EVERY_S)
            firsts = [group[0] for group in self.host_groups() if group]
            replies = await asyncio.gather(*(self.ctl[i].GetStats(EMPTY, timeout=LOAD_TIMEOUT_S) for i in firsts),
                                           return_exceptions=True)
            at = time.time_ns()
            for i, r in zip(firsts, replies):
                if isinstance(r, BaseException):
                    self.timeline.record(at, "host", i, answered=False)
                else:
                    self.timeline.record(at, "host", i, answered=True,
                                         **{k.removeprefix("host."): v for k, v in r.counters.items() if k.startswith("host.")})

    async def host_running(self, node: int) -> bool:
        """Whether ``node``'s host (its process, its pod) is known to run still: a node that does
        not answer then is busy, not dead. The default cannot tell (False: a crash)."""
        return False

    async def _watch_hosts(self) -> None:
        while True:
            await asyncio.sleep(WATCH_S)
            for node, why in (await self.hosts_gone()).items():
                self._crashed(node, why)

    def _probe_links(self, salt: str) -> list[tuple[int, int]]:
        """Up to ``network.fidelity_links`` distinct (src, dst) pairs of live nodes, drawn from
        the run's seed and ``salt``; none when the plan emulates no links."""
        k, alive = self.exp.network.fidelity_links, sorted(self.alive)
        if not self.plan.network.emulated or k == 0 or len(alive) < 2:
            return []
        rng = random.Random(f"{self.exp.seed}:fidelity{salt}")
        links = set()
        while len(links) < min(k, len(alive) * (len(alive) - 1)):
            src, dst = rng.sample(alive, 2)
            links.add((src, dst))
        return sorted(links)

    async def _probe(self, links: list[tuple[int, int]], count: int) -> list:
        """``ProbeLink`` on each link at once: its report, or the RPC error when it did not answer."""
        interval = self.exp.network.fidelity_interval_ms
        return await asyncio.gather(*(
            self.ctl[s].ProbeLink(control_pb2.ProbeRequest(node_id=d, addr=self.addrs[d], count=count, interval_ms=interval),
                                  timeout=RPC_TIMEOUT_S + count * interval / 1000)
            for s, d in links), return_exceptions=True)

    async def _probe_during_run(self) -> None:
        """``network.fidelity_every_s``: a round of probes on freshly drawn links, one ``probe``
        line per link in the timeline (``round``, ``sent``, ``dropped`` by plan, ``received``,
        and the sums of measured and planned delays of those that arrived). A link whose
        prober did not answer counts its probes as sent and none received: the host lost them."""
        every, count = self.exp.network.fidelity_every_s, self.exp.network.fidelity_round_probes
        loop = asyncio.get_running_loop()
        for k in itertools.count(1):
            await asyncio.sleep(max(0.0, self.t0 + k * every - loop.time()))
            links = self._probe_links(f":{k}")
            at = time.time_ns()
            for (src, dst), r in zip(links, await self._probe(links, count)):
                if isinstance(r, grpc.aio.AioRpcError):
                    r = control_pb2.ProbeReport(sent=count)
                elif isinstance(r, BaseException):
                    raise r
                self.timeline.record(at, "probe", src, dst=dst, round=k, sent=r.sent, dropped=r.dropped,
                                     received=len(r.delays_ms), measured_ms_sum=sum(r.delays_ms),
                                     planned_ms_sum=sum(r.planned_ms))

    async def _fidelity(self) -> dict | None:
        """Probe sampled links and compare delay, jitter and loss with the plan."""
        links = self._probe_links("")
        if not links:
            return None
        count = self.exp.network.fidelity_probes
        with phase(f"fidelity: {len(links)} links x {count} probes", 1) as advance:
            reports = await self._probe(links, count)
            advance(1)
        answered = [(link, r) for link, r in zip(links, reports) if not isinstance(r, grpc.aio.AioRpcError)]
        if len(answered) < len(links):
            self._fail("probe_link")
        links, reports = [a for a, _ in answered], [r for _, r in answered]
        return fidelity_summary(self.plan.network, links, reports)



def http_request(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> bytes:
    """One request to a web API (Locust's); ``data`` makes it a POST."""
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers or {}), timeout=30) as response:
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
