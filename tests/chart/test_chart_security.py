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


def pod_templates(objs: list[dict]) -> list[tuple[str, dict]]:
    """(name, labels) of every pod the rendered objects make."""
    out = []
    for o in objs:
        if o["kind"] == "Pod":
            out.append((o["metadata"]["name"], o["metadata"]["labels"]))
        elif o["kind"] in ("Deployment", "StatefulSet", "Job"):
            out.append((o["metadata"]["name"], o["spec"]["template"]["metadata"]["labels"]))
    return out


def selects(policy: dict, labels: dict) -> bool:
    sel = policy["spec"]["podSelector"]
    return all(labels.get(k) == v for k, v in sel.get("matchLabels", {}).items()) and \
        all(labels.get(e["key"]) in e["values"] for e in sel.get("matchExpressions", []))


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_pod_has_ingress_and_egress_policies_and_egress_goes_only_where_it_must(name):
    objs = [o for o in yaml.safe_load_all(render(SCENARIOS[name])) if o]
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    for pod, labels in pod_templates(objs):
        for kind in ("Ingress", "Egress"):
            assert any(kind in p["spec"]["policyTypes"] and selects(p, labels) for p in policies), (pod, kind)
    for p in policies:
        for rule in p["spec"].get("egress", []):
            ports = {(x["protocol"], x["port"]) for x in rule["ports"]}
            # a rule open to every address is DNS, or the API server's ports (no CIDRs given)
            assert "to" in rule or ports <= {("UDP", 53), ("TCP", 53)} or ports <= {("TCP", 443), ("TCP", 6443)}, (p["metadata"]["name"], rule)
