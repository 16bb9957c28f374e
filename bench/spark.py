"""`make bench-spark`: the Spark analysis of a 10-million-span run, written to bench/results/spark.json.

Generates a synthetic run (``analysis.synthetic``; 10,000 nodes, 1,000 topics), then times
``overlaylab analyze`` on it as a user runs it (local[*]), with the peak memory of the whole
process tree (the Python driver and Spark's JVM, sampled every 0.2 s). A 1-million-span run of
the same generator is analysed first, in the same invocation, as the baseline for the ratios,
and checked by ``overlaylab crosscheck`` (the plain-Python computation of the same metrics).

``--baseline REV``: the 10-million-span run is also analysed by REV's analysis (checked out in a
temporary worktree, run with this tree's virtual environment), one after the other in the same
invocation: the wall-time ratio, and every value of the two summary.json files compared.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.synthetic import write_synthetic_run
from bench.identity import worktree
from bench.run import RESULTS, ROOT, header

RUN_FACTS = ("run_id", "plots")
"""summary.json fields that name the run's files rather than measure it."""


def timed_tree(cmd: list[str], cwd: Path = ROOT) -> dict:
    """Wall time, CPU time and peak RSS of ``cmd`` with all its descendants (sampled every 0.2 s)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = psutil.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        peak = cpu = 0.0
        while proc.poll() is None:
            rss = used = 0.0
            for p in [proc, *proc.children(recursive=True)]:
                try:
                    rss += p.memory_info().rss
                    used += sum(p.cpu_times()[:2])
                except psutil.NoSuchProcess:
                    pass
            peak, cpu = max(peak, rss), max(cpu, used)
            time.sleep(0.2)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"failed: {' '.join(cmd)}\n{err.read().decode()[-2000:]}")
    return {"wall_s": round(wall, 1), "cpu_s_at_least": round(cpu, 1), "peak_rss_mib": round(peak / 2**20)}


def analyse(spans: int, tmp: Path, crosscheck: bool) -> dict:
    start = time.perf_counter()
    rd = write_synthetic_run(tmp / f"spans-{spans}", spans)
    generated = time.perf_counter() - start
    meta = json.loads((rd / "run.json").read_text())
    r = timed_tree([sys.executable, "-m", "controller.cli.main", "analyze", str(rd)])
    summary = json.loads((rd / "summary.json").read_text())
    r.update(spans=meta["spans"], events=summary["events"], generate_s=round(generated, 1),
             spans_per_s=round(meta["spans"] / r["wall_s"]), hit_ratio=summary["hit_ratio"],
             hops_mean=summary["hops"]["mean"], duplication=summary["duplication_factor"])
    if crosscheck:
        check = subprocess.run([sys.executable, "-m", "controller.cli.main", "crosscheck", str(rd)], cwd=ROOT,
                               capture_output=True, text=True)
        r["crosscheck"] = "agrees" if check.returncode == 0 else "DIFFERS"
    print(f"{meta['spans']:,} spans: {r['wall_s']} s, {r['peak_rss_mib']} MiB", flush=True)
    return r


def leaves(x, path: str = "") -> dict[str, object]:
    """Every value of a JSON document by its path."""
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in leaves(val, f"{path}.{key}").items()}
    if isinstance(x, list):
        return {k: v for i, val in enumerate(x) for k, v in leaves(val, f"{path}[{i}]").items()}
    return {path: x}


def against_baseline(rev: str, run: Path, current: dict) -> dict:
    """``run`` (analysed by this tree) analysed again by ``rev``'s analysis; both summaries compared."""
    ours = {k: v for k, v in leaves(json.loads((run / "summary.json").read_text())).items()
            if k.split(".")[1].split("[")[0] not in RUN_FACTS}
    with worktree(rev) as tree:
        r = timed_tree([sys.executable, "-m", "controller.cli.main", "analyze", str(run)], cwd=tree)
    theirs = {k: v for k, v in leaves(json.loads((run / "summary.json").read_text())).items()
              if k.split(".")[1].split("[")[0] not in RUN_FACTS}
    differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    print(f"baseline {rev}: {r['wall_s']} s; {len(differ)} of {len(ours)} summary values differ", flush=True)
    return {"commit": rev, **r, "summary_values": len(ours), "values_differing": len(differ), "differing": differ[:20],
            "wall_ratio_current_to_baseline": round(current["wall_s"] / r["wall_s"], 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=10_000_000)
    ap.add_argument("--small", type=int, default=1_000_000, help="spans of the run the ratios are taken against")
    ap.add_argument("--baseline", metavar="REV", help="also analyse the large run with REV's analysis")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = analyse(args.small, Path(tmp), crosscheck=True)
        big = analyse(args.spans, Path(tmp), crosscheck=False)
        old = against_baseline(args.baseline, Path(tmp) / f"spans-{args.spans}", big) if args.baseline else None
    record = {
        **header("spark-analysis", "analysis.synthetic: 10,000 nodes, 1,000 topics, 20 per node; overlaylab analyze"),
        "baseline": base, "large": big,
        "ratio_large_to_baseline": {"spans": round(big["spans"] / base["spans"], 2),
                                    "wall": round(big["wall_s"] / base["wall_s"], 2),
                                    "peak_rss": round(big["peak_rss_mib"] / base["peak_rss_mib"], 2)},
        "target": "10M spans under 60 s",
    }
    if old:
        record["large_by_baseline"] = old
    path = RESULTS / "spark.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
