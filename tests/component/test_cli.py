"""The CLI as a user runs it: a sim run analysed end to end, bad files, Ctrl-C on a local run."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from controller.cli.main import main
from tests.conftest import ROOT

QUICK = str(ROOT / "experiments" / "quickstart.yaml")


@pytest.mark.slow
def test_sim_run_end_to_end_writes_summary_and_report(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["run", QUICK, "--backend", "sim", "--out", str(tmp_path), "--set", "nodes.count=24",
              "--set", "publications.count=10"])
    assert done.value.code == 0
    [rd] = tmp_path.iterdir()
    summary = json.loads((rd / "summary.json").read_text())
    for key in ("run_id", "backend", "protocol", "seed", "nodes", "topics", "events", "hit_ratio",
                "complete_event_ratio", "latency_ms", "hops", "duplication_factor", "relay_ratio",
                "degree", "topic_connectivity", "overhead", "protocol_metrics", "fidelity"):
        assert key in summary
    assert summary["backend"] == "sim" and summary["nodes"] == 24 and summary["events"] == 10
    assert summary["hit_ratio"] == 1.0 and summary["complete_event_ratio"] == 1.0
    assert summary["hops"]["p50"] >= 1 and summary["latency_ms"]["p50"] >= 25  # 30 ms +- 5 per hop
    assert summary["spans"]["dropped"] == 0
    assert summary["fidelity"]["verdict"] == "ok"  # virtual time
    html = (rd / "report.html").read_text()
    assert "hit ratio (pooled)" in html and "plots/latency_cdf.png" in html and "Fidelity: ok" in html
    assert (rd / "plots" / "hops.png").stat().st_size > 1000
    assert (rd / "metrics" / "events.parquet").exists()
    assert json.loads(capsys.readouterr().out)["hit_ratio"] == 1.0

    # The resolved experiment in the run directory re-runs the same plan.
    with pytest.raises(SystemExit):
        main(["validate", str(rd / "experiment.yaml")])
    assert "count: 24" in capsys.readouterr().out


@pytest.mark.slow
def test_poldercast_e1_file_runs_and_reports_ring_convergence_by_cycle_and_size(tmp_path, capsys):
    """The paper's E1 file, scaled down: per-cycle ring convergence (Fig. 5), convergence
    against subscription and ring size (Fig. 6) and RINGS degree (Fig. 7) in summary and report."""
    with pytest.raises(SystemExit) as done:
        main(["run", str(ROOT / "experiments" / "poldercast-e1-convergence.yaml"), "--out", str(tmp_path),
              "--set", "nodes.count=60", "--set", "publications.rounds=12", "--set", "publications.topics_per_round=20"])
    assert done.value.code == 0
    [rd] = tmp_path.iterdir()
    summary = json.loads((rd / "summary.json").read_text())
    pm = summary["protocol_metrics"]
    curve = pm["ring_convergence"]
    assert [round(c["cycle"]) for c in curve[:12]] == list(range(1, 13))  # gossip cycles, frozen rounds out
    assert curve[0]["missing_links_pct"] > curve[-1]["missing_links_pct"]
    subs = [json.loads(line) for line in (rd / "subscriptions.jsonl").read_text().splitlines()]
    by_size = pm["convergence_by_size"]
    assert sum(r["count"] for r in by_size["rings"]) == curve[-1]["rings"]
    for row in by_size["nodes"]:
        members = [s for s in subs if row["subscriptions_from"] <= len(s["topics"]) < 2 * row["subscriptions_from"]]
        assert 0 < row["count"] <= len(members)
        done_cycles = [c for c in (row["mean_cycle"], row["max_cycle"]) if c is not None]
        assert all(1 <= c <= curve[-1]["cycle"] for c in done_cycles)
    converged = sum(r["count"] - r["not_converged"] for r in by_size["rings"])
    assert converged / curve[-1]["rings"] == pytest.approx(1 - curve[-1]["incomplete_rings_pct"] / 100)
    assert summary["plots"]["convergence_by_size"] == "plots/convergence_by_size.png"
    assert (rd / "plots" / "convergence_by_size.png").stat().st_size > 1000
    assert "plots/convergence_by_size.png" in (rd / "report.html").read_text()
    assert summary["relay_ratio"] == 0.0


def test_workload_command_reports_ring_link_sharing(capsys):
    """`overlaylab workload --json` on the geometric social graph: distributions and link sharing
    (overall and by subscription size, the same as computed from the rendered workload)."""
    from controller.experiment import workloads
    from controller.experiment.schema import load_experiment

    args = [str(ROOT / "experiments" / "poldercast-e1-convergence.yaml"), "--set", "nodes.count=300",
            "--set", "workload.graph=geometric"]
    with pytest.raises(SystemExit) as done:
        main(["workload", *args, "--json"])
    assert done.value.code == 0
    report = json.loads(capsys.readouterr().out)
    expected = workloads.link_sharing(workloads.render(load_experiment(args[0], args[2::2])))
    assert report["link_sharing"] == expected and 0 < expected["distinct_per_link"] < 1
    assert report["nodes"] == 300


def test_workload_command_reports_a_content_workloads_matching_and_contacted_floor(capsys):
    """`overlaylab workload --json` on a content workload: matching and the contacted floor over
    the plan's own filters and events, as the workload module computes them; no ring sharing."""
    from controller.experiment import content_workloads, plans, workloads
    from controller.experiment.schema import load_experiment
    from node.protocols.dps.content import parse_event, parse_filter

    args = [str(ROOT / "experiments" / "dps-table1.yaml"), "--set", "nodes.count=300", "--set", "workload.name=stock"]
    with pytest.raises(SystemExit) as done:
        main(["workload", *args, "--json"])
    assert done.value.code == 0
    report = json.loads(capsys.readouterr().out)
    exp = load_experiment(args[0], args[2::2])
    subs = workloads.render(exp)
    filters = [parse_filter(f) for s in subs for f in s]
    events = [parse_event(t) for t in plans.publication_slots(exp, subs)[1]]
    content = report["content"]
    assert content["contacted_floor_pct"] == content_workloads.contacted_floor_pct(filters, events)
    assert content["matching_pct"] == content_workloads.matching_pct(filters, events)
    assert 0 < content["matching_pct"] < content["contacted_floor_pct"] and "link_sharing" not in report


def test_invalid_file_fails_before_anything_starts(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnodes: {count: lots}\nworkload: {topicz: 3}\n")
    with pytest.raises(SystemExit) as done:
        main(["run", str(bad), "--out", str(tmp_path / "runs")])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "nodes.count: Input should be a valid integer" in err and "workload.uniform.topicz: unknown field" in err
    assert not (tmp_path / "runs").exists()


def test_ctrl_c_stops_every_peer_and_keeps_what_was_written(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", "run", QUICK, "--out", str(tmp_path), "--set", "nodes.count=8",
         "--set", "phases.warmup_s=60"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        timeline = None
        while time.monotonic() < deadline:
            found = list(tmp_path.glob("*/timeline.jsonl"))
            if found and found[0].read_text().count("join") == 8:
                timeline = found[0]
                break
            time.sleep(0.2)
        assert timeline is not None, "the run never joined its peers"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    peers = subprocess.run(["pgrep", "-f", f"node --config {timeline.parent}"], capture_output=True, text=True)
    assert peers.stdout == "", "peer processes survived Ctrl-C"
    assert timeline.read_text().count('"join"') == 8
    assert (timeline.parent / "experiment.yaml").exists()


@pytest.mark.parametrize("text, message", [
    ("", "empty experiment file"),
    ("name: x\nworkload: {topics: 3, subscriptions: {min: 2, max: 5}}\n",
     "workload.uniform: Value error, subscriptions.max (5) exceeds topics (3)"),
    ("name: x\nchurn: {model: trace, path: nope.txt}\n", "churn.path: no such file"),
    ("name: x\nworkload: {model: social, graph: edges.txt}\n", "workload.graph: no such file"),
    ("name: x\nnetwork: {delay: {model: matrix, path: rtt.txt}}\n", "network.delay.path: no such file"),
])
def test_validate_refuses_what_run_would_and_run_creates_no_run_dir(tmp_path, capsys, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    for command in (["validate", str(path)], ["run", str(path), "--backend", "sim", "--out", str(tmp_path / "runs")]):
        with pytest.raises(SystemExit) as done:
            main(command)
        assert done.value.code == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
