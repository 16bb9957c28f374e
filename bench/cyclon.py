"""`make bench-sim` (with bench/run.py and bench/sweep.py): CYCLON alone in PeerSim's setting
(experiments/cyclon-scale.yaml: view 20, shuffle 10, 20-out random start, 100 cycles), in
node-cycles per second, side by side in one invocation, written to bench/results/cyclon.json:

- 10,000 nodes in the compiled CYCLON loop (``sim.engine: native``) and in the Python cores
  of this tree (``python``), whose outputs must be byte-identical (SHA-256 of spans,
  snapshots, timeline and counters), and in the code of ``--baseline`` (default 399a43c, the
  commit the simulator-speed issue started from; its counters differ by design, as the
  gossip's shuffle repair lists the one publication's id);
- 100,000 nodes in the compiled loop, with its peak RSS.

Node-cycles per second = nodes x 100 cycles / the wall time of the whole ``overlaylab run
--no-analyze`` (start-up, set-up, the end's publication and the writing of the outputs
included), the way PeerSim's figure is timed. Each run is its own process; peak RSS from
``wait4``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from identity import FILES, run_case, worktree
from run import RESULTS, ROOT, header

EXPERIMENT = "experiments/cyclon-scale.yaml"
CYCLES = 100
BASELINE = "399a43c"


def case(tree: Path, nodes: int, engine: str | None, out: Path) -> dict:
    args = [EXPERIMENT, "--set", f"nodes.count={nodes}", *(["--set", f"sim.engine={engine}"] if engine else [])]
    r = run_case(tree, args, out)
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    meta = json.loads((run_dir / "run.json").read_text())
    r.update(nodes=nodes, command="overlaylab run " + " ".join(args) + " --no-analyze", sim_steps=meta["sim_steps"],
             sim_native_steps=meta.get("sim_native_steps", 0), node_cycles_per_s=round(nodes * CYCLES / r["wall_s"]))
    print(f"{nodes} nodes, {engine or 'baseline'}: {r['wall_s']} s, {r['node_cycles_per_s']} node-cycles/s, "
          f"{r['peak_rss_mib']} MiB", flush=True)
    return r


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare against (default: %(default)s)")
    args = parser.parse_args()
    baseline = subprocess.run(["git", "rev-parse", args.baseline], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout.strip()
    runs = {}
    with tempfile.TemporaryDirectory() as tmp, worktree(baseline) as base_tree:
        for label, tree, nodes, engine in [("native-10000", ROOT, 10_000, "native"),
                                           ("python-10000", ROOT, 10_000, "python"),
                                           ("baseline-10000", base_tree, 10_000, None),
                                           ("native-100000", ROOT, 100_000, "native")]:
            out = Path(tmp) / label
            out.mkdir()
            runs[label] = case(tree, nodes, engine, out)
    native, python = runs["native-10000"], runs["python-10000"]
    record = {
        **header("cyclon", f"{EXPERIMENT} ({CYCLES} cycles), --set nodes.count=N --set sim.engine=E"),
        "baseline": baseline,
        "node_cycles_per_s": {label: r["node_cycles_per_s"] for label, r in runs.items()},
        "peak_rss_mib": {label: r["peak_rss_mib"] for label, r in runs.items()},
        "speedup_10000": {"native_over_python": round(python["wall_s"] / native["wall_s"], 2),
                          "native_over_baseline": round(runs["baseline-10000"]["wall_s"] / native["wall_s"], 2)},
        "native_identical_to_python": {f: native["sha256"][f] == python["sha256"][f] for f in FILES},
        "runs": runs,
    }
    path = RESULTS / "cyclon.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("node_cycles_per_s", "speedup_10000", "native_identical_to_python")}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
