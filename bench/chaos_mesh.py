"""`make bench-chaos-mesh` (root): how long Chaos Mesh takes to build and to install on the real
cluster, into bench/results/chaos-mesh.json.

- cold build: k8s/chaos-mesh/build.sh with empty Go module and build caches and nothing built
  (everything downloaded from the module proxy and compiled, the CRDs generated), in temporary
  cache directories;
- warm build: the same with this machine's caches kept (only what it built removed);
- install (k8s/chaos-mesh/up.sh, until the controller-manager and chaos-daemon are ready) and
  removal (down.sh), on a cluster k8s/up.sh starts for the purpose and stops afterwards.

Side by side in one invocation (the machine is shared and noisy): compare the ratios.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from cluster import IMAGES, ROOT, builds, timed, write  # bench/cluster.py, beside this file

GO_MOD = ROOT / "k8s" / "chaos-mesh" / "go.mod"


def version() -> str:
    return re.search(r"^require github.com/chaos-mesh/chaos-mesh (\S+)$", GO_MOD.read_text(), re.M)[1]


def build(env: dict | None = None) -> float:
    built = ROOT / ".cache" / "chaos-mesh" / version().rsplit("-", 1)[1]  # binaries, chart, CRDs
    keep = Path(tempfile.mkdtemp()) / "built"
    shutil.move(built, keep)  # kept aside, so a failed build leaves the working ones
    try:
        return timed(["k8s/chaos-mesh/build.sh"], env)
    except Exception:
        shutil.rmtree(built, ignore_errors=True)
        shutil.move(keep, built)
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
    write("chaos-mesh.json", {
        "what": f"Chaos Mesh {version()}: chaos-controller-manager, chaos-daemon, cdh, pause, CRDs, both images",
        **builds(cold, warm),
        "install_s": up,
        "remove_s": down,
        "note": "the builds include the images; install_s includes importing them into containerd and helm --wait",
    })


if __name__ == "__main__":
    main()
