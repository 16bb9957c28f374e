"""Runs that survive their own crashes (local backend, the CLI as a user runs it): peer processes
killed from outside, Ctrl-C, and a killed controller each leave an analysable run directory whose
summary says what fell short; fresh rejoins never reuse an event id."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from analysis.crosscheck import compare
from analysis.jobs.summarize import run as summarize

pytestmark = pytest.mark.slow

EXPERIMENT = {
    "name": "crashes", "seed": 3, "backend": "local",
    "protocol": {"name": "gossip", "params": {"cyclon": {"view_size": 6, "shuffle_length": 3, "cycle_ms": 500,
                                                         "timeout_ms": 300}}},
    "nodes": {"count": 16, "peers_per_process": 4},
    "workload": {"model": "uniform", "topics": 4, "subscriptions": {"min": 2, "max": 2}},
    "publications": {"count": 48, "rate_per_s": 4},
    "network": {"fidelity_links": 0},
    "churn": {"model": "sessions", "fraction": 0.125, "session": {"distribution": "constant", "mean_s": 3},
              "downtime": {"distribution": "constant", "mean_s": 2}, "leave": "crash", "rejoin": "fresh"},
    "phases": {"warmup_s": 3, "drain_s": 3},
    "analysis": {"delivery_window_s": 2},
}



def start_run(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """``overlaylab run`` in the background; returns once every node has joined."""
    path = tmp_path / "crashes.yaml"
    path.write_text(yaml.safe_dump(EXPERIMENT))
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli.main", "run", str(path), "--out", str(out), "--no-analyze"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = list(out.glob("*/timeline.jsonl"))
        if runs and runs[0].read_text().count('"initial": true') == 16:
            return proc, runs[0].parent
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"the run never started: {proc.stderr.read() if proc.poll() is not None else ''}")


def wait_for_publishes(rd: Path, count: int = 4, timeout_s: float = 60) -> None:
    """Until ``count`` publish spans are on disk (the warm-up is over and load reached the peers)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(f.read_text().count('"name":"publish"') for f in rd.rglob("node-*.jsonl")) >= count:
            return
        time.sleep(0.2)
    pytest.fail(f"fewer than {count} publishes within {timeout_s} s")


def peer_pids(rd: Path, name: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"{rd}/peers/{name}.json"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def timeline(rd: Path) -> list[dict]:
    return [json.loads(line) for line in (rd / "timeline.jsonl").read_text().splitlines()]


def test_two_peer_processes_killed_mid_run_and_fresh_rejoins(tmp_path, spark):
    proc, rd = start_run(tmp_path)
    wait_for_publishes(rd, count=12)  # 3 s of publishing at 4/s: the first events' 2 s windows end before the kill
    killed = {}
    for group in ("group-0", "group-1"):
        [pid] = peer_pids(rd, group)
        killed[pid] = json.loads((rd / "peers" / f"{group}.json").read_text())["nodes"]
        os.kill(pid, signal.SIGKILL)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()

    crashes = {e["node"]: e for e in timeline(rd) if e["kind"] == "crash" and e.get("unplanned")}
    assert set(crashes) == {n for nodes in killed.values() for n in nodes}
    assert all(f"peer process {pid} exited with -9" == crashes[n]["why"] for pid, nodes in killed.items() for n in nodes)
    assert json.loads((rd / "run.json").read_text())["status"] == "complete"

    summary = summarize(rd, spark)
    assert {c["node"] for c in summary["partial"]["unplanned_crashes"]} == set(crashes)
    assert summary["churn"]["unplanned_crashes"] == 8 and summary["churn"]["crashes"] >= 2
    # Dead nodes are expected receivers of the events before the kill, of none after it.
    t0 = {e["event_id"]: e["t0_ns"] for e in pq.read_table(rd / "metrics" / "events.parquet").to_pylist()}
    deliveries = pq.read_table(rd / "metrics" / "deliveries.parquet").to_pylist()
    killed_at = min(c["t_ns"] for c in crashes.values())
    dead = [d for d in deliveries if d["node"] in crashes]
    assert dead and all(t0[d["event_id"]] < killed_at for d in dead)
    # Fresh rejoins: every event id published once, no copy before its publish, nothing refused.
    ids = [json.loads(line) for f in (rd / "traces").glob("*.jsonl") for line in f.read_text().splitlines() if line]
    published = [a["value"]["stringValue"] for req in ids for rs in req["resourceSpans"] for ss in rs["scopeSpans"]
                 for s in ss["spans"] if s["name"] == "publish" for a in s["attributes"] if a["key"] == "pubsub.event_id"]
    assert len(published) == len(set(published)) == summary["events"] > 0
    assert summary["refused_events"]["count"] == 0
    latencies = [d["latency_ms"] for d in deliveries if d["latency_ms"] is not None]
    assert latencies and min(latencies) >= 0
    # ... and the hit ratio is what a second, plain-Python count from the raw spans gives.
    rows = compare(rd)
    assert all(r["agree"] for r in rows), [r for r in rows if not r["agree"]]
    assert summary["hit_ratio"] is not None


def test_ctrl_c_leaves_an_analysable_run(tmp_path, spark):
    proc, rd = start_run(tmp_path)
    wait_for_publishes(rd)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    meta = json.loads((rd / "run.json").read_text())
    assert meta["status"] == "interrupted" and meta["ended_ns"] < meta["planned_end_ns"]
    summary = summarize(rd, spark)
    assert summary["partial"]["status"] == "interrupted" and summary["partial"]["nodes_affected"] == "all"
    assert summary["events"] > 0 and summary["hit_ratio"] is not None


def test_a_killed_controller_stops_its_peers_and_leaves_an_analysable_run(tmp_path, spark):
    proc, rd = start_run(tmp_path)
    pids = peer_pids(rd, ".*")
    assert len(pids) >= 4
    wait_for_publishes(rd)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 15
    while peer_pids(rd, ".*") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert peer_pids(rd, ".*") == []  # each peer saw its stdin close, flushed and stopped
    assert json.loads((rd / "run.json").read_text())["status"] == "running"
    summary = summarize(rd, spark)
    assert summary["partial"]["status"] == "running" and summary["events"] > 0
    assert all(r["agree"] for r in compare(rd))
