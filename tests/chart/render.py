"""Render the chart for every ci/ scenario: ``python -m tests.chart.render [--write]``.

A scenario is ``helm/overlaylab/ci/<name>-values.yaml`` (made by ``overlaylab helm-values`` from
``experiments/k8s-<name>.yaml``); its golden render is ``helm/overlaylab/examples/<name>/rendered.yaml``.
The release name is the one the k8s runner would use for the scenario's run id.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from controller.backends.helm import CHART
from controller.backends.hosting import release_name
from controller.backends.k8s import helm_binary

NAMESPACE = "overlaylab"


def scenarios() -> dict[str, Path]:
    return {p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*-values.yaml"))}


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([helm_binary(), *args], capture_output=True, text=True)


GENERATED = re.compile(r"^(  (?:(?:ca|peer|controller|loadgen)\.(?:pem|key)|token): )\S+$", re.M)
"""The run's certificates, keys and web token, which Helm generates anew at every render."""
PLACEHOLDER = "R0VORVJBVEVECg=="  # base64 of "GENERATED"


def render(values: Path, *extra: str, normalize: bool = True) -> str:
    """``helm template`` of a values file; ``normalize``: generated certificates replaced by a
    placeholder (golden renders stay stable)."""
    run_id = yaml.safe_load(values.read_text())["runId"]
    done = helm("template", release_name(run_id), str(CHART), "-f", str(values), "--namespace", NAMESPACE, *extra)
    if done.returncode:
        raise RuntimeError(f"helm template {values.name}: {done.stderr}")
    return GENERATED.sub(lambda m: m[1] + PLACEHOLDER, done.stdout) if normalize else done.stdout


def golden(name: str) -> Path:
    return CHART / "examples" / name / "rendered.yaml"


if __name__ == "__main__":
    for name, values in scenarios().items():
        text = render(values)
        if "--write" in sys.argv:
            golden(name).parent.mkdir(parents=True, exist_ok=True)
            golden(name).write_text(text)
        print(f"{name}: {len(list(yaml.safe_load_all(text)))} objects")
