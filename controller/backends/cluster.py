"""The controller that runs beside peers it did not start: in the k8s backend's controller Job,
or in a container on a docker network.

``overlaylab drive FILE --run-id ID`` finds every node at its address in the pod layout
(``controller/backends/hosting.py``), waits until each answers (and, in the cluster, until the run's
Collector takes connections), and carries out the plan with ``Driver``
into ``<out>/<run-id>``. Churn deletes pods through the Kubernetes API (a crash: grace period 0;
a leave: ``Control.Leave``, then a normal delete); the StatefulSet recreates the pod at once,
and its peers refuse peer traffic until the controller joins them again at the planned time.
With ``k8s.network_faults: chaos_mesh`` the peers emulate nothing: the chart's NetworkChaos
objects delay and drop packets in the kernel, and each partition, rendered paused, is resumed
at its start and deleted at its end. With ``k8s.churn_faults: chaos_mesh`` the chart's PodChaos
Schedule kills churner pods instead of the controller: the controller resumes it when the
measurement starts, stops it when the load ends, and meanwhile reads the kills Chaos Mesh
reports in the status of the PodChaos objects the Schedule creates: each is recorded (a
``pod_kill``, and a ``crash`` of a node that was up, within ``POLL_S``) and its node joined again
once its pod is back and its peer answers. When the load ends the Schedule is paused first and
deleted once its last kills are recorded.
The load phase drives the Locust master of the chart through Locust's web API (``/swarm``,
``/stop``) and keeps its CSV statistics and HTML report. Without Kubernetes (``--no-kube``) the
plan must have no churn.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse

import grpc

from controller.backends.driver import EMPTY, Driver, http_request
from controller.backends.hosting import pod_layout
from controller.backends.results import TOKEN_HEADER, web_token
from controller.backends.rundir import RunDir
from controller.cli.progress import console
from controller.experiment import plans
from controller.experiment.schema import Experiment, ExperimentError
from node._gen.overlaylab.v1 import control_pb2
from node.transport.security import Credentials

POLL_S = 1.0
SETTLE_S = 15.0
"""How long the PodChaos of a paused Schedule are given to report their kills."""
CHAOS_POLL_S = 0.2
CHAOS_TIMEOUT_S = 60.0
COLLECTOR_PORT = 4317
"""The chart's Collector Service, OTLP/gRPC (helm/overlaylab/templates/collector.yaml)."""


class ClusterDriver(Driver):
    def __init__(self, exp: Experiment, rd: RunDir, release: str, domain: str | None = None, *,
                 namespace: str | None, locust_url: str | None = None, credentials: Credentials | None = None) -> None:
        super().__init__(exp, rd)
        self.credentials = credentials
        self.layout = pod_layout(exp, self.plan, release, domain)
        self.pod_of = self.layout.pod_of()
        self.namespace = namespace
        """Where the pods are; None: no Kubernetes API (static containers), so no churn."""
        self.locust_url = locust_url
        token = web_token()
        self.web_headers = {TOKEN_HEADER: token} if token else {}
        """What the Locust master's web API asks of a caller (the chart's web token)."""
        self.core = self.custom = None
        if namespace is not None:
            from kubernetes import client, config
            config.load_incluster_config()
            self.core, self.custom = client.CoreV1Api(), client.CustomObjectsApi()
        elif self.plan.churn.events or "chaos_mesh" in (exp.k8s.network_faults, exp.k8s.churn_faults):
            raise ExperimentError("churn and Chaos Mesh faults need the Kubernetes API (run the controller in the cluster)")
        self.uids: dict[str, str] = {}
        self.restarts: dict[str, int] = {}

    async def start_peers(self) -> None:
        control = self.layout.addrs(control=True)
        for node, addr in sorted(self.layout.addrs().items()):
            self._connect(node, addr, control[node])
        console.print(f"cluster: waiting for {self.n} peers in {len(self.layout.pods())} pods")
        await asyncio.gather(*(self._answering(n) for n in range(self.n)))
        if self.core is not None:
            await self._collector_listening()
            for pod in self.layout.pods():
                self._started(pod, await self._read_pod(pod))

    def _started(self, pod: str, p) -> None:
        """The pod the run knows: its uid and its containers' restarts so far."""
        self.uids[pod] = p.metadata.uid
        self.restarts[pod] = _restarts(p)

    def host_groups(self) -> list[list[int]]:
        groups: dict[str, list[int]] = {}
        for node in sorted(self.alive):
            groups.setdefault(self.pod_of[node], []).append(node)
        return list(groups.values())

    async def host_running(self, node: int) -> bool:
        """Whether ``node``'s pod is still the one the run started (same uid, no container
        restarted since, not being deleted) and running: then a node of it that does not answer
        is busy, not dead. Without the Kubernetes API nothing is known (False: a crash)."""
        if self.core is None:
            return False
        pod = self.pod_of[node]
        try:
            p = await self._read_pod(pod)
        except Exception:  # gone (404) or the API did not answer: not known to run
            return False
        return (p.metadata.uid == self.uids.get(pod) and p.metadata.deletion_timestamp is None
                and p.status.phase == "Running" and _restarts(p) == self.restarts.get(pod))

    async def _answering(self, node: int) -> None:
        deadline = time.monotonic() + self.exp.k8s.ready_timeout_s
        while True:
            try:
                await self.ctl[node].GetStats(EMPTY, timeout=5)
                return
            except grpc.aio.AioRpcError as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {node} at {self.addrs[node]} never answered: {e.code()}") from e
                await asyncio.sleep(POLL_S)

    async def _collector_listening(self) -> None:
        """The run starts once the run's Collector takes connections: the chart starts it beside
        the peers, and a short run could otherwise end, flush included, before it is up (every
        span lost; measured: a 20 s run on a busy node)."""
        host = f"{self.layout.release}-collector"
        deadline = time.monotonic() + self.exp.k8s.ready_timeout_s
        while True:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, COLLECTOR_PORT), 5)
                writer.close()
                return
            except (TimeoutError, OSError) as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the Collector at {host}:{COLLECTOR_PORT} never took a connection: {e}") from e
                await asyncio.sleep(POLL_S)

    @property
    def chaos_mesh(self) -> bool:
        return self.exp.k8s.network_faults == "chaos_mesh"

    def _link_rules(self, node: int) -> control_pb2.LinkRules:
        return control_pb2.LinkRules() if self.chaos_mesh else super()._link_rules(node)

    async def apply_partition(self, cut: frozenset[int], on: bool) -> None:
        if not self.chaos_mesh:
            await super().apply_partition(cut, on)
            return
        k = next(i for i, w in enumerate(self.plan.network.partitions) if w.nodes == cut)
        name = f"{self.layout.release}-partition-{k}"
        args = ("chaos-mesh.org", "v1alpha1", self.namespace, "networkchaos", name)
        if on:
            await asyncio.to_thread(self.custom.patch_namespaced_custom_object, *args, _pause(False))
        else:
            await asyncio.to_thread(self.custom.delete_namespaced_custom_object, *args)
        # Chaos Mesh takes seconds to set up (or remove) the rules in every pod: the timeline says
        # when the cut was really in place and when it was really gone.
        deadline = time.monotonic() + CHAOS_TIMEOUT_S
        while not await asyncio.to_thread(self._chaos_settled, args, on):
            if time.monotonic() > deadline:
                raise TimeoutError(f"NetworkChaos {name}: not {'injected' if on else 'recovered'} "
                                   f"after {CHAOS_TIMEOUT_S:g} s")
            await asyncio.sleep(CHAOS_POLL_S)
        self.timeline.record(time.time_ns(), "chaos_injected" if on else "chaos_recovered", None,
                             fault="partition", nodes=sorted(cut), chaos=name)

    def _chaos_settled(self, args: tuple, injected: bool) -> bool:
        """Injected: its AllInjected condition is true; recovered: the object is gone (Chaos Mesh
        removes its finalizer once every pod's rules are undone)."""
        try:
            obj = self.custom.get_namespaced_custom_object(*args)
        except Exception as e:  # kubernetes.client.ApiException
            if getattr(e, "status", None) == 404:
                return not injected
            raise
        conditions = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}
        return injected and conditions.get("AllInjected") == "True"

    def steps(self) -> list[plans.Step]:
        """With Chaos Mesh churn, its Schedule kills the pods: the plan's churn steps give way
        to one watch of the kills from the end of the warm-up."""
        if self.exp.k8s.churn_faults != "chaos_mesh":
            return super().steps()
        rest = [s for s in super().steps() if s.kind not in plans.CHURN_KINDS]
        return [plans.Step(self.exp.phases.warmup_s, "watch_pod_kills"), *rest]

    def _step(self, step: plans.Step):
        if step.kind == "watch_pod_kills":
            return self._watch_pod_kills(self.plan.end_s - self.exp.phases.drain_s)
        return super()._step(step)

    async def _watch_pod_kills(self, end_s: float) -> None:
        """Resume the Schedule, record each kill Chaos Mesh reports, join the node again once its
        pod is back. At ``end_s`` pause the Schedule, record the kills it still reports (a kill
        just before the end can show in its PodChaos status seconds later on a busy node; up to
        ``SETTLE_S``) and its events, then delete it."""
        name = f"{self.layout.release}-pod-kill"
        args = ("chaos-mesh.org", "v1alpha1", self.namespace, "schedules", name)
        await asyncio.to_thread(self.custom.patch_namespaced_custom_object, *args, _pause(False))
        self.timeline.record(time.time_ns(), "fault_on", None, fault="pod_kill", chaos=name)
        loop = asyncio.get_running_loop()
        rejoins, seen = [], set()

        async def record() -> bool:
            """Record the kills not seen yet; True once every PodChaos has reported its kill."""
            kills, pending = await asyncio.to_thread(self._pod_kills, name)
            for chaos, pod, killed_at in kills:
                if (chaos, pod) in seen:
                    continue
                seen.add((chaos, pod))
                (node,) = self.layout.nodes_of(pod)
                self.timeline.record(time.time_ns(), "pod_kill", node, chaos=chaos, pod=pod, killed_at=killed_at)
                if node in self.alive:
                    self.alive.discard(node)
                    self.timeline.record(time.time_ns(), "crash", node, by="chaos_mesh", chaos=chaos)
                    rejoins.append(asyncio.ensure_future(self._rejoin(node, loop.time() - self.t0)))
            return not pending

        while loop.time() < self.t0 + end_s:
            await record()
            await asyncio.sleep(POLL_S)
        await asyncio.to_thread(self.custom.patch_namespaced_custom_object, *args, _pause(True))
        for _ in range(round(SETTLE_S / POLL_S)):
            if await record():
                break
            await asyncio.sleep(POLL_S)
        for event in await asyncio.to_thread(self._schedule_events, name):
            self.timeline.record(time.time_ns(), "chaos_event", None, chaos=name, **event)
        await asyncio.to_thread(self.custom.delete_namespaced_custom_object, *args)
        self.timeline.record(time.time_ns(), "fault_off", None, fault="pod_kill", chaos=name)
        await asyncio.gather(*rejoins, return_exceptions=True)

    def _pod_kills(self, schedule: str) -> tuple[list[tuple[str, str, str]], int]:
        """(PodChaos, pod, time) of each kill the Schedule's PodChaos objects report done (a
        container record whose Apply event succeeded; Chaos Mesh labels the objects a Schedule
        creates ``managed-by: <schedule>``), and how many of those objects report none yet."""
        items = self.custom.list_namespaced_custom_object(
            "chaos-mesh.org", "v1alpha1", self.namespace, "podchaos", label_selector=f"managed-by={schedule}")["items"]
        kills, pending = [], 0
        for item in items:
            done = [(item["metadata"]["name"], record["id"].rpartition("/")[2], event["timestamp"])
                    for record in (item.get("status") or {}).get("experiment", {}).get("containerRecords") or []
                    for event in record.get("events") or []
                    if event.get("operation") == "Apply" and event.get("type") == "Succeeded"]
            kills += done
            pending += not done
        return kills, pending

    def _schedule_events(self, schedule: str) -> list[dict]:
        """Chaos Mesh's own account of the Schedule (its Kubernetes events: ``Spawned`` for each
        PodChaos, ``Forbid``, ``Failed``): a kill off the schedule's rate shows its cause here
        (on a busy node its controller can lose the update of the last schedule time to a
        conflict and spawn again at once)."""
        items = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.kind=Schedule,involvedObject.name={schedule}").items
        return [{"reason": e.reason, "message": e.message, "count": e.count or 1,
                 "last_at": (e.last_timestamp or e.event_time or e.metadata.creation_timestamp).isoformat()}
                for e in sorted(items, key=lambda e: e.metadata.creation_timestamp)]

    async def _read_pod(self, pod: str):
        return await asyncio.to_thread(self.core.read_namespaced_pod, pod, self.namespace)

    async def take_down(self, node: int, graceful: bool) -> None:
        from kubernetes import client
        pod = self.pod_of[node]
        await asyncio.to_thread(self.core.delete_namespaced_pod, pod, self.namespace,
                                body=client.V1DeleteOptions(grace_period_seconds=None if graceful else 0))

    async def bring_back(self, node: int) -> None:
        """Wait for the StatefulSet's new pod (another uid), then for its peer to answer."""
        pod = self.pod_of[node]
        deadline = time.monotonic() + self.exp.k8s.ready_timeout_s
        while True:
            try:
                p = await self._read_pod(pod)
                if p.metadata.uid != self.uids[pod] and p.status.pod_ip and p.metadata.deletion_timestamp is None:
                    self._started(pod, p)
                    break
            except Exception as e:
                if getattr(e, "status", None) != 404:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {pod} did not come back")
            await asyncio.sleep(POLL_S)
        await self.channels[node].close()
        self._connect(node, self.addrs[node], self.control_addrs[node])
        await self._answering(node)

    async def load_phase(self) -> None:
        """Locust master (chart) through its web API: swarm for count / rate seconds, then keep
        the CSV statistics (same names as a headless run's) and the HTML report."""
        if not self.locust_url:
            raise ExperimentError("publications.driver: locust needs the chart's Locust master (--locust-url)")
        p, out = self.exp.publications, self.rd.path / "locust"
        out.mkdir(exist_ok=True)
        users, duration = p.locust_users, max(1, round(p.count / p.rate_per_s))
        await self._locust_workers(self.exp.k8s.locust_workers)
        form = {"user_count": users, "spawn_rate": users, "run_time": f"{duration}s"}
        await asyncio.to_thread(http_request, f"{self.locust_url}/swarm", urllib.parse.urlencode(form).encode(), self.web_headers)
        self.timeline.record(time.time_ns(), "load_start", None, driver="locust", users=users, rate_per_s=p.rate_per_s)
        await asyncio.sleep(duration + 2)
        await asyncio.to_thread(http_request, f"{self.locust_url}/stop", b"", self.web_headers)
        self.timeline.record(time.time_ns(), "load_end", None)
        for path, name in (("/stats/requests/csv", "stats_stats.csv"),
                           ("/stats/requests_full_history/csv", "stats_stats_history.csv"),
                           ("/stats/failures/csv", "stats_failures.csv"),
                           ("/stats/report?download=1", "report.html")):
            try:
                (out / name).write_bytes(await asyncio.to_thread(http_request, self.locust_url + path, None, self.web_headers))
            except OSError as e:
                self._fail(f"locust_download:{name}")
                console.print(f"[yellow]Locust {path}: {e}[/]")


    async def _locust_workers(self, wanted: int) -> None:
        """A distributed swarm cannot start before its workers have connected."""
        deadline = time.monotonic() + self.exp.k8s.ready_timeout_s
        while True:
            try:
                count = json.loads(await asyncio.to_thread(http_request, f"{self.locust_url}/worker-count", None,
                                                          self.web_headers))["worker_count"]
            except OSError:
                count = 0
            if count >= wanted:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {count} of {wanted} Locust workers connected")
            await asyncio.sleep(POLL_S)


def _restarts(pod) -> int:
    return sum(c.restart_count or 0 for c in pod.status.container_statuses or ())


def _pause(paused: bool) -> dict:
    """The patch that pauses or resumes a Chaos Mesh object."""
    return {"metadata": {"annotations": {"experiment.chaos-mesh.org/pause": "true" if paused else "false"}}}
