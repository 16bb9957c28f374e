"""The real-cluster tier (`make test-cluster`, root): a single-node Kubernetes 1.34 built from the
Go module proxy and started by k8s/up.sh, with overlaylab's image and the Collector imported
into its containerd. `helm install` of the chart, the quickstart over `--backend k8s`, and churn
by pod deletion, each analysed; nothing labelled with a run id may be left afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import networkx as nx
import pyarrow.parquet as pq
import pytest
import yaml
from kubernetes import client, config

from analysis.jobs import summarize
from analysis.overlay import snapshots
from analysis.runfiles import read_stats
from controller.backends.k8s import helm_binary
from controller.backends.rundir import output_digests
from node.kit import builtin_protocols
from node.transport.settings import TransportSettings
from tests.conftest import ROOT
from tests.helpers import conformance_experiment, one_per_module, reached_sets
from tests.k8s_schemas import CRDS

CLUSTER_SETTINGS = [
    "k8s.namespace=default", "k8s.image_pull_policy=Never", "k8s.collector_image=overlaylab/otelcol:0.165.0",
    "k8s.storage_class=overlaylab-results", "k8s.ready_timeout_s=300",
]
RESULTS_DIR = "/var/lib/overlaylab/results"
RESULTS_VOLUMES = 16
"""Static PersistentVolumes on one node directory, one per run's results claim: the cluster has
no provisioner, and a pod that mounts a hostPath itself is refused by the restricted (and the
baseline) Pod Security Standard."""


@pytest.fixture(scope="module")
def api():
    """The cluster, with the test namespace enforcing the Pod Security Standard "restricted":
    every pod of every test below is admitted only if it complies."""
    config.load_kube_config()
    api = client.ApiClient()
    core = client.CoreV1Api(api)
    core.patch_namespace("default", {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}})
    ours = lambda: [pv.metadata.name for pv in core.list_persistent_volume().items
                    if pv.metadata.name.startswith("overlaylab-results-")]
    for name in ours():  # left by an earlier run on this cluster
        core.delete_persistent_volume(name)
    deadline = time.monotonic() + 60
    while ours() and time.monotonic() < deadline:  # a volume still bound goes once its claim does
        time.sleep(1)
    for k in range(RESULTS_VOLUMES):
        core.create_persistent_volume({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"overlaylab-results-{k}"},
            "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "overlaylab-results",
                     "hostPath": {"path": RESULTS_DIR, "type": "Directory"}}})
    return api


def overlaylab(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})


def sets(*extra: str) -> list[str]:
    return [a for s in (*CLUSTER_SETTINGS, *extra) for a in ("--set", s)]


def labelled_left(api, run_id: str) -> list[str]:
    selector = f"overlaylab.io/run-id={run_id}"
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    found = [*core.list_namespaced_pod("default", label_selector=selector).items,
             *core.list_namespaced_service("default", label_selector=selector).items,
             *apps.list_namespaced_stateful_set("default", label_selector=selector).items,
             *batch.list_namespaced_job("default", label_selector=selector).items]
    return [o.metadata.name for o in found]


def wait_gone(api, run_id: str, timeout_s: float = 120) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := labelled_left(api, run_id)) and time.monotonic() < deadline:
        time.sleep(2)
    return left


def test_the_node_is_ready(api):
    (node,) = client.CoreV1Api(api).list_node().items
    conditions = {c.type: c.status for c in node.status.conditions}
    assert conditions["Ready"] == "True"
    assert client.VersionApi(api).get_code().git_version == "v1.34.4"


def test_the_namespace_refuses_a_pod_that_is_not_restricted(api):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "not-restricted"},
           "spec": {"containers": [{"name": "c", "image": "overlaylab:0.1.0", "imagePullPolicy": "Never"}]}}
    with pytest.raises(client.ApiException) as err:
        client.CoreV1Api(api).create_namespaced_pod("default", pod)
    assert err.value.status == 403 and "restricted" in err.value.body


def test_helm_install_runs_the_smoke_experiment_to_completion(api, tmp_path):
    values = overlaylab("helm-values", "experiments/k8s-smoke.yaml", "--run-id", "helm-smoke", *sets())
    assert values.returncode == 0, values.stderr
    path = tmp_path / "values.yaml"
    path.write_text(values.stdout)
    installed = subprocess.run([helm_binary(), "install", "helm-smoke", str(ROOT / "helm" / "overlaylab"), "-f", str(path),
                                "--wait", "--timeout", "5m"], capture_output=True, text=True)
    try:
        assert installed.returncode == 0, installed.stderr
        batch = client.BatchV1Api(api)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            status = batch.read_namespaced_job_status("helm-smoke-controller", "default").status
            if status.succeeded or status.failed:
                break
            time.sleep(2)
        assert status.succeeded == 1, client.CoreV1Api(api).read_namespaced_pod_log(
            client.CoreV1Api(api).list_namespaced_pod("default", label_selector="job-name=helm-smoke-controller")
            .items[0].metadata.name, "default")
        tested = subprocess.run([helm_binary(), "test", "helm-smoke"], capture_output=True, text=True)
        assert tested.returncode == 0, tested.stdout + tested.stderr
    finally:
        subprocess.run([helm_binary(), "uninstall", "helm-smoke", "--wait"], capture_output=True)
    assert wait_gone(api, "helm-smoke") == []


def run_and_summarise(spark, tmp_path, experiment: str, *extra: str) -> tuple[dict, list[dict]]:
    """``overlaylab run --backend k8s``, then its analysis in this process's Spark session (a warm
    JVM analyses a small run in about 20 s, a new one in 60 s with its start)."""
    done = overlaylab("run", experiment, "--backend", "k8s", "--no-analyze", "--out", str(tmp_path), *sets(*extra))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    timeline = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    summarize.run(run_dir, spark)
    return json.loads((run_dir / "summary.json").read_text()), timeline


def test_quickstart_over_the_k8s_backend_reaches_every_subscriber(api, spark, tmp_path):
    """At half the quickstart's rate: with mutual TLS, 4 floods a second (about 1,000 unary
    calls and spans a second) saturate the 2 cores that also run the cluster; latencies then
    pass CYCLON's 1.5 s deadline and CYCLON rightly drops the slow peers (measured: 2 of 269
    deliveries missed, 24 failed sends). The streamed links of the "peers that keep up" issue
    are the fix; this test checks the backend, not the throughput."""
    summary, _ = run_and_summarise(spark, tmp_path, "experiments/quickstart.yaml", "k8s.peers_per_pod=4",
                                   "publications.rate_per_s=2")
    assert summary["backend"] == "k8s" and summary["events"] == 40
    assert summary["hit_ratio"] == 1.0, {k: summary.get(k) for k in ("deliveries", "errors", "spans", "churn")}
    assert summary["spans"]["dropped"] == 0
    assert wait_gone(api, summary["run_id"]) == []


@pytest.mark.parametrize("name", one_per_module(builtin_protocols()))
def test_a_protocol_of_each_module_the_image_carries_delivers_every_event_on_the_cluster(api, spark, tmp_path, name):
    """The conformance suite's smoke (16 peers on a ring of contacts, or their protocol's own
    bootstrap, static network) over the k8s backend, for a protocol of each core module in the
    package (a longer warm-up: pods start slower than processes). SpiderCast also connects
    every topic."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(conformance_experiment(name, backend="k8s", phases={"warmup_s": 10, "drain_s": 3})))
    out = tmp_path / "runs"
    out.mkdir()
    summary, _ = run_and_summarise(spark, out, str(path), "k8s.peers_per_pod=4")
    assert summary["backend"] == "k8s" and summary["protocol"] == name and summary["events"] == 24
    assert summary["hit_ratio"] == 1.0 and summary["spans"]["dropped"] == 0
    if name == "spidercast":
        assert summary["protocol_metrics"]["topic_connected"] and summary["topic_connectivity"] == 1.0
    assert wait_gone(api, summary["run_id"]) == []


def test_gossip_on_a_static_graph_reaches_the_same_nodes_on_the_cluster_as_in_the_simulator(api, spark, tmp_path):
    """experiments/gossip-local.yaml (100 peers on a Poisson graph, 30 ± 10 ms links) in 10 pods
    with mutual TLS: with per-link coins every event reaches the very nodes it reaches in `sim`.
    A 10 s warm-up as the other cluster runs have (the file's 2 s: in 2 of 3 runs here no peer's
    spans reached the Collector during the whole run and its flush; cause not found)."""
    (tmp_path / "k8s").mkdir()
    summary, _ = run_and_summarise(spark, tmp_path / "k8s", "experiments/gossip-local.yaml", "k8s.peers_per_pod=10",
                                   "phases.warmup_s=10")
    assert summary["backend"] == "k8s" and summary["events"] == 40 and summary["spans"]["dropped"] == 0
    done = overlaylab("run", "experiments/gossip-local.yaml", "--backend", "sim", "--out", str(tmp_path / "sim"),
                      "--no-analyze")
    assert done.returncode == 0, done.stderr[-3000:]
    [on_k8s] = [p for p in (tmp_path / "k8s").iterdir() if p.is_dir()]
    [in_sim] = (tmp_path / "sim").iterdir()
    assert reached_sets(on_k8s) == reached_sets(in_sim)
    assert summary["protocol_metrics"]["receivers_mean"] > 10
    assert wait_gone(api, summary["run_id"]) == []


def test_stan_lowers_pvs_on_the_cluster_and_its_open_channels_are_its_physical_links(api, spark, tmp_path):
    """experiments/stan-local.yaml (100 peers, 16 topics) in 10 pods with mutual TLS, 4 rounds of
    6 s: LVS stays, PVS falls, and each peer's open gRPC channels at the end are its physical
    links (the shell keeps channels to current neighbours only). Measured: a walk's reply takes
    seconds here (every reply opens a channel to its origin, with a TLS handshake, on 2 cores
    shared with the control plane), so with 3 s rounds nearly every reply is late and PVS stays;
    with 6 s rounds it falls from 26.93 to 24.30 in 4 rounds (on local peers: 18.67 in 8)."""
    summary, _ = run_and_summarise(spark, tmp_path, "experiments/stan-local.yaml", "k8s.peers_per_pod=10",
                                   "protocol.params.round_ms=6000", "protocol.params.walk_timeout_ms=5500",
                                   "protocol.params.rounds=4", "phases.warmup_s=40", "outputs.snapshot_every_s=6")
    m = summary["protocol_metrics"]
    assert summary["backend"] == "k8s" and summary["events"] == 32 and m["lvs_constant"]
    assert m["fpvs_mean"] < 0.95 * m["ipvs_mean"]
    assert m["open_channels_mean"] == pytest.approx(m["fpvs_mean"], abs=0.3)
    assert wait_gone(api, summary["run_id"]) == []


def test_deleted_peer_pods_are_recorded_brought_back_and_analysed(api, spark, tmp_path):
    summary, timeline = run_and_summarise(spark, tmp_path, "experiments/k8s-cluster-churn.yaml")
    crashes = [e for e in timeline if e["kind"] == "crash"]
    rejoins = [e for e in timeline if e["kind"] == "join" and not e.get("initial")]
    assert len(crashes) == 2 and sorted(e["node"] for e in rejoins) == sorted(e["node"] for e in crashes)
    assert summary["churn"]["crashes"] == 2
    # churn.rejoin: fresh (the one rule, node/kit/rejoin.py): the pod the StatefulSet brought back
    # starts the node's second life, seeded for it (tests/component/test_rejoin_local.py checks the
    # seed a life's number gives), not a replay of its first
    run_dir = tmp_path / summary["run_id"]
    lives = {row["node"]: row["counters"].get("life", 0)
             for row in read_stats(run_dir)}
    assert {lives[e["node"]] for e in rejoins} == {1}
    assert sum(lives.values()) == 2
    assert summary["hit_ratio"] >= 0.99
    assert wait_gone(api, summary["run_id"]) == []
    assert yaml.safe_load((tmp_path / summary["run_id"] / "helm-values.yaml").read_text())["peers"]["churners"] == 2


def test_locust_master_and_workers_in_pods_publish_at_the_planned_rate(api, spark, tmp_path):
    summary, timeline = run_and_summarise(spark, tmp_path, "experiments/k8s-locust.yaml")
    run_dir = tmp_path / summary["run_id"]
    assert (run_dir / "locust" / "stats_stats.csv").exists() and (run_dir / "locust" / "report.html").exists()
    assert [e["kind"] for e in timeline if e["kind"].startswith("load_")] == ["load_start", "load_end"]
    assert summary["load"]["driver"] == "locust"
    assert summary["load"]["offered_share_of_target"] >= 0.9 and summary["load"]["published_per_s"] >= 0.9 * 5
    assert summary["hit_ratio"] == 1.0
    assert wait_gone(api, summary["run_id"]) == []


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_sweep_runs_as_an_indexed_job_and_gives_the_runs_it_gives_here(api, tmp_path):
    """`overlaylab sweep --backend k8s`: the 4 points of experiments/k8s-sweep.yaml as the indexes
    of one Job, 2 at a time; fetched, analysed here, and byte for byte the runs the same points
    give as local processes (a simulation is a function of its file and seed)."""
    done = overlaylab("sweep", "experiments/k8s-sweep.yaml", "--backend", "k8s", "--out", str(tmp_path / "k8s"), *sets())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [on_k8s] = (tmp_path / "k8s").iterdir()
    record = json.loads((on_k8s / "sweep.json").read_text())
    assert record["backend"] == "k8s" and [p["rc"] for p in record["points"]] == [0, 0, 0, 0]
    assert [r["status"] for r in record["rows"]] == ["ok"] * 4
    flooding = [r for r in record["rows"] if r["protocol.params.gamma"] == 1.0]
    assert len(flooding) == 2 and all(r["hit ratio"] == 1.0 for r in flooding)

    here = overlaylab("sweep", "experiments/k8s-sweep.yaml", "--out", str(tmp_path / "here"), "--no-analyze", *sets())
    assert here.returncode == 0, here.stdout[-3000:] + here.stderr[-3000:]
    [local] = (tmp_path / "here").iterdir()
    local_points = json.loads((local / "sweep.json").read_text())["points"]
    for a, b in zip(record["points"], local_points, strict=True):
        assert a["point"] == b["point"]
        ours, theirs = output_digests(on_k8s / a["run_dir"]), output_digests(local / b["run_dir"])
        for name in ("traces/spans.parquet", "snapshots", "stats"):
            assert ours[name] == theirs[name], (a["point"], name)
    assert wait_gone(api, on_k8s.name) == []


# --- Chaos Mesh, built from the module proxy (make chaos-build) and installed by its own chart ----

@pytest.fixture(scope="module")
def chaos_mesh(api):
    """Chaos Mesh as `make chaos-up` installs it; at the end `make chaos-down`, which must leave
    no chaos-mesh.org CRD and no chaos-mesh namespace behind."""
    up = subprocess.run([str(ROOT / "k8s" / "chaos-mesh" / "up.sh")], capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    yield
    down = subprocess.run([str(ROOT / "k8s" / "chaos-mesh" / "down.sh")], capture_output=True, text=True, timeout=600)
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
    assert [c.metadata.name for c in crds if c.spec.group == "chaos-mesh.org"] == []
    assert "chaos-mesh" not in {n.metadata.name for n in client.CoreV1Api(api).list_namespace().items}


def test_the_chart_check_validates_against_the_schemas_of_the_chaos_mesh_that_runs(api, chaos_mesh):
    installed = {c.spec.names.kind: c for c in client.ApiextensionsV1Api(api).list_custom_resource_definition().items
                 if c.spec.group == "chaos-mesh.org"}
    copies = sorted(CRDS.glob("*.yaml"))
    assert len(copies) == 3
    for path in copies:
        copy = yaml.safe_load(path.read_text())
        (version,) = copy["spec"]["versions"]
        live = api.sanitize_for_serialization(installed[copy["spec"]["names"]["kind"]].spec.versions[0].schema)
        assert live["openAPIV3Schema"] == version["schema"]["openAPIV3Schema"], path.name


def test_chaos_mesh_kills_churner_pods_on_its_schedule_and_the_overlay_recovers(api, spark, chaos_mesh, tmp_path):
    summary, timeline = run_and_summarise(spark, tmp_path, "experiments/k8s-cluster-pod-kill.yaml")
    kills = [e for e in timeline if e["kind"] == "pod_kill"]
    crashes = [e for e in timeline if e["kind"] == "crash"]
    rejoins = [e for e in timeline if e["kind"] == "join" and not e.get("initial")]
    # The kills, read from the PodChaos objects' status, are those of the objects Chaos Mesh's
    # own events say the Schedule spawned, one pod each...
    events = [e for e in timeline if e["kind"] == "chaos_event"]
    spawned = [e["message"].rpartition(": ")[2] for e in events if e["reason"] == "Spawned"]
    assert kills and {e["chaos"] for e in kills} <= set(spawned) and len({e["chaos"] for e in kills}) == len(kills)
    assert all("-churner-" in e["pod"] and e["killed_at"] for e in kills)
    # ... at one every 20 s of the 40 s window, resumed on a Schedule created earlier (a first
    # spawn at once), but for a spawn right after each update of its last schedule time it lost
    # to a conflict (its controller reads a cache that lags on this busy node).
    lost = sum(e["count"] for e in events if e["reason"] == "Failed" and "lastScheduleTime" in e["message"])
    assert len(spawned) <= 3 + lost, events
    assert crashes and all(e["by"] == "chaos_mesh" for e in crashes)
    assert sorted(e["node"] for e in rejoins) == sorted(e["node"] for e in crashes)
    assert summary["churn"]["crashes"] == len(crashes)
    assert summary["hit_ratio"] >= 0.99
    assert wait_gone(api, summary["run_id"]) == []
    custom = client.CustomObjectsApi(api)
    for plural in ("schedules", "podchaos"):
        assert custom.list_namespaced_custom_object("chaos-mesh.org", "v1alpha1", "default", plural)["items"] == []


def test_a_chaos_mesh_partition_keeps_events_on_their_side_until_it_heals(api, spark, chaos_mesh, tmp_path):
    """NetworkChaos partition (iptables and ipset in the pods' network namespaces): from the time
    Chaos Mesh reports the rules in place until the controller lifts them, no event crosses
    between pods 0-3 and the rest; before it every subscriber gets every event, and after it
    each part of the overlay still reaches itself. (Across the healed cut the gossip baseline
    stays split: its CYCLON views lose their links to the other side during a 40 s cut, in `sim`
    and `local` too, and a node whose view emptied may have refilled it with the other side's
    nodes and gone over to that part; docs/kubernetes.md.) Read from the deliveries the
    analysis wrote and the final snapshot."""
    summary, timeline = run_and_summarise(spark, tmp_path, "experiments/k8s-cluster-partition.yaml")
    run_dir = tmp_path / summary["run_id"]
    at = {e["kind"]: e["t_ns"] for e in timeline if e.get("fault") == "partition"}
    on, injected, off, recovered = (at[k] for k in ("fault_on", "chaos_injected", "fault_off", "chaos_recovered"))
    s = 1_000_000_000
    # Chaos Mesh takes 3-13 s to report the rules in place here, and took over 19 s once in CI
    # (so the cut lasts 40 s): what it must hold is the events sent while it stood, counted below
    assert on < injected < off < recovered
    took = f"Chaos Mesh took {(injected - on) / s:.1f} s of the {(off - on) / s:.0f} s cut to inject"
    events = {r["event_id"]: r for r in pq.read_table(run_dir / "metrics" / "events.parquet").to_pylist()}
    deliveries = pq.read_table(run_dir / "metrics" / "deliveries.parquet").to_pylist()
    cut = {0, 1, 2, 3}
    def across(r):
        return (events[r["event_id"]]["publisher"] in cut) != (r["node"] in cut)

    crossing = [r for r in deliveries if across(r)]
    sent_during = [r for r in crossing if injected <= events[r["event_id"]]["t0_ns"] < off]
    assert len(sent_during) >= 20, took
    # A copy crosses when an event first reaches the other side. One that crossed before the
    # rules were in place may still spread over that side during the cut (the shuffle repair
    # hands it on seconds later; measured in CI: 7.2 s), so the cut is judged by each event's
    # first arrival on the side it was not published on. (Every node subscribes to both topics:
    # the deliveries list every node but the publisher.)
    first_across: dict[str, float] = {}
    for r in crossing:
        if r["delivered"]:
            at_ns = events[r["event_id"]]["t0_ns"] + r["latency_ms"] * 1e6
            first_across[r["event_id"]] = min(at_ns, first_across.get(r["event_id"], at_ns))
    crossed_during = {e: at_ns for e, at_ns in first_across.items() if injected <= at_ns < off}
    assert crossed_during == {}, took
    before = [r for r in deliveries if events[r["event_id"]]["t0_ns"] < on]
    assert len(before) >= 100 and all(r["delivered"] for r in before)
    part = overlay_parts(run_dir)
    # a link carries again within a connect attempt (3 s) and the reconnect backoff (1 s) of the heal
    heal_s = TransportSettings().connect_timeout_ms / 1000 + 2
    after = [r for r in deliveries if r["node"] in part[events[r["event_id"]]["publisher"]]
             and events[r["event_id"]]["t0_ns"] >= recovered + heal_s * s]
    assert len(after) >= 100 and sum(r["delivered"] for r in after) >= 0.95 * len(after)
    assert wait_gone(api, summary["run_id"]) == []


def overlay_parts(run_dir) -> dict[int, frozenset[int]]:
    """Each node's connected part of the overlay in the run's final snapshot (links undirected)."""
    rows = [r for s in snapshots(run_dir) for r in s.rows]
    last = max(r["t_ns"] for r in rows)
    g = nx.Graph()
    for r in rows:
        if r["t_ns"] == last:
            g.add_node(r["node"])
            g.add_edges_from((r["node"], q) for q in r["neighbours"])
    return {n: frozenset(c) for c in nx.connected_components(g) for n in c}


def test_chaos_mesh_itself_fails_to_apply_a_netem_delay_on_this_kernel(api, chaos_mesh):
    """Why the runner refuses netem faults here: a NetworkChaos delay created directly (no
    overlaylab run) on one pod; Chaos Mesh reports the injection failed, and why."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "delay-target", "labels": {"chaos": "delay-target"}},
           "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "c", "image": "overlaylab:0.1.0", "imagePullPolicy": "Never",
                                    "command": ["sleep", "600"], "securityContext": {
                                        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}
    chaos = {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "NetworkChaos", "metadata": {"name": "netem-delay"},
             "spec": {"action": "delay", "mode": "all", "selector": {"labelSelectors": {"chaos": "delay-target"}},
                      "delay": {"latency": "10ms"}}}
    args = ("chaos-mesh.org", "v1alpha1", "default", "networkchaos")
    core.create_namespaced_pod("default", pod)
    try:
        deadline = time.monotonic() + 120
        while core.read_namespaced_pod("delay-target", "default").status.phase != "Running":
            assert time.monotonic() < deadline, "the target pod never ran"
            time.sleep(1)
        custom.create_namespaced_custom_object(*args, chaos)
        failed = []
        while not failed and time.monotonic() < deadline:
            status = custom.get_namespaced_custom_object(*args, "netem-delay").get("status") or {}
            failed = [e.get("message", "") for r in (status.get("experiment") or {}).get("containerRecords") or []
                      for e in r.get("events") or [] if e.get("type") == "Failed" and e.get("operation") == "Apply"]
            time.sleep(1)
        assert failed, "Chaos Mesh never reported the delay as failed"
        # chaos-daemon's tc fails: no netem queueing discipline in this kernel
        assert failed[0].endswith("unable to set tcs for pod delay-target"), failed[0]
    finally:
        try:
            custom.delete_namespaced_custom_object(*args, "netem-delay")
        except client.ApiException:
            pass
        core.delete_namespaced_pod("delay-target", "default", grace_period_seconds=0)


def test_netem_delay_is_refused_up_front_on_this_kernel_naming_what_is_missing(api, chaos_mesh, tmp_path):
    (node,) = client.CoreV1Api(api).list_node().items
    assert node.metadata.labels["overlaylab.io/netem"] == "absent"  # k8s/up.sh's probe: no sch_netem here
    pods_before = {p.metadata.name for p in client.CoreV1Api(api).list_namespaced_pod("default").items}
    done = overlaylab("run", "experiments/k8s-churn-delay.yaml", "--out", str(tmp_path), *sets())
    assert done.returncode == 2
    assert "netem queueing discipline (sch_netem), which node(s) node1 lack" in done.stdout + done.stderr
    assert {p.metadata.name for p in client.CoreV1Api(api).list_namespaced_pod("default").items} <= pods_before
