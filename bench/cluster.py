"""`make bench-cluster` (root): how long the real-cluster tier takes to build and start, into
bench/results/cluster.json.

- cold build: k8s/build.sh with empty Go module and build caches and no binaries (everything
  downloaded from the module proxy and compiled), in temporary cache directories;
- warm build: the same with this machine's caches kept (only the binaries removed), what a
  second CI run on the same machine pays;
- cluster start: k8s/up.sh with the images imported, until the node is Ready; and teardown.

Side by side in one invocation (the machine is shared and noisy): compare the ratios.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BIN = ROOT / ".cache" / "k8s" / "v1.34.4" / "bin"
IMAGES = "overlaylab:0.1.0 overlaylab/otelcol:0.165.0"


def timed(cmd: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, **(env or {})},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return round(time.perf_counter() - start, 1)


def build(env: dict | None = None) -> float:
    keep = Path(tempfile.mkdtemp()) / "bin"
    shutil.move(BIN, keep)  # kept aside, so a failed build leaves the working binaries
    try:
        return timed(["k8s/build.sh"], env)
    except subprocess.CalledProcessError:
        shutil.rmtree(BIN, ignore_errors=True)
        shutil.move(keep, BIN)
        raise


def builds(cold: float, warm: float) -> dict:
    """The machine and the two build times, as both cluster-tier benchmarks report them."""
    return {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "cold_build_s": cold, "warm_build_s": warm, "cold_over_warm": round(cold / warm, 1)}


def write(name: str, result: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def main() -> None:
    with tempfile.TemporaryDirectory() as caches:
        cold = build({"GOCACHE": f"{caches}/build", "GOMODCACHE": f"{caches}/mod", "GOFLAGS": "-modcacherw"})
    warm = build()
    subprocess.run(["k8s/images.sh"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    up = timed(["k8s/up.sh"], {"IMAGES": IMAGES})
    down = timed(["k8s/down.sh"])
    result = {
        "what": "k8s 1.34.4 control plane, kubelet, kube-proxy, etcd 3.6.4, CoreDNS 1.14.7, pause, otelcol 0.165.0",
        **builds(cold, warm),
        "cluster_up_s": up,
        "cluster_down_s": down,
        "note": "cluster_up_s includes importing the 2.2 GB overlaylab image into containerd",
    }
    write("cluster.json", result)


if __name__ == "__main__":
    main()
