"""`make bench-identity`: this tree against a baseline commit, side by side in one invocation.

Runs the same ``sim`` experiments with the baseline's code and with this tree's (each its own
process, alternating, ``--repeat`` times), and reports for each: the SHA-256 of the files a run
writes (spans, snapshots, timeline, counters), whether they are byte-identical, and the wall
and CPU time (every run, and the ratio of the fastest of each side) and peak RSS of both. Used for refactors that must not change a run:

    python bench/identity.py --baseline <commit> [--repeat 2]

The baseline is checked out into a temporary git worktree and imported ahead of this tree
(each run's working directory is its tree: ``python -m`` puts it first on ``sys.path``), with
this tree's virtual environment but its own compiled loops (built from its tree where cargo is
present); each side runs its own tree's copy of the experiment file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import RESULTS, ROOT, header, timed

from controller.backends.rundir import output_digests

CASES = {
    "gossip-quickstart-1000": ["experiments/quickstart.yaml", "--backend", "sim", "--set", "nodes.count=1000"],
    "poldercast-e1-1000": ["experiments/poldercast-e1-convergence.yaml", "--set", "nodes.count=1000"],
    "cyclon-10000-20-cycles": ["experiments/cyclon-scale.yaml", "--set", "phases.warmup_s=20"],
    "poldercast-e1-2000-10-rounds": ["experiments/poldercast-e1-convergence.yaml", "--set", "nodes.count=2000",
                                     "--set", "publications.rounds=10"],
    "poldercast-e1-10000-6-rounds": ["experiments/poldercast-e1-convergence.yaml", "--set", "publications.rounds=6"],
    "stan-churn-100": ["experiments/stan-churn.yaml"],
    "spidercast-churn-300": ["experiments/spidercast-churn.yaml", "--set", "nodes.count=300"],
    "spidercast-degree-500": ["experiments/spidercast-degree.yaml", "--set", "nodes.count=500"],
    "dps-table1-1000": ["experiments/dps-table1.yaml", "--set", "nodes.count=1000", "--set", "publications.count=200"],
    "dps-crashes-300": ["experiments/dps-crashes.yaml", "--set", "nodes.count=300", "--set", "publications.count=60"],
    "dps-crashes-epidemic-repair-300": ["experiments/dps-crashes.yaml", "--set", "nodes.count=300",
                                        "--set", "publications.count=60", "--set", "protocol.params.comm=epidemic",
                                        "--set", "protocol.params.traversal=root",
                                        "--set", "protocol.params.repair_window_steps=50"],
    "dps-crashes-seed-backups-300": ["experiments/dps-crashes.yaml", "--set", "nodes.count=300",
                                     "--set", "publications.count=60", "--set", "protocol.params.seed_backups=2",
                                     "--set", "churn.phases.0.spare=[]"],
    "static-gossip-scalefree-1-network": ["experiments/gossip-scalefree.yaml", "--set", "sim.networks=1",
                                          "--set", "publications.count=20"],
    "poldercast-e5-churn-1000": ["experiments/poldercast-e5-churn.yaml", "--set", "nodes.count=1000",
                                 "--set", "churn.phases.0.nodes=200"],
}
FILES = ("traces/spans.parquet", "snapshots", "timeline.jsonl", "stats")
"""The outputs compared (``output_digests``: snapshots and counters by their rows, whatever their files' form)."""
CHECKED_RUN = """
import sys
from pathlib import Path
import controller, node
tree = Path(sys.argv.pop(1)).resolve()
for m in (controller, node):  # the code that runs must be the tree's own
    assert Path(m.__file__).resolve().is_relative_to(tree), (m.__file__, tree)
try:
    from controller.cli.main import main
except ImportError:  # a tree from before the CLI had a folder of its own
    from controller.cli import main
sys.argv[0] = "overlaylab"
main(["run", *sys.argv[1:]])
"""


@contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """``commit`` checked out in a temporary git worktree, removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)


def own_extension(tree: Path, into: Path) -> Path | None:
    """``tree``'s compiled loops (node/sim/native/) built and installed into ``into``, which goes
    ahead of the virtual environment's for that tree's runs: each side runs the loops its code
    was verified with. None where the tree has none or cargo is absent (its runs use Python's)."""
    if not (tree / "node/sim/native/Cargo.toml").exists() or not shutil.which("cargo"):
        return None
    wheels = into / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(tree / "node/sim/native")],
                   check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(into / "site"),
                    *map(str, wheels.glob("*.whl"))], check=True)
    return into / "site"


def run_case(tree: Path, args: list[str], out: Path, extension: Path | None = None) -> dict:
    path = f"{tree}:{extension}" if extension else str(tree)
    cmd = ["env", f"PYTHONPATH={path}", sys.executable, "-c", CHECKED_RUN, str(tree),
           str(tree / args[0]), *args[1:], "--out", str(out), "--no-analyze"]
    r = timed(cmd, cwd=tree)
    r.pop("stdout")
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    r["sha256"] = output_digests(run_dir)
    return r


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", required=True, help="commit to compare against")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="default: all")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    baseline = subprocess.run(["git", "rev-parse", args.baseline], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    current = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "node", "controller"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip())
    cases = {}
    with tempfile.TemporaryDirectory() as tmp, worktree(baseline) as base_tree:
        extensions = {"baseline": own_extension(base_tree, Path(tmp) / "baseline-native"), "current": None}
        for name in args.case or sorted(CASES):
            runs: dict[str, list[dict]] = {"baseline": [], "current": []}
            for k in range(args.repeat):
                for label, tree in (("baseline", base_tree), ("current", ROOT)):
                    out = Path(tmp) / f"{name}-{label}-{k}"
                    out.mkdir()
                    runs[label].append(run_case(tree, CASES[name], out, extensions[label]))
                    print(f"{name} {label} #{k}: {runs[label][-1]['wall_s']} s", flush=True)
            # the fastest of the repeats: the run the shared machine disturbed least
            wall = {label: min(r["wall_s"] for r in rs) for label, rs in runs.items()}
            cpu = {label: min(r["cpu_s"] for r in rs) for label, rs in runs.items()}
            rss = {label: statistics.median(r["peak_rss_mib"] for r in rs) for label, rs in runs.items()}
            identical = {f: all(r["sha256"][f] == runs["baseline"][0]["sha256"][f] for rs in runs.values() for r in rs)
                         for f in FILES}
            cases[name] = {
                "command": "overlaylab run " + " ".join(CASES[name]),
                "identical": identical,
                "sha256": {label: rs[0]["sha256"] for label, rs in runs.items()},
                "wall_s": {label: [r["wall_s"] for r in rs] for label, rs in runs.items()},
                "cpu_s": {label: [r["cpu_s"] for r in rs] for label, rs in runs.items()},
                "peak_rss_mib": rss,
                "ratio_current_to_baseline": {"wall": round(wall["current"] / wall["baseline"], 3),
                                              "cpu": round(cpu["current"] / cpu["baseline"], 3),
                                              "peak_rss": round(rss["current"] / rss["baseline"], 3)},
            }
            print(json.dumps({name: {k: cases[name][k] for k in ("identical", "ratio_current_to_baseline")}}), flush=True)
    path = RESULTS / "identity.json"
    if args.case and path.exists():  # some cases again: keep the others of the same comparison
        old = json.loads(path.read_text())
        same_code = subprocess.run(["git", "diff", "--quiet", old["current"], current, "--", "node", "controller"],
                                   cwd=ROOT).returncode == 0
        if old["baseline"] == baseline and same_code and not (dirty or old["current_uncommitted_changes"]):
            cases = {**old["cases"], **cases}
    record = {**header("identity", "see cases"), "baseline": baseline, "current": current,
              "current_uncommitted_changes": dirty, "cases": cases}
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    main()
