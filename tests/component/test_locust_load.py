"""Real Locust publishes through real peers; a peer that dies under load shows up as Locust
failures, the run ends cleanly and the analysis joins Locust's statistics."""

import json

import pytest

from analysis.jobs.summarize import run as analyze
from controller.backends.local import LocalRunner
from controller.backends.rundir import RunDir
from controller.experiment.schema import parse_experiment


@pytest.mark.slow
def test_locust_load_with_a_peer_dying(tmp_path, spark):
    exp = parse_experiment({
        "name": "load", "seed": 4, "backend": "local",
        "protocol": {"name": "gossip", "params": {"gamma": 1.0, "cyclon": {"view_size": 4, "shuffle_length": 2}}},
        "nodes": {"count": 8, "peers_per_process": 4, "bootstrap_contacts": 3},
        "workload": {"topics": 2, "subscriptions": {"min": 2, "max": 2}},
        "publications": {"driver": "locust", "locust_users": 4, "count": 60, "rate_per_s": 10},
        # One node crashes 2 s into the run, before the load starts, and stays down: each of
        # Locust's ~60 picks finds it with probability 1/8, whenever Locust gets going on a busy
        # machine (a crash planned during the load could fall after Locust's last request).
        "churn": {"model": "sessions", "fraction": 0.125, "session": {"distribution": "constant", "mean_s": 1},
                  "downtime": {"distribution": "constant", "mean_s": 600}, "start_s": -2},
        "network": {"fidelity_links": 0},
        "phases": {"warmup_s": 3, "drain_s": 2},
    })
    rd = RunDir.create(exp, tmp_path)
    runner = LocalRunner()
    runner.run(exp, rd)
    assert all(p.poll() is not None for p in runner.procs)
    assert (rd.path / "locust" / "report.html").stat().st_size > 1000
    timeline = [json.loads(line) for line in (rd.path / "timeline.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in timeline if e["kind"] in ("load_start", "load_end")] == ["load_start", "load_end"]
    assert sum(e["kind"] == "crash" for e in timeline) == 1

    summary = analyze(rd.path, spark)
    locust = summary["load"]["locust"]
    assert locust["failures"] > 0 and locust["requests"] > locust["failures"]
    # Every request Locust counted as a success published an event (Locust may leave requests
    # still in flight at its stop out of its CSV, so there can be more events).
    assert summary["events"] >= locust["requests"] - locust["failures"]
    assert summary["load"]["offered_per_s"] > 5
    assert summary["hit_ratio"] is not None and summary["hit_ratio"] > 0.9
    assert "plots/over_time.png" in (rd.path / "report.html").read_text()
