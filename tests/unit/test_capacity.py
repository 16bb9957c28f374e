"""The capacity estimate before a local run (controller/backends/capacity.py): costs from a run's readings,
the plan's demand from the costs, and the warning `validate` prints."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from controller.backends.capacity import FITS_SHARE, Costs, costs_from_run, estimate, save_costs
from controller.backends.rundir import write_stats
from controller.experiment.schema import load_experiment

ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000_000
COSTS = Costs(protocol="gossip", process_cores=0.05, maintenance_ms_per_peer_s=0.8, cpu_per_copy_us=100.0,
              copies_per_event_per_peer=8.0, rss_base_mib=60.0, rss_per_peer_mib=0.1, cpus=2, measured="by hand")


def quickstart(peers: int, per_process: int, protocol: str | None = None):
    sets = [f"nodes.count={peers}", f"nodes.peers_per_process={per_process}"]
    exp = load_experiment(ROOT / "experiments" / "quickstart.yaml", sets)
    return exp.model_copy(update={"protocol": exp.protocol.model_copy(update={"name": protocol})}) if protocol else exp


def test_the_estimate_adds_processes_peers_and_copies():
    est = estimate(quickstart(1000, 500), {"gossip": COSTS})
    assert (est.processes, est.usable_cores) == (2, 2)
    assert est.process_cores == pytest.approx(0.1) and est.maintenance_cores == pytest.approx(0.8)
    # 4 events/s x 8 copies per event per peer x 1,000 peers x 100 us
    assert est.dissemination_cores == pytest.approx(3.2)
    assert est.busiest_cores == pytest.approx(0.05 + 500 * (0.0008 + 0.0032))  # 2.05: past its one core
    assert est.share == pytest.approx(2.05) and not est.fits and est.overloads
    assert est.memory_mib == pytest.approx(2 * 60 + 100)
    small = estimate(quickstart(40, 20), {"gossip": COSTS})
    assert small.share == pytest.approx(0.05 + 20 * 0.004) and small.share <= FITS_SHARE and small.fits


def test_many_small_processes_are_bound_by_the_cores_they_share():
    est = estimate(quickstart(64, 4), {"gossip": COSTS})  # 16 processes of 4 peers
    assert est.busiest_cores == pytest.approx(0.05 + 4 * 0.004)
    assert est.share == pytest.approx((0.8 + 0.0512 + 0.2048) / 2)


def test_a_process_uses_one_core_at_most():
    one = estimate(quickstart(100, 100), {"gossip": COSTS})
    assert one.usable_cores == 1 and one.share == pytest.approx(one.demand_cores)


def test_an_uncalibrated_protocol_borrows_the_quickstarts_costs_and_says_so():
    est = estimate(quickstart(100, 50, protocol="stan"), {"gossip": COSTS})
    assert est.costs is COSTS and "stan not calibrated" in est.describe()
    assert estimate(quickstart(100, 50), {}) is None


def write_run(path: Path) -> None:
    """Two processes (nodes 0-99 and 100-149), read every second over 20 s; the warm-up ends at
    10 s. Over it the first uses 0.13 cores and the second 0.09 (0.05 per process + 0.8 ms per
    peer-second), with 70 and 60 MiB resident; after it, 2 and 1 more CPU seconds went on 30,000
    received copies of 25 events (100 us each; 8 copies per event per peer)."""
    (path / "run.json").write_text(json.dumps({"started_ns": 0, "measure_start_ns": 10 * S, "ended_ns": 20 * S}))
    lines = []
    for first, warm, extra, rss in ((0, 0.13, 2.0, 70.0), (100, 0.09, 1.0, 60.0)):
        for t in range(1, 21):
            cpu = warm * t + (extra * (t - 10) / 10 if t > 10 else 0.0)
            lines.append({"t_ns": t * S, "kind": "host", "node": first, "answered": True, "cpu_ms": round(cpu * 1000),
                          "rss_kib": int(rss * 1024)})
    (path / "timeline.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    counters = [(i, {"events_received": 200, "events_published": 1 if i < 25 else 0}) for i in range(150)]
    write_stats(SimpleNamespace(path=path), counters)


def test_costs_from_a_run_separate_the_process_the_peer_and_the_copy(tmp_path):
    write_run(tmp_path)
    c = costs_from_run(tmp_path, "gossip", 100, "test")
    assert c.process_cores == pytest.approx(0.05, abs=1e-3)
    assert c.maintenance_ms_per_peer_s == pytest.approx(0.8, abs=0.01)
    assert c.cpu_per_copy_us == pytest.approx(100.0, rel=0.01)
    assert c.copies_per_event_per_peer == pytest.approx(8.0)
    assert c.rss_base_mib == pytest.approx(50.0, abs=0.1) and c.rss_per_peer_mib == pytest.approx(0.2, abs=1e-3)


def test_validate_warns_before_anything_starts(tmp_path):
    table = tmp_path / "capacity.json"
    save_costs(COSTS, table)
    env = {"OVERLAYLAB_CAPACITY": str(table), "PATH": "/usr/bin:/bin", "COLUMNS": "300"}
    cmd = [sys.executable, "-m", "controller.cli.main", "validate", "experiments/quickstart.yaml",
           "--set", "nodes.count=5000", "--set", "nodes.peers_per_process=2500"]
    big = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert big.returncode == 0 and "overloads this machine" in big.stderr, big.stderr
    assert ("5,000 peers in 2 processes need about 20.10 of 2 usable cores, the busiest process 10.05 of its one "
            "(1005% at most") in " ".join(big.stderr.split())
    small = subprocess.run(cmd[:5], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert small.returncode == 0 and "warning" not in small.stderr and "# capacity: 32 peers" in small.stderr
    middle = subprocess.run(cmd[:5] + ["--set", "nodes.count=200", "--set", "nodes.peers_per_process=100"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert "will likely fall behind" in middle.stderr and "overloads" not in middle.stderr, middle.stderr


def test_the_committed_table_is_where_validate_looks_and_holds_the_quickstart():
    from controller.backends.capacity import COSTS_FILE, load_costs

    assert COSTS_FILE == ROOT / "bench" / "results" / "capacity.json"
    assert "gossip" in load_costs(COSTS_FILE)
