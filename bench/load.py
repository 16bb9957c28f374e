"""`make bench-load`: the highest sustained publication rate with hit ratio >= 0.999 on 64 local
peers, driven by Locust, for the unary and the streamed transport side by side in one run,
written to bench/results/load-64-peers.json.

Sweeps the target rate upwards (doubling) on experiments/load-64-peers.yaml switched to flooding
over CYCLON (gamma = 1, every subscriber reachable, so the hit ratio measures the load and not
the overlay), 10 s of load per step, both transports at each rate in turn, stops a transport
after the first rate it fails, then halves the gap between its highest sustained rate and the
first failed one ``BISECT`` times (a transport that fails the lowest rate is tried at half of it,
and so on). "Sustained" = hit ratio >= 0.999 within the 5 s delivery window
and Locust reaching >= 95% of the target, and the peers keeping up: the median latency of the
events published in the last third of the load at most ``MAX_BACKLOG_GROWTH`` times that of the
first third (a backlog that grows for 10 s can still deliver within the 5 s window; a rate at
which it grows is not sustained). Then one run at half the highest sustained rate, whose
latency p99 is set against the planned path delay: the file's constant link delay times the p99
of the hops the copies took.

Each step also records the peer processes' CPU per received copy (``peer_cpu_us_per_copy``:
their user and system time from the start to the end of the load, plus the drain, read from
/proc every ``CPU_EVERY_S``, over the run's received copies): the cost that bounds the
latency here, and a steadier figure than the latency on a shared machine.

The layout is one peer process per core here (32 peers each), for both transports; 40 Locust
users, so that the closed-loop users (a user waits for its ``Publish`` before the next) are not
what limits the offered rate.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.runfiles import read_jsonl

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
RATES = [5, 10, 20, 40, 80, 160]
DRAIN_S = 5.0
BISECT = 2
OVERRIDES = ["protocol={name: gossip, params: {gamma: 1.0, cyclon: {view_size: 8, shuffle_length: 4, cycle_ms: 1000, "
             "timeout_ms: 500}}}",
             "workload.topics=8", "workload.subscriptions={min: 2, max: 2}", "publications.locust_users=40",
             "nodes.peers_per_process=32", "phases.warmup_s=8", f"phases.drain_s={DRAIN_S:g}"]
LINK_DELAY_MS = 5.0  # the file's network.delay (constant, no jitter)
MAX_BACKLOG_GROWTH = 2.0
CPU_EVERY_S = 0.5


class PeerCpu:
    """Samples the CPU time of the peer processes of the run under ``out`` (``python -m node``
    with a config there) every ``CPU_EVERY_S``: (time.time_ns, total CPU seconds) pairs."""

    def __init__(self, out: Path) -> None:
        self.out, self.samples = str(out), []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        cpu: dict[int, float] = {}  # pid -> CPU seconds last seen (kept once the process exits)
        while not self._stop.wait(CPU_EVERY_S):
            for p in psutil.process_iter(["pid", "cmdline", "cpu_times"]):
                cmd = p.info["cmdline"] or []
                if "node" in cmd and any(self.out in c for c in cmd) and p.info["cpu_times"]:
                    cpu[p.info["pid"]] = p.info["cpu_times"].user + p.info["cpu_times"].system
            self.samples.append((time.time_ns(), sum(cpu.values())))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start_ns: int, end_ns: int) -> float | None:
        """CPU seconds spent from the last sample before ``start_ns`` to the first after ``end_ns``."""
        before = [c for t, c in self.samples if t <= start_ns]
        after = [c for t, c in self.samples if t >= end_ns]
        return after[0] - before[-1] if before and after else None


def load_window(run_dir: Path, drain_s: float) -> tuple[int, int]:
    """The load's start and end (plus ``drain_s``) from the run's timeline, in ns."""
    times = {r["kind"]: r["t_ns"] for r in read_jsonl(run_dir / "timeline.jsonl")}
    return times["load_start"], times["load_end"] + int(drain_s * 1e9)


def backlog_growth(run_dir: Path) -> float | None:
    """Median of the per-second latency p50 of the events published in the last third of the
    load over that of the first third (metrics/timeseries.parquet); None without enough
    seconds."""
    rows = pq.read_table(run_dir / "metrics" / "timeseries.parquet").to_pylist()
    p50 = [r["latency_p50_ms"] for r in sorted(rows, key=lambda r: r["t_s"])
           if r["published"] and r["latency_p50_ms"] is not None]
    third = len(p50) // 3
    if third < 2:
        return None
    return statistics.median(p50[-third:]) / statistics.median(p50[:third])


TRANSPORTS = ("unary", "stream")


def step(rate: int, transport: str, tmp: Path, tag: str = "") -> dict:
    """One run at ``rate`` over ``transport`` (in a folder of its own under ``tmp``), printed."""
    out = tmp / f"{transport}-{rate}{tag}"
    out.mkdir()
    cmd = [sys.executable, "-m", "controller.cli.main", "run", str(ROOT / "experiments" / "load-64-peers.yaml"),
           "--out", str(out), "--set", f"publications.rate_per_s={rate}", "--set", f"publications.count={rate * 10}",
           "--set", f"transport.mode={transport}"]
    for o in OVERRIDES:
        cmd += ["--set", o]
    start = time.perf_counter()
    cpu = PeerCpu(out)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    cpu.stop()
    if proc.returncode != 0:
        raise SystemExit(f"rate {rate}, {transport}: run failed:\n{proc.stderr[-2000:]}")
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    s = json.loads((run_dir / "summary.json").read_text())
    offered = s["load"].get("offered_per_s") or 0.0
    growth = backlog_growth(run_dir)
    cpu_s = cpu.between(*load_window(run_dir, DRAIN_S))
    copies = s["spans"]["receive"]
    r = {
        "target_per_s": rate, "offered_per_s": round(offered, 2), "published_per_s": s["load"]["published_per_s"],
        "hit_ratio": s["hit_ratio"], "latency_p50_ms": s["latency_ms"]["p50"], "latency_p99_ms": s["latency_ms"]["p99"],
        "locust_failures": s["load"]["locust"]["failures"], "wall_s": round(time.perf_counter() - start, 1),
        "planned_path_p99_ms": LINK_DELAY_MS * s["hops"]["p99"],
        "backlog_growth": None if growth is None else round(growth, 2),
        "peer_cpu_us_per_copy": round(cpu_s / copies * 1e6, 1) if cpu_s is not None and copies else None,
        "sustained": ((s["hit_ratio"] or 0) >= 0.999 and offered >= 0.95 * rate
                      and growth is not None and growth <= MAX_BACKLOG_GROWTH),
    }
    print(f"{transport}, target {rate}/s: offered {r['offered_per_s']}/s, hit ratio {r['hit_ratio']}, "
          f"p99 {r['latency_p99_ms']:.0f} ms, backlog growth {r['backlog_growth']}, "
          f"peer CPU per copy {r['peer_cpu_us_per_copy']} µs, sustained {r['sustained']}",
          flush=True)
    return r


def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    steps: dict[str, list[dict]] = {t: [] for t in TRANSPORTS}
    with tempfile.TemporaryDirectory() as tmp:
        for rate in RATES:
            going = [t for t in TRANSPORTS if all(r["sustained"] for r in steps[t])]
            if not going:
                break
            for transport in going:
                steps[transport].append(step(rate, transport, Path(tmp)))
        for transport in TRANSPORTS:
            rate = RATES[0]
            while not any(r["sustained"] for r in steps[transport]) and rate > 1:  # below the grid
                rate //= 2
                steps[transport].append(step(rate, transport, Path(tmp)))
            for _ in range(BISECT):
                ok = [r["target_per_s"] for r in steps[transport] if r["sustained"]]
                failed = [r["target_per_s"] for r in steps[transport] if not r["sustained"]]
                if not ok or not failed or min(failed) - max(ok) < 2:
                    break
                rate = (max(ok) + min(failed)) // 2
                steps[transport].append(step(rate, transport, Path(tmp)))
        best = {t: max((r["target_per_s"] for r in steps[t] if r["sustained"]), default=None) for t in TRANSPORTS}
        half = {t: step(max(1, best[t] // 2), t, Path(tmp), "-half") for t in TRANSPORTS if best[t]}
    record = {
        "benchmark": "load-64-peers",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "experiment": "experiments/load-64-peers.yaml --set " + " --set ".join(OVERRIDES) + " --set transport.mode=T",
        "criterion": "hit ratio >= 0.999 within the 5 s window, Locust offering >= 95% of the target, and the "
                     f"median latency of the last third of the load at most {MAX_BACKLOG_GROWTH}x the first third's",
        "highest_sustained_rate_per_s": best,
        "stream_over_unary": best["stream"] / best["unary"] if best["stream"] and best["unary"] else None,
        "steps": steps,
        "at_half_rate": {t: {**r, "p99_over_planned_path": r["latency_p99_ms"] / r["planned_path_p99_ms"]}
                         for t, r in half.items()},
    }
    path = RESULTS / "load-64-peers.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"highest sustained rate: {best}; wrote {path}")


if __name__ == "__main__":
    main()
