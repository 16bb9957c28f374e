"""`make bench-peers`: many local peers on this machine, whether the host keeps up, memory per
peer, written to bench/results/peers.json.

Runs the quickstart plan (experiments/quickstart.yaml) on the local backend with streamed
links at each (peers, peers per process) case, samples the resident memory of every peer
process once a second (psutil, the process tree under the controller), and records the peak of
their sum, that peak per peer, the run's hit ratio, latency and spans dropped, its
``fidelity.verdict`` (measured: loop lag and link probes during the run) beside the estimate
``overlaylab validate`` makes before it (controller/backends/capacity.py: from the costs ``overlaylab
calibrate`` measured), and the largest count whose verdict was ``ok``. The drain is long
enough for the whole flood to arrive: the quickstart floods (gamma 1), so 1,000 peers carry
about 8,000 copies per event.

    python bench/peers.py [--cases 1000:500 100:4] [--drain 60]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import RESULTS, ROOT, header

sys.path.insert(0, str(ROOT))
from analysis.fidelity import verdict
from controller.backends.capacity import COSTS_FILE, estimate
from controller.experiment.schema import load_experiment

EXPERIMENT = "experiments/quickstart.yaml"
QUEUE = 1 << 18
"""transport.queue_messages: at 1,000 peers the flood (8,000 copies an event, 4 events a second)
outruns these 2 cores about threefold, and a link between two processes of 500 peers carries
half of it; the default 4,096 a lane fails sends once the receiver stops reading (measured:
1,603 failed sends, hit ratio 0.9997). The copies wait instead (at most 256 Ki per lane)."""
DEADLINE_MS = 60_000
"""transport.deadline_ms, for the same reason: with the default 5 s, copies waiting in the lane
to the other process failed (9,957 failed sends in one run, hit ratio 0.9950)."""


def peer_rss(root: psutil.Process) -> tuple[int, int]:
    """Resident bytes and count of the peer processes (``python -m node``) under ``root``."""
    total = count = 0
    for p in root.children(recursive=True):
        try:
            if "node" in p.cmdline() and "--config" in p.cmdline():
                total += p.memory_info().rss
                count += 1
        except psutil.Error:
            pass
    return total, count


def case(peers: int, per_process: int, drain_s: float, out: Path) -> dict:
    cmd = [sys.executable, "-m", "controller.cli.main", "run", EXPERIMENT, "--out", str(out),
           "--set", f"nodes.count={peers}", "--set", f"nodes.peers_per_process={per_process}",
           "--set", "transport.mode=stream", "--set", f"transport.queue_messages={QUEUE}",
           "--set", f"transport.deadline_ms={DEADLINE_MS}", "--set", f"phases.drain_s={drain_s}"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = {"bytes": 0, "processes": 0}

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            total, count = peer_rss(root)
            if total > peak["bytes"]:
                peak.update(bytes=total, processes=count)
            time.sleep(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{peers} peers: run failed:\n{err[-2000:]}")
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    s = json.loads((run_dir / "summary.json").read_text())
    measured = {
        "peers": peers, "peers_per_process": per_process, "drain_s": drain_s,
        "wall_s": round(time.perf_counter() - start, 1), "events": s["events"], "hit_ratio": s["hit_ratio"],
        "spans_received": s["spans"]["receive"], "spans_dropped": s["spans"]["dropped"],
        "send_failed": s["errors"]["send_failed"], "peer_processes": peak["processes"],
        "latency_p50_ms": s["latency_ms"]["p50"], "latency_p99_ms": s["latency_ms"]["p99"],
        "unplanned_crashes": s["churn"]["unplanned_crashes"],
        "peak_peer_rss_mib": round(peak["bytes"] / 2**20, 1),
        "peak_rss_per_peer_mib": round(peak["bytes"] / 2**20 / peers, 2),
    }
    (out / "case.json").write_text(json.dumps(measured) + "\n")
    return scored(measured, run_dir)


def scored(measured: dict, run_dir: Path) -> dict:
    """A case with the run's verdict and the estimate as the current rules and costs make them
    (``--rescore`` applies them again to kept runs)."""
    meta = json.loads((run_dir / "run.json").read_text())
    timeline = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    probes = run_dir / "fidelity.json"
    v = verdict(meta, timeline, json.loads(probes.read_text()) if probes.exists() else None)
    est = estimate(load_experiment(run_dir / "experiment.yaml", []))
    return {**measured, "verdict": v["verdict"], "verdict_reasons": v["reasons"],
            "estimated_cores": round(est.demand_cores, 2) if est else None,
            "estimated_share": round(est.share, 2) if est else None,
            "estimate": None if est is None else "fits" if est.fits else "overloads" if est.overloads else "falls behind"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", nargs="+", default=["32:4", "100:50", "150:75", "200:100", "400:200", "1000:500", "2000:1000", "5000:2500"],
                        help="PEERS:PEERS_PER_PROCESS")
    parser.add_argument("--drain", type=float, default=60.0)
    parser.add_argument("--keep", type=Path, help="keep the run directories here (default: removed)")
    parser.add_argument("--rescore", type=Path, metavar="DIR",
                        help="no runs: score the runs kept in DIR again (verdict rules, capacity table)")
    args = parser.parse_args()
    results = []
    if args.rescore:
        for out in sorted((p for p in args.rescore.iterdir() if (p / "case.json").exists()), key=lambda p: int(p.name)):
            [run_dir] = [p for p in out.iterdir() if p.is_dir()]
            results.append(scored(json.loads((out / "case.json").read_text()), run_dir))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for k, spec in enumerate(args.cases):
                peers, per_process = (int(x) for x in spec.split(":"))
                out = (args.keep or Path(tmp)) / str(k)
                out.mkdir(parents=True)
                results.append(case(peers, per_process, args.drain, out))
                print(json.dumps(results[-1]), flush=True)
    record = {**header("peers", f"{EXPERIMENT} --set nodes.count=N --set nodes.peers_per_process=P "
                                 f"--set transport.mode=stream --set transport.queue_messages={QUEUE} "
                                 f"--set transport.deadline_ms={DEADLINE_MS} "
                                 f"--set phases.drain_s={results[0]['drain_s'] if results else args.drain}"),
              "cases": results,
              "largest_ok": max((r["peers"] for r in results if r["verdict"] == "ok"), default=None),
              "capacity": json.loads(COSTS_FILE.read_text()) if COSTS_FILE.exists() else None}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "peers.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
