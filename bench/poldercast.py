"""`make bench-poldercast`: PolderCast E1 (experiments/poldercast-e1-convergence.yaml: 10,000
nodes, Twitter-like social workload, 60 cycles with a round of events on the frozen overlay
each cycle) in ``sim``, side by side in one invocation, written to
bench/results/poldercast-e1.json:

- the whole run (60 cycles) in the compiled PolderCast loop (``sim.engine: native``);
- its first 6 cycles (``publications.rounds=6``) in the compiled loop, in the Python cores of
  this tree (``python``), whose outputs must be byte-identical (SHA-256 of spans, snapshots,
  timeline and counters), and in the code of ``--baseline`` (default 399a43c, the commit the
  simulator-speed issue started from, whose runs differ by design: the age rules and ring
  selection changed since);
- with ``--baseline-full``, the baseline's whole run too (about an hour here).

Node-cycles per second = nodes x cycles / the wall time of the whole ``overlaylab run
--no-analyze``. Each run is its own process; peak RSS from ``wait4``.
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

EXPERIMENT = "experiments/poldercast-e1-convergence.yaml"
NODES, CYCLES, SLICE = 10_000, 60, 6
BASELINE = "399a43c"


def case(tree: Path, cycles: int, engine: str | None, out: Path) -> dict:
    args = [EXPERIMENT, *(["--set", f"publications.rounds={cycles}"] if cycles != CYCLES else []),
            *(["--set", f"sim.engine={engine}"] if engine else [])]
    r = run_case(tree, args, out)
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    meta = json.loads((run_dir / "run.json").read_text())
    r.update(cycles=cycles, command="overlaylab run " + " ".join(args) + " --no-analyze", sim_steps=meta["sim_steps"],
             sim_native_steps=meta.get("sim_native_steps", 0), node_cycles_per_s=round(NODES * cycles / r["wall_s"]))
    print(f"{cycles} cycles, {engine or 'baseline'}: {r['wall_s']} s, {r['node_cycles_per_s']} node-cycles/s, "
          f"{r['peak_rss_mib']} MiB", flush=True)
    return r


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare against (default: %(default)s)")
    parser.add_argument("--baseline-full", action="store_true", help="run the baseline's whole E1 too (an hour)")
    args = parser.parse_args()
    baseline = subprocess.run(["git", "rev-parse", args.baseline], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout.strip()
    cases = [("native-60", ROOT, CYCLES, "native"), ("native-6", ROOT, SLICE, "native"),
             ("python-6", ROOT, SLICE, "python"), ("baseline-6", None, SLICE, None)]
    if args.baseline_full:
        cases.append(("baseline-60", None, CYCLES, None))
    runs = {}
    with tempfile.TemporaryDirectory() as tmp, worktree(baseline) as base_tree:
        for label, tree, cycles, engine in cases:
            out = Path(tmp) / label
            out.mkdir()
            runs[label] = case(tree or base_tree, cycles, engine, out)
    native, python = runs["native-6"], runs["python-6"]
    identical = {name: native["sha256"][name] == python["sha256"][name] for name in FILES}
    record = {
        **header("poldercast-e1", EXPERIMENT),
        "baseline": baseline,
        "runs": runs,
        "native_python_identical": identical,
        "ratio_native_to_python_6": round(native["wall_s"] / python["wall_s"], 3),
        "ratio_native_to_baseline_6": round(native["wall_s"] / runs["baseline-6"]["wall_s"], 3),
        **({"ratio_native_to_baseline_60": round(runs["native-60"]["wall_s"] / runs["baseline-60"]["wall_s"], 3)}
           if "baseline-60" in runs else {}),
    }
    path = RESULTS / "poldercast-e1.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")
    if not all(identical.values()):
        raise SystemExit(f"the compiled loop's run differs from the Python cores': {identical}")


if __name__ == "__main__":
    main()
