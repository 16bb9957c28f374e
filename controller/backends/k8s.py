"""The ``k8s`` backend: the chart on a cluster, driven with the official kubernetes client.

``overlaylab run FILE --backend k8s`` renders the chart's values from the experiment
(``controller/backends/helm.py``), renders the chart with ``helm template`` (release ``ovl-<hash of the
run id>``, namespace ``k8s.namespace``), and applies every object through the API with the
label ``overlaylab.io/run-id``. Then it waits for the peer StatefulSets to be ready and for the
controller Job (``overlaylab drive`` in the cluster: joins, publications or Locust, churn by
deleting pods, partitions) to finish, fetches the run directory and the Collector's traces from
the results server through the API server's service proxy, and deletes everything carrying the
run id (``k8s.teardown``), also after an error or Ctrl-C. The run directory then holds what a
local run holds, so ``overlaylab analyze`` works on it unchanged.

Each step is a plain API request (create, list by label, read status, delete, service proxy),
so the runner is tested at the HTTP level against a fake API server that validates every body
against the Kubernetes and Chaos Mesh schemas (tests/component/test_k8s_runner.py).
"""

from __future__ import annotations

import base64
import io
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import yaml

from controller.backends.base import Runner
from controller.backends.helm import CHART, helm_values, sweep_values
from controller.backends.hosting import release_name
from controller.backends.results import TOKEN_HEADER
from controller.backends.rundir import RunDir
from controller.cli.progress import console, phase
from controller.experiment import plans
from controller.experiment.schema import Experiment, ExperimentError

RUN_ID_LABEL = "overlaylab.io/run-id"
ROLE_LABEL = "overlaylab.io/role"
NETEM_LABEL = "overlaylab.io/netem"
"""A node label: ``absent`` where the kernel has no netem (k8s/up.sh probes it)."""
POLL_S = 2.0
SETTLE_S = 3.0
"""After the Job ends: time for the Collector's batch processor and file exporter to write."""

# kind -> (client API class, method suffix): create_namespaced_<suffix>, list_..., delete_...
BUILTIN = {
    "ConfigMap": ("CoreV1Api", "config_map"),
    "Secret": ("CoreV1Api", "secret"),
    "Service": ("CoreV1Api", "service"),
    "ServiceAccount": ("CoreV1Api", "service_account"),
    "PersistentVolumeClaim": ("CoreV1Api", "persistent_volume_claim"),
    "Pod": ("CoreV1Api", "pod"),
    "StatefulSet": ("AppsV1Api", "stateful_set"),
    "Deployment": ("AppsV1Api", "deployment"),
    "Job": ("BatchV1Api", "job"),
    "Role": ("RbacAuthorizationV1Api", "role"),
    "RoleBinding": ("RbacAuthorizationV1Api", "role_binding"),
    "NetworkPolicy": ("NetworkingV1Api", "network_policy"),
}
CUSTOM = {"NetworkChaos": ("chaos-mesh.org", "v1alpha1", "networkchaos"),
          "Schedule": ("chaos-mesh.org", "v1alpha1", "schedules")}
# Teardown order: the controller first (it may still act), the volume last.
TEARDOWN = ["Job", "Schedule", "NetworkChaos", "Deployment", "StatefulSet", "Pod", "Service", "RoleBinding", "Role",
            "ServiceAccount", "NetworkPolicy", "Secret", "ConfigMap", "PersistentVolumeClaim"]


class K8sError(RuntimeError):
    pass


def helm_binary() -> str:
    local = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "helm"
    found = shutil.which("helm") or (str(local) if local.exists() else None)
    if not found:
        raise K8sError("helm not found: install Helm 3 or 4, or run `make .venv/bin/helm`")
    return found


def render_chart(values: str, release: str, namespace: str) -> list[dict]:
    done = subprocess.run([helm_binary(), "template", release, str(CHART), "--namespace", namespace,
                           "--skip-tests", "-f", "-"], input=values, capture_output=True, text=True)
    if done.returncode:
        raise K8sError(f"helm template failed:\n{done.stderr}")
    return [o for o in yaml.safe_load_all(done.stdout) if o]


class Cluster:
    """The handful of API calls the runner makes, on one namespace."""

    def __init__(self, namespace: str, context: str | None = None, api_client=None) -> None:
        from kubernetes import client, config

        if api_client is None:
            config.load_kube_config(context=context)
            api_client = client.ApiClient()
        self.client = client
        self.api_client = api_client
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api_client)

    def _api(self, kind: str):
        cls, suffix = BUILTIN[kind]
        return getattr(self.client, cls)(self.api_client), suffix

    def create(self, obj: dict) -> None:
        kind = obj["kind"]
        if kind in CUSTOM:
            group, version, plural = CUSTOM[kind]
            self.custom.create_namespaced_custom_object(group, version, self.namespace, plural, obj)
        else:
            api, suffix = self._api(kind)
            getattr(api, f"create_namespaced_{suffix}")(self.namespace, obj)

    def delete_labelled(self, kind: str, selector: str) -> int:
        if kind in CUSTOM:
            group, version, plural = CUSTOM[kind]
            try:
                items = self.custom.list_namespaced_custom_object(group, version, self.namespace, plural,
                                                                  label_selector=selector)["items"]
            except self.client.ApiException as e:
                if e.status == 404:  # Chaos Mesh is not installed: nothing of that kind exists
                    return 0
                raise
            for item in items:
                self._gone_already_ok(self.custom.delete_namespaced_custom_object, group, version, self.namespace,
                                      plural, item["metadata"]["name"])
            return len(items)
        api, suffix = self._api(kind)
        items = getattr(api, f"list_namespaced_{suffix}")(self.namespace, label_selector=selector).items
        for item in items:
            self._gone_already_ok(getattr(api, f"delete_namespaced_{suffix}"), item.metadata.name, self.namespace,
                                  propagation_policy="Background")
        return len(items)

    def _gone_already_ok(self, delete, *args, **kwargs) -> None:
        """Delete, where an object that vanished since it was listed (a Job's pods, deleted with
        the Job a moment earlier) is what a teardown wants, not an error."""
        try:
            delete(*args, **kwargs)
        except self.client.ApiException as e:
            if e.status != 404:
                raise

    def chaos_mesh_installed(self) -> bool:
        try:
            self.custom.list_namespaced_custom_object("chaos-mesh.org", "v1alpha1", self.namespace, "schedules",
                                                      limit=1)
        except self.client.ApiException as e:
            if e.status == 404:  # no such resource: the CRDs are not there
                return False
            raise
        return True

    def nodes_labelled(self, label: str, value: str) -> list[str] | None:
        """The nodes labelled ``label=value``; None where this user may not list nodes."""
        try:
            nodes = self.client.CoreV1Api(self.api_client).list_node(label_selector=f"{label}={value}").items
        except self.client.ApiException as e:
            if e.status == 403:
                return None
            raise
        return [n.metadata.name for n in nodes]

    def stateful_sets_ready(self, selector: str) -> tuple[int, int]:
        sets = self.client.AppsV1Api(self.api_client).list_namespaced_stateful_set(
            self.namespace, label_selector=selector).items
        return sum(s.status.ready_replicas or 0 for s in sets), sum(s.spec.replicas for s in sets)

    def job_state(self, name: str) -> str:
        status = self.client.BatchV1Api(self.api_client).read_namespaced_job_status(name, self.namespace).status
        return "succeeded" if status.succeeded else "failed" if status.failed else "running"

    def job_progress(self, name: str) -> tuple[bool, int, int]:
        """(finished, indexes or pods succeeded, failed) of a Job of many completions."""
        status = self.client.BatchV1Api(self.api_client).read_namespaced_job_status(name, self.namespace).status
        done = any(c.type in ("Complete", "Failed") and c.status == "True" for c in status.conditions or [])
        return done, status.succeeded or 0, status.failed or 0

    def job_logs(self, name: str) -> str:
        core = self.client.CoreV1Api(self.api_client)
        pods = core.list_namespaced_pod(self.namespace, label_selector=f"job-name={name}").items
        return "\n".join(core.read_namespaced_pod_log(p.metadata.name, self.namespace, tail_lines=50) for p in pods)

    def fetch(self, service: str, port: str, path: str, headers: dict[str, str] | None = None,
              timeout_s: float = 120.0) -> bytes:
        """GET ``path`` from a Service through the API server's proxy, waiting up to ``timeout_s``
        while the Service has no ready endpoint (503: its pod not Ready yet, or restarting)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                response = self.client.CoreV1Api(self.api_client).connect_get_namespaced_service_proxy_with_path(
                    f"{service}:{port}", self.namespace, path, _preload_content=False, _headers=headers)
                return response.data
            except self.client.ApiException as e:
                if e.status != 503 or time.monotonic() > deadline:
                    raise
                time.sleep(POLL_S)


class K8sRunner(Runner):
    def __init__(self, cluster: Cluster | None = None) -> None:
        self.cluster = cluster

    def run(self, exp: Experiment, rd: RunDir) -> None:
        k = exp.k8s
        run_id, release = rd.run_id, release_name(rd.run_id)
        plan = plans.render(exp)
        values = helm_values(exp, plan, run_id)
        rd.write_text("helm-values.yaml", values)
        objects = render_chart(values, release, k.namespace)
        cluster = self.cluster or Cluster(k.namespace, k.context)
        preflight(cluster, yaml.safe_load(values)["chaos"])
        selector = f"{RUN_ID_LABEL}={run_id}"
        console.print(f"k8s: release {release} in namespace {k.namespace}: {len(objects)} objects")
        try:
            for obj in objects:
                cluster.create(obj)
            self._wait_peers(cluster, selector, k.ready_timeout_s)
            self._wait_job(cluster, f"{release}-controller", plan.end_s + k.ready_timeout_s)
            time.sleep(SETTLE_S)
            self._collect(cluster, release, rd, web_token(objects))
        finally:
            if k.teardown:
                removed = sum(cluster.delete_labelled(kind, selector) for kind in TEARDOWN)
                console.print(f"k8s: deleted {removed} objects labelled {selector}")

    def _wait_peers(self, cluster: Cluster, selector: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with phase("k8s: peer pods ready", 1) as advance:
            while True:
                ready, wanted = cluster.stateful_sets_ready(selector)
                advance(ready / max(1, wanted))
                if wanted and ready >= wanted:
                    return
                if time.monotonic() > deadline:
                    raise K8sError(f"only {ready} of {wanted} peer pods ready after {timeout_s:g} s")
                time.sleep(POLL_S)

    def _wait_job(self, cluster: Cluster, job: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with phase(f"k8s: controller Job {job}", 1):
            while (state := cluster.job_state(job)) == "running":
                if time.monotonic() > deadline:
                    raise K8sError(f"Job {job} still running after {timeout_s:g} s")
                time.sleep(POLL_S)
        if state == "failed":
            raise K8sError(f"the controller Job failed; its log:\n{cluster.job_logs(job)}")

    def _collect(self, cluster: Cluster, release: str, rd: RunDir, token: str) -> None:
        data = fetch_run(cluster, release, rd.run_id, rd.path.parent, token)
        if not (rd.path / "run.json").exists():
            raise K8sError(f"the fetched run directory has no run.json: {sorted(p.name for p in rd.path.iterdir())}")
        console.print(f"k8s: fetched {rd.run_id} ({len(data) / 1e6:.1f} MB)")


def preflight(cluster: Cluster, chaos: dict) -> None:
    """Refuse, before anything is created, a run the cluster cannot carry out: Chaos Mesh objects
    without Chaos Mesh, NetworkChaos delay or loss on a node without netem (k8s/up.sh labels its
    node with what it found; on other clusters Chaos Mesh reports the failure in the object)."""
    if not chaos["enabled"]:
        return
    if not cluster.chaos_mesh_installed():
        raise ExperimentError(f"k8s.network_faults or k8s.churn_faults is chaos_mesh, but namespace {cluster.namespace} has "
                       "no chaos-mesh.org resources: install Chaos Mesh (make chaos-up on the real-cluster tier; "
                       "docs/kubernetes.md)")
    if chaos["delay"] or chaos["loss"]:
        lacking = cluster.nodes_labelled(NETEM_LABEL, "absent")
        if lacking:
            raise ExperimentError(f"network delay, jitter or loss with k8s.network_faults: chaos_mesh needs the kernel's netem "
                           f"queueing discipline (sch_netem), which node(s) {', '.join(lacking)} lack "
                           f"({NETEM_LABEL}=absent); set k8s.network_faults: peers (the peers' own link emulation)")


def web_token(objects: list[dict]) -> str:
    """The web token the chart generated for a release (its results server and Locust UI)."""
    [secret] = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["labels"].get(ROLE_LABEL) == "web-token"]
    return base64.b64decode(secret["data"]["token"]).decode()


def fetch_run(cluster: Cluster, release: str, run_id: str, out: Path, token: str) -> bytes:
    """Fetch the run directory ``run_id`` from the release's results server into ``out``."""
    # A path without "/": the client percent-encodes the path parameter.
    data = cluster.fetch(f"{release}-collector", "results", f"{run_id}.tar.gz", {TOKEN_HEADER: token})
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(out, filter="data")
    return data


def run_sweep_job(base: Experiment, run_id: str, points: int, parallelism: int, out: Path) -> None:
    """Run the ``points`` of ``base``'s sweep as the indexes of one Job (the chart's sweep
    mode) on the cluster of ``base.k8s``, and fetch the sweep's directory ``run_id`` into ``out``."""
    k = base.k8s
    release, selector = release_name(run_id), f"{RUN_ID_LABEL}={run_id}"
    objects = render_chart(sweep_values(base, run_id, points, parallelism), release, k.namespace)
    cluster = Cluster(k.namespace, k.context)
    console.print(f"k8s: release {release} in namespace {k.namespace}: a Job of {points} indexes, {parallelism} at a time")
    try:
        for obj in objects:
            cluster.create(obj)
        with phase(f"k8s: sweep Job {release}-sweep", points) as advance:
            while True:
                done, succeeded, failed = cluster.job_progress(f"{release}-sweep")
                advance(succeeded + failed)
                if done:
                    break
                time.sleep(POLL_S)
        data = fetch_run(cluster, release, run_id, out, web_token(objects))
        console.print(f"k8s: fetched {run_id} ({len(data) / 1e6:.1f} MB): {succeeded} points done, {failed} failed")
    finally:
        if k.teardown:
            removed = sum(cluster.delete_labelled(kind, selector) for kind in TEARDOWN)
            console.print(f"k8s: deleted {removed} objects labelled {selector}")
