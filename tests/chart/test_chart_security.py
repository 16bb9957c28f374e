"""The rendered chart against two scanners: upstream's Pod Security admission evaluator
(``k8s/psa``, level restricted) and checkov (skips explained in ``helm/overlaylab/checkov.yaml``)."""

import json
import re
import subprocess

import pytest
import yaml

from controller.backends.helm import CHART
from tests.chart.render import render, scenarios
from tests.conftest import ROOT

SCENARIOS = scenarios()
PSA_CHECK = ROOT / ".cache" / "psa-check"
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"


def psa_check(manifests: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PSA_CHECK), "--level", "restricted", "--version", "latest"], input=manifests,
                          capture_output=True, text=True)


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_workload_passes_the_restricted_pod_security_standard(name):
    done = psa_check(render(SCENARIOS[name]))
    assert done.returncode == 0, done.stdout + done.stderr
    workloads = int(re.search(r"(\d+) workloads checked", done.stdout)[1])
    assert workloads >= (3 if name == "sweep" else 4)  # a sweep: results server, the points' Job, helm test


def test_the_pod_security_check_fails_a_container_that_may_escalate():
    text = render(SCENARIOS["smoke"]).replace("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true")
    done = psa_check(text)
    assert done.returncode == 1 and "allowPrivilegeEscalation" in done.stdout


def checkov(path) -> dict:
    done = subprocess.run([str(CHECKOV), "--config-file", str(CHART / "checkov.yaml"), "-d", str(path),
                           "--quiet", "--compact", "-o", "json"], capture_output=True, text=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", SCENARIOS)
def test_checkov_finds_nothing_beyond_the_explained_skips(name, tmp_path):
    (tmp_path / "rendered.yaml").write_text(render(SCENARIOS[name]))
    report = checkov(tmp_path)
    failed = [(f["check_id"], f["resource"]) for f in report["results"].get("failed_checks", [])]
    assert failed == [] and report["summary"]["passed"] > 100
    skipped = set(yaml.safe_load((CHART / "checkov.yaml").read_text())["skip-check"])
    assert {f["check_id"] for f in report["results"].get("skipped_checks", [])} <= skipped


def test_checkov_fails_a_container_running_privileged(tmp_path):
    text = render(SCENARIOS["smoke"]).replace("allowPrivilegeEscalation: false", "privileged: true")
    (tmp_path / "rendered.yaml").write_text(text)
    failed = {f["check_id"] for f in checkov(tmp_path)["results"].get("failed_checks", [])}
    assert "CKV_K8S_16" in failed  # privileged containers
