"""`make bench`: wall time and peak memory of the simulator at scale, written to bench/results/.

Runs the quickstart in ``sim`` at 1,000 and 10,000 peers in the same invocation, one after the
other, each as its own process (peak RSS from ``wait4``), so the 10K figure comes with a
same-machine baseline and a ratio. Then times the analysis of the 10K run. Machines here are
shared and noisy: compare ratios, not absolute seconds across runs.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
EXPERIMENT = ROOT / "experiments" / "quickstart.yaml"


def timed(cmd: list[str], cwd: Path = ROOT) -> dict:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "stdout": out.decode()}


def header(benchmark: str, experiment: str) -> dict:
    """What every results file starts with: what ran, when, on what."""
    return {
        "benchmark": benchmark,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "experiment": experiment,
    }


def sim_run(nodes: int, out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "controller.cli.main", "run", str(EXPERIMENT), "--backend", "sim", "--out", str(out),
           "--set", f"nodes.count={nodes}", "--no-analyze", *extra]
    r = timed(cmd)
    r.pop("stdout")
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    meta = json.loads((run_dir / "run.json").read_text())
    r.update(nodes=nodes, sim_steps=meta["sim_steps"], spans=meta["spans"], run_dir=str(run_dir))
    r["steps_per_s"] = round(meta["sim_steps"] / r["wall_s"])
    return r


def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for nodes in (1000, 10000):
            out = Path(tmp) / str(nodes)
            out.mkdir()
            results[nodes] = sim_run(nodes, out, [])
            print(f"sim {nodes} peers: {results[nodes]['wall_s']} s, {results[nodes]['peak_rss_mib']} MiB", flush=True)
        analysis = timed([sys.executable, "-m", "controller.cli.main", "analyze", results[10000]["run_dir"]])
        analysis.pop("stdout")
        summary_10k = json.loads((Path(results[10000]["run_dir"]) / "summary.json").read_text())
        print(f"analysis of the 10K run: {analysis['wall_s']} s", flush=True)
    record = {
        **header("sim-scale", "experiments/quickstart.yaml --backend sim --set nodes.count=N"),
        "sim": {str(n): {k: v for k, v in r.items() if k != "run_dir"} for n, r in results.items()},
        "ratio_10k_to_1k": {
            "wall": round(results[10000]["wall_s"] / results[1000]["wall_s"], 2),
            "peak_rss": round(results[10000]["peak_rss_mib"] / results[1000]["peak_rss_mib"], 2),
        },
        "analysis_10k": {**analysis, "hit_ratio": summary_10k["hit_ratio"], "events": summary_10k["events"]},
    }
    path = RESULTS / "sim-scale.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
