"""`make bench-chaos-mesh` (root): how long Chaos Mesh takes to build and to install on the real
cluster, into bench/results/chaos-mesh.json.

- cold build: k8s/chaos-mesh/build.sh with empty Go module and build caches and no binaries
  (everything downloaded from the module proxy and compiled), in temporary cache directories;
- warm build: the same with this machine's caches kept (only the binaries removed);
- install (k8s/chaos-mesh/up.sh, until the controller-manager and chaos-daemon are ready) and
  removal (down.sh), on a cluster k8s/up.sh starts for the purpose and stops afterwards.

Side by side in one invocation (the machine is shared and noisy): compare the ratios.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import tempfile
from pathlib import Path

from cluster import IMAGES, RESULTS, ROOT, timed  # bench/cluster.py, beside this file

GO_MOD = ROOT / "k8s" / "chaos-mesh" / "go.mod"


def version() -> str:
    return re.search(r"^require github.com/chaos-mesh/chaos-mesh (\S+)$", GO_MOD.read_text(), re.M)[1]


def build(env: dict | None = None) -> float:
    binaries = ROOT / ".cache" / "chaos-mesh" / version().rsplit("-", 1)[1] / "bin"
    keep = Path(tempfile.mkdtemp()) / "bin"
    shutil.move(binaries, keep)  # kept aside, so a failed build leaves the working binaries
    try:
        return timed(["k8s/chaos-mesh/build.sh"], env)
    except Exception:
        shutil.rmtree(binaries, ignore_errors=True)
        shutil.move(keep, binaries)
        raise


def main() -> None:
    with tempfile.TemporaryDirectory() as caches:
        cold = build({"GOCACHE": f"{caches}/build", "GOMODCACHE": f"{caches}/mod", "GOFLAGS": "-modcacherw"})
    warm = build()
    timed(["k8s/up.sh"], {"IMAGES": IMAGES})
    try:
        up = timed(["k8s/chaos-mesh/up.sh"])
        down = timed(["k8s/chaos-mesh/down.sh"])
    finally:
        timed(["k8s/down.sh"])
    result = {
        "what": f"Chaos Mesh {version()}: chaos-controller-manager, chaos-daemon, cdh, pause, both images",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "cold_build_s": cold,
        "warm_build_s": warm,
        "cold_over_warm": round(cold / warm, 1),
        "install_s": up,
        "remove_s": down,
        "note": "the builds include the images; install_s includes importing them into containerd and helm --wait",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "chaos-mesh.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
