"""The container image, for real (`make test-image`; CI runs it after `make test`): build a base
with debootstrap (no registry can be pulled here), build the image on it with `make image`, then
run the quickstart with 8 peer containers (4 nodes each) and a controller container on a docker
network, the same commands the chart's pods run, and analyse the run on the host.
Needs root, a running dockerd and debootstrap (.ci/run installs and starts them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import pytest

from controller.experiment.schema import dump_experiment, load_experiment
from tests.conftest import ROOT

BASE, IMAGE = "overlaylab-base:bookworm", "overlaylab:test"
RELEASE = "ovl-img"


def sh(*cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


@pytest.fixture(scope="module")
def image():
    sh(str(ROOT / "scripts" / "debootstrap_base.sh"), BASE)
    sh("make", "image", f"BASE_IMAGE={BASE}", f"IMAGE={IMAGE}", cwd=ROOT)
    return IMAGE


@pytest.fixture
def network():
    name = f"ovl-test-{uuid.uuid4().hex[:8]}"
    sh("docker", "network", "create", name)
    started: list[str] = []
    yield name, started
    for c in started:
        subprocess.run(["docker", "rm", "-f", c], capture_output=True)
    subprocess.run(["docker", "network", "rm", name], capture_output=True)


def test_quickstart_on_eight_peer_containers_reaches_every_subscriber(image, network, tmp_path):
    net, started = network
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)  # the containers run as uid 10001
    exp = load_experiment(ROOT / "experiments" / "quickstart.yaml", ["backend=k8s", "k8s.peers_per_pod=4"])
    (results / "experiment.yaml").write_text(dump_experiment(exp))
    run_id = "quickstart-containers"
    common = ["/results/experiment.yaml", "--release", RELEASE, "--domain", ""]
    volume = ["-v", f"{results}:/results"]
    for k in range(exp.nodes.count // 4):
        pod = f"{RELEASE}-peer-{k}"
        sh("docker", "run", "-d", "--name", pod, "--network", net, *volume, image,
           "peer", *common, "--pod", pod, "--run-id", run_id, "--trace-dir", f"/results/{run_id}/traces")
        started.append(pod)
    assert len(started) == 8
    controller = f"{RELEASE}-controller"
    started.append(controller)
    done = subprocess.run(["docker", "run", "--name", controller, "--network", net, *volume, image,
                           "drive", *common, "--run-id", run_id, "--out", "/results", "--no-kube"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    for c in started[:-1]:  # SIGTERM: the peers flush their traces
        sh("docker", "stop", "-t", "20", c)
    run_dir = results / run_id
    assert len(list((run_dir / "traces").glob("node-*.jsonl"))) == exp.nodes.count
    analyzed = subprocess.run([str(ROOT / ".venv" / "bin" / "overlaylab"), "analyze", str(run_dir)],
                              capture_output=True, text=True, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert analyzed.returncode == 0, analyzed.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["events"] == exp.publications.count
    assert summary["hit_ratio"] == 1.0
    assert summary["spans"]["dropped"] == 0 and summary["spans"]["publish"] == exp.publications.count


def test_the_simulator_in_the_image_runs_the_compiled_cyclon_loop_where_it_was_built(image):
    """`make image` builds the compiled CYCLON loop on the host where cargo is present; the
    image then simulates CYCLON with it (the same output as its Python loop)."""
    script = ("d=$(mktemp -d) && overlaylab run experiments/cyclon-scale.yaml --set nodes.count=300"
              " --set phases.warmup_s=5 --out $d --no-analyze >/dev/null && cat $d/*/run.json")
    meta = json.loads(sh("docker", "run", "--rm", "--entrypoint", "sh", image, "-c", script).stdout)
    native_steps = meta["sim_native_steps"]
    assert (native_steps > 0) == bool(shutil.which("cargo"))
