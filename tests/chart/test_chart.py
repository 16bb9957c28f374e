"""The chart, verified by rendering (`make chart-check`): helm lint, helm template of every ci/
scenario, every object valid for Kubernetes (kubernetes-validate --strict) or for Chaos Mesh's
CRD schema, renders equal to the goldens, values and schema in sync with the experiment files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controller.backends.helm import CHART, helm_values, split_image, sweep_values, values_schema
from controller.backends.hosting import pod_layout, release_name
from controller.cli.sweep import points
from controller.experiment import plans
from controller.experiment.schema import ExperimentError, data_dir, load_experiment
from node.kit import builtin_protocols
from tests.chart.render import NAMESPACE, golden, helm, render, scenarios
from tests.k8s_schemas import validate

SCENARIOS = scenarios()


def objects(text: str) -> list[dict]:
    return [o for o in yaml.safe_load_all(text) if o]


def test_scenarios_cover_smoke_scale_and_churn_with_delay():
    assert {"smoke", "1000", "churn-delay"} <= set(SCENARIOS)


def test_helm_lint_passes_for_every_scenario():
    for values in SCENARIOS.values():
        done = helm("lint", "--strict", str(CHART), "-f", str(values))
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_rendered_objects_are_valid_and_equal_the_golden(name):
    text = render(SCENARIOS[name])
    kinds = []
    for obj in objects(text):
        kinds.append(obj["kind"])
        validate(obj)
        assert obj["metadata"]["labels"]["overlaylab.io/run-id"] == yaml.safe_load(SCENARIOS[name].read_text())["runId"]
    if name == "sweep":  # the points as one Indexed Job beside the results server; no peers, no controller
        assert {"Job", "Deployment", "ConfigMap", "PersistentVolumeClaim"} <= set(kinds)
        assert not {"StatefulSet", "Role", "RoleBinding"} & set(kinds)
        [job] = [o for o in objects(text) if o["kind"] == "Job"]
        assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 4
        assert job["spec"]["parallelism"] == 2 and job["spec"]["backoffLimitPerIndex"] == 0
    else:
        assert {"StatefulSet", "Service", "Job", "Deployment", "Role", "RoleBinding", "ConfigMap"} <= set(kinds)
    assert text == golden(name).read_text(), f"render of {name} changed: run `make chart-render` and review the diff"


def test_ci_values_are_what_helm_values_renders_from_the_experiment_files():
    for name, values in SCENARIOS.items():
        file = f"experiments/k8s-{name}.yaml"
        exp = load_experiment(file)
        if exp.sweep.grid:
            base, todo = points(file)
            expected, flag = sweep_values(base, f"ci-{name}", len(todo), base.sweep.parallel or 1), " --sweep"
        else:
            expected, flag = helm_values(exp, plans.render(exp), f"ci-{name}"), ""
        assert values.read_text() == expected, \
            f"ci/{values.name} is stale: overlaylab helm-values {file} --run-id ci-{name}{flag}"


@pytest.mark.parametrize("path", sorted(Path("experiments").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_experiment_file_renders_into_values_the_chart_accepts(path, tmp_path):
    """`overlaylab helm-values` of every file (as a k8s run: backend k8s, fresh rejoins, no sim
    variants, one network) passes the chart's own schema and templates in `helm template`, the validator
    users meet first."""
    if "data:" in path.read_text() and not data_dir().is_dir():
        pytest.skip(f"{path.name} reads data files and {data_dir()} is absent (set OVERLAYLAB_DATA_DIR)")
    overrides = ["backend=k8s", "churn.rejoin=fresh", "sim.variants=[]", "sim.networks=1"]
    as_written = load_experiment(path)
    if as_written.protocol.name not in builtin_protocols():  # a plugin (the toy protocol): not in the image
        with pytest.raises(ExperimentError, match="image carries the built-in protocols only"):
            helm_values(load_experiment(path, overrides), plans.render(as_written), "r1")
        return
    if as_written.nodes.contacts == "all" and as_written.nodes.count > 257:
        with pytest.raises(ExperimentError, match="nodes.contacts: all .* at most 257 nodes"):
            load_experiment(path, overrides)  # every node to every node: too many contacts for a join
        overrides.append("nodes.count=257")
    exp = load_experiment(path, overrides)
    values = tmp_path / "values.yaml"
    values.write_text(helm_values(exp, plans.render(exp), "r1"))
    done = helm("template", "r1", str(CHART), "-f", str(values), "--namespace", NAMESPACE)
    assert done.returncode == 0, done.stderr[:2000]


def test_a_sweep_of_simulations_with_churn_renders(tmp_path):
    """A sweep's values carry no plan: churn that keeps state across rejoins (which pods cannot)
    is fine for simulations swept as an Indexed Job."""
    exp = load_experiment("experiments/churn-sessions.yaml", ["backend=sim", "churn.rejoin=resume"])
    values = tmp_path / "values.yaml"
    values.write_text(sweep_values(exp, "r1", 3, 2))
    done = helm("template", "r1", str(CHART), "-f", str(values), "--namespace", NAMESPACE)
    assert done.returncode == 0, done.stderr[:2000]
    [job] = [o for o in objects(done.stdout) if o["kind"] == "Job"]
    assert job["metadata"]["name"] == "r1-sweep" and job["spec"]["completions"] == 3


def test_values_schema_is_generated_from_the_experiment_schema():
    on_disk = json.loads((CHART / "values.schema.json").read_text())
    assert on_disk == values_schema(), "values.schema.json is stale: run `make chart-schema`"


def test_pods_and_their_nodes_match_the_layout_the_python_side_computes():
    values = yaml.safe_load(SCENARIOS["churn-delay"].read_text())
    exp = load_experiment("experiments/k8s-churn-delay.yaml")
    layout = pod_layout(exp, plans.render(exp), release_name(values["runId"]))
    sets = {o["metadata"]["name"]: o for o in objects(render(SCENARIOS["churn-delay"])) if o["kind"] == "StatefulSet"}
    assert sets[f"{layout.release}-peer"]["spec"]["replicas"] == len(layout.peer_pods)
    assert sets[f"{layout.release}-churner"]["spec"]["replicas"] == len(layout.churner_pods) > 0
    assert all(s["spec"]["serviceName"] == layout.service for s in sets.values())
    # every churning node has a pod of its own, so deleting it crashes that node only
    assert sorted(n for pod in layout.churner_pods for n in pod) == sorted({e.node for e in plans.render(exp).churn.events})


@pytest.mark.parametrize("mode", ["unary", "stream"])
def test_a_pods_nodes_share_its_one_peer_port_with_streamed_links(mode):
    exp = load_experiment("experiments/k8s-cluster-churn.yaml", [f"transport.mode={mode}"])
    layout = pod_layout(exp, plans.render(exp), "ovl-test")
    peer, control = layout.addrs(), layout.addrs(control=True)
    shared = [(pod, nodes) for pod, nodes in layout.pods().items() if len(nodes) > 1]
    assert shared
    for pod, nodes in shared:
        ports = [int(peer[n].rsplit(":", 1)[1]) for n in nodes]
        assert ports == ([layout.port] * len(nodes) if mode == "stream" else [layout.port + k for k in range(len(nodes))])
        assert [int(control[n].rsplit(":", 1)[1]) for n in nodes] == [layout.control_port + k for k in range(len(nodes))]
        assert all(peer[n].startswith(pod) for n in nodes)


def test_chaos_objects_follow_the_network_plan_and_probes_outlast_the_delay():
    objs = objects(render(SCENARIOS["churn-delay"]))
    chaos = {o["spec"]["action"]: o for o in objs if o["kind"] == "NetworkChaos"}
    assert chaos["delay"]["spec"]["delay"] == {"latency": "50ms", "jitter": "10ms", "correlation": "0"}
    assert chaos["loss"]["spec"]["loss"]["loss"] == "1"
    part = chaos["partition"]
    assert part["metadata"]["annotations"]["experiment.chaos-mesh.org/pause"] == "true"
    cut, others = part["spec"]["selector"]["pods"][NAMESPACE], part["spec"]["target"]["selector"]["pods"][NAMESPACE]
    peers = {o["metadata"]["name"] for o in objs if o["kind"] == "StatefulSet"}
    assert len(cut) == 4 and not set(cut) & set(others) and len(cut) + len(others) == 48
    assert {p.rsplit("-", 1)[0] for p in cut + others} <= peers  # <statefulset>-<ordinal>
    probe = next(o for o in objs if o["kind"] == "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    assert probe["timeoutSeconds"] * 1000 > 2 * (50 + 10)


def test_churn_by_chaos_mesh_is_a_paused_pod_kill_schedule_on_the_churner_pods():
    objs = objects(render(SCENARIOS["pod-kill"]))
    (schedule,) = [o for o in objs if o["kind"] == "Schedule"]
    assert schedule["metadata"]["annotations"]["experiment.chaos-mesh.org/pause"] == "true"
    assert schedule["spec"]["type"] == "PodChaos" and schedule["spec"]["podChaos"]["action"] == "pod-kill"
    assert schedule["spec"]["podChaos"]["selector"]["labelSelectors"]["overlaylab.io/group"] == "churner"
    # the plan's crash rate over the measurement window
    exp = load_experiment("experiments/k8s-pod-kill.yaml")
    plan = plans.render(exp)
    crashes = sum(e.kind == "crash" for e in plan.churn.events)
    window = plan.end_s - exp.phases.drain_s - exp.phases.warmup_s
    assert schedule["spec"]["schedule"] == f"@every {round(window / crashes)}s"
    assert not [o for o in objs if o["kind"] == "NetworkChaos"]  # the peers emulate the network here
    role = next(o for o in objs if o["kind"] == "Role")
    assert any("schedules" in r["resources"] and "patch" in r["verbs"] for r in role["rules"])


def test_no_chaos_objects_when_the_peers_emulate_the_network():
    assert not [o for o in objects(render(SCENARIOS["smoke"])) if o["apiVersion"].startswith("chaos-mesh.org")]


@pytest.mark.parametrize("override, message", [
    ("experiment.nodes.count=-1", "/experiment/nodes/count"),
    ("experiment.nodez=3", "'nodez' not allowed"),
    ("peers.replicas=-2", "/peers/replicas"),
    ("experiment.backend=local", "experiment.backend must be k8s"),
])
def test_an_invalid_values_file_fails_naming_the_field(tmp_path, override, message):
    values = yaml.safe_load(SCENARIOS["smoke"].read_text())
    path, value = override.split("=")
    node = values
    *parents, leaf = path.split(".")
    for key in parents:
        node = node[key]
    node[leaf] = yaml.safe_load(value)
    bad = tmp_path / "bad-values.yaml"
    bad.write_text(yaml.safe_dump(values))
    done = helm("template", "x", str(CHART), "-f", str(bad))
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_a_plan_chaos_mesh_cannot_express_is_refused_before_rendering():
    exp = load_experiment("experiments/k8s-churn-delay.yaml", ["k8s.peers_per_pod=4", "network.partitions=[{start_s: 20, end_s: 30, nodes: [0, 1]}]"])
    with pytest.raises(ValueError, match="peers_per_pod: 1"):
        helm_values(exp, plans.render(exp), "x")
    exp = load_experiment("experiments/k8s-churn-delay.yaml", ["network.delay={model: geo}"])
    with pytest.raises(ValueError, match="network.delay"):
        helm_values(exp, plans.render(exp), "x")
    exp = load_experiment("experiments/k8s-churn-delay.yaml", ["churn.rejoin=resume"])
    with pytest.raises(ValueError, match="churn.rejoin: fresh"):
        helm_values(exp, plans.render(exp), "x")
    exp = load_experiment("experiments/k8s-pod-kill.yaml", ["churn.leave=graceful"])
    with pytest.raises(ValueError, match="churn_faults: controller"):
        helm_values(exp, plans.render(exp), "x")


@pytest.mark.parametrize("image, expected", [
    ("overlaylab:0.1.0", ("overlaylab", "0.1.0")),
    ("registry.local:5000/lab/overlaylab:2", ("registry.local:5000/lab/overlaylab", "2")),
    ("registry.local:5000/lab/overlaylab", ("registry.local:5000/lab/overlaylab", "latest")),
    ("overlaylab", ("overlaylab", "latest")),
])
def test_image_references_split_into_repository_and_tag(image, expected):
    assert split_image(image) == expected


def test_helm_values_cli_prints_values_the_chart_accepts(tmp_path):
    done = subprocess.run([sys.executable, "-m", "controller.cli.main", "helm-values", "experiments/quickstart.yaml",
                           "--set", "backend=k8s", "--run-id", "cli-test"], capture_output=True, text=True, check=True)
    values = tmp_path / "v.yaml"
    values.write_text(done.stdout)
    rendered = helm("template", release_name("cli-test"), str(CHART), "-f", str(values))
    assert rendered.returncode == 0, rendered.stderr
    assert yaml.safe_load(done.stdout)["experiment"]["nodes"]["count"] == 32
