"""The k8s runner at the HTTP level: the official client against a fake API server that validates
every request body against the Kubernetes and Chaos Mesh schemas (tests/fake_apiserver.py).
What this does not cover, a real cluster does (docs/kubernetes.md says which parts ran where)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from controller.backends import k8s
from controller.backends.rundir import RunDir
from controller.backends.sim import SimRunner
from controller.experiment.schema import ExperimentError, load_experiment
from tests.fake_apiserver import FakeAPIServer

NAMESPACE = "overlaylab"


@pytest.fixture(autouse=True)
def fast(monkeypatch):
    monkeypatch.setattr(k8s, "POLL_S", 0.01)
    monkeypatch.setattr(k8s, "SETTLE_S", 0.0)


def setup_run(tmp_path, experiment="experiments/k8s-churn-delay.yaml", **fake_args):
    exp = load_experiment(experiment, [f"k8s.namespace={NAMESPACE}", "outputs.analyze=false"])
    rd = RunDir.create(exp, tmp_path / "runs")
    volume = tmp_path / "volume"
    # What the controller Job would have left on the results volume: a run of the same plan.
    SimRunner().run(exp.model_copy(update={"backend": "sim"}), RunDir.create(exp, volume, run_id=rd.run_id))
    fake = FakeAPIServer(volume, **fake_args)
    cluster = k8s.Cluster(NAMESPACE, api_client=client.ApiClient(client.Configuration(host=fake.url)))
    return exp, rd, fake, cluster


def test_applies_every_object_waits_fetches_the_run_and_tears_down_by_run_id(tmp_path):
    exp, rd, fake, cluster = setup_run(tmp_path)
    try:
        k8s.K8sRunner(cluster).run(exp, rd)
    finally:
        fake.close()
    assert fake.rejected == []
    created = [path for method, path in fake.requests if method == "POST"]
    rendered = k8s.render_chart((rd.path / "helm-values.yaml").read_text(), "x", NAMESPACE)
    assert len(created) == len(rendered) and any("/networkchaos" in p for p in created)
    assert ("GET", "/api/v1/nodes") in fake.requests  # netem faults: no node is labelled without netem
    # the run directory came back through the Collector Service's proxy, next to the local files
    assert json.loads((rd.path / "run.json").read_text())["run_id"] == rd.run_id
    assert (rd.path / "traces" / "spans.parquet").exists() and (rd.path / "helm-values.yaml").exists()
    assert any("/services/" in p and p.endswith(f"/proxy/{rd.run_id}.tar.gz") for _, p in fake.requests)
    assert fake.objects == {}, f"left behind: {fake.kinds()}"


def test_the_run_is_fetched_once_the_results_service_has_an_endpoint(tmp_path):
    exp, rd, fake, cluster = setup_run(tmp_path, proxy_unavailable=3)
    try:
        k8s.K8sRunner(cluster).run(exp, rd)
    finally:
        fake.close()
    proxied = [p for _, p in fake.requests if p.endswith(f"/proxy/{rd.run_id}.tar.gz")]
    assert len(proxied) == 4 and (rd.path / "traces" / "spans.parquet").exists()


def test_a_failed_controller_job_reports_its_log_and_still_tears_down(tmp_path):
    exp, rd, fake, cluster = setup_run(tmp_path, job_outcome="failed")
    try:
        with pytest.raises(k8s.K8sError, match="controller Job failed"):
            k8s.K8sRunner(cluster).run(exp, rd)
    finally:
        fake.close()
    assert fake.objects == {}


def test_an_object_the_api_server_rejects_stops_the_run_and_leaves_nothing(tmp_path, monkeypatch):
    # The client checks built-in kinds itself; a custom object reaches the server as it is.
    exp, rd, fake, cluster = setup_run(tmp_path)
    render = k8s.render_chart

    def broken(*args):
        objects = render(*args)
        next(o for o in objects if o["kind"] == "NetworkChaos")["spec"]["delay"]["latencyy"] = "5ms"
        return objects

    monkeypatch.setattr(k8s, "render_chart", broken)
    try:
        with pytest.raises(client.ApiException) as err:
            k8s.K8sRunner(cluster).run(exp, rd)
    finally:
        fake.close()
    assert err.value.status == 422 and "latencyy" in err.value.body
    assert fake.objects == {}


def test_netem_faults_on_a_node_without_netem_are_refused_before_anything_is_created(tmp_path):
    exp, rd, fake, cluster = setup_run(tmp_path, node_labels={k8s.NETEM_LABEL: "absent"})
    try:
        with pytest.raises(ExperimentError, match=r"netem queueing discipline \(sch_netem\), which node\(s\) node1 lack"):
            k8s.K8sRunner(cluster).run(exp, rd)
    finally:
        fake.close()
    assert [m for m, _ in fake.requests if m == "POST"] == []


def test_chaos_mesh_faults_without_chaos_mesh_are_refused_before_anything_is_created(tmp_path):
    exp, rd, fake, cluster = setup_run(tmp_path, "experiments/k8s-cluster-pod-kill.yaml", chaos_mesh=False)
    try:
        with pytest.raises(ExperimentError, match="no chaos-mesh.org resources: install Chaos Mesh"):
            k8s.K8sRunner(cluster).run(exp, rd)
    finally:
        fake.close()
    assert [m for m, _ in fake.requests if m == "POST"] == []
