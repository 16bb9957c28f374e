"""`make bench-sim` (part): a sweep's speed-up from running its points in parallel.

Runs the 8 points of experiments/sweep-gossip-gamma.yaml (sim, without the analysis) one at a
time and then ``os.cpu_count()`` at a time, in the same invocation, and records both wall times
and their ratio in bench/results/sweep.json.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import RESULTS, header, timed

EXPERIMENT = "experiments/sweep-gossip-gamma.yaml"


def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    walls = {}
    with tempfile.TemporaryDirectory() as tmp:
        for parallel in (1, cores):
            r = timed([sys.executable, "-m", "controller.cli.main", "sweep", EXPERIMENT, "--no-analyze",
                       "--parallel", str(parallel), "--out", str(Path(tmp) / str(parallel))])
            [sweep_dir] = (Path(tmp) / str(parallel)).iterdir()
            record = json.loads((sweep_dir / "sweep.json").read_text())
            assert all(p["rc"] == 0 for p in record["points"]), record["points"]
            walls[parallel] = {"wall_s": r["wall_s"], "cpu_s": r["cpu_s"], "points": len(record["points"]),
                               "point_wall_s": [p["wall_s"] for p in record["points"]]}
            print(f"sweep, {parallel} at a time: {r['wall_s']} s", flush=True)
    out = {**header("sweep", f"overlaylab sweep {EXPERIMENT} --no-analyze --parallel P"),
           "runs": {str(p): w for p, w in walls.items()},
           "speedup": round(walls[1]["wall_s"] / walls[cores]["wall_s"], 2)}
    (RESULTS / "sweep.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"speed-up on {cores} cores: {out['speedup']}x; wrote {RESULTS / 'sweep.json'}")


if __name__ == "__main__":
    main()
