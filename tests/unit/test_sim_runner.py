"""The sim backend carries out churn and partition plans (real cores, virtual time)."""

import json

import pyarrow.parquet as pq

from controller.backends.rundir import RunDir, output_digests
from controller.backends.sim import SimRunner
from controller.experiment import plans
from controller.experiment.schema import parse_experiment


def run(tmp_path, **sections):
    exp = parse_experiment({"name": "t", "seed": 1, "backend": "sim", **sections})
    rd = RunDir.create(exp, tmp_path)
    SimRunner().run(exp, rd)
    timeline = [json.loads(line) for line in (rd.path / "timeline.jsonl").read_text().splitlines()]
    spans = pq.read_table(rd.traces / "spans.parquet").to_pylist()
    return exp, rd, timeline, spans


BASE = {
    "protocol": {"name": "gossip", "params": {"gamma": 1.0, "cyclon": {"view_size": 6, "shuffle_length": 3}}},
    "nodes": {"count": 40},
    "workload": {"topics": 3, "subscriptions": {"min": 1, "max": 1}},
    "publications": {"count": 40, "rate_per_s": 4},
    "network": {"delay": {"ms": 10}},
    "phases": {"warmup_s": 5, "drain_s": 3},
}


def test_churn_plan_is_carried_out_and_recorded(tmp_path):
    exp, rd, timeline, spans = run(tmp_path, **BASE, churn={
        "model": "sessions", "fraction": 0.25, "session": {"mean_s": 3}, "downtime": {"mean_s": 2}, "rejoin": "fresh"})
    plan = plans.render(exp)
    done = [(round(e["t_ns"] / 1e9, 6), e["node"], e["kind"]) for e in timeline if not e.get("initial")]
    wanted = [(round(e.at_s, 6), e.node, e.kind) for e in plan.churn.events]
    assert done == wanted and len(done) > 10
    # A crashed node receives nothing until it is back.
    down = {}
    for e in timeline:
        if e["kind"] == "crash":
            down[e["node"]] = down.get(e["node"], []) + [[e["t_ns"], None]]
        elif e["kind"] == "join" and e["node"] in down:
            down[e["node"]][-1][1] = e["t_ns"]
    for s in spans:
        for start, end in down.get(s["node"], []):
            assert not (start < s["time_ns"] < (end or float("inf")))


def test_partition_cuts_the_nodes_off_during_its_window(tmp_path):
    exp, rd, timeline, spans = run(tmp_path, **{**BASE, "network": {
        "delay": {"ms": 10}, "partitions": [{"start_s": 2, "end_s": 6, "nodes": list(range(10))}]}})
    on = next(e for e in timeline if e["kind"] == "fault_on")
    off = next(e for e in timeline if e["kind"] == "fault_off")
    assert on["nodes"] == list(range(10)) and (off["t_ns"] - on["t_ns"]) == 4_000_000_000
    cut = set(range(10))
    for s in spans:
        if s["name"] == "receive" and on["t_ns"] + 20_000_000 < s["time_ns"] < off["t_ns"]:
            assert (s["node"] in cut) == (s["from_node"] in cut)
    # Outside the window events cross the cut again.
    assert any(s["name"] == "receive" and s["time_ns"] > off["t_ns"] + 1e9 and (s["node"] in cut) != (s["from_node"] in cut)
               for s in spans)


def test_a_freeze_inside_a_scheduled_call_runs_everything_once():
    from tests.helpers import gossip_network

    sim, subs = gossip_network(30)
    calls = []
    for k in (0.5, 1.2, 1.6):  # after a first freeze, two frozen calls within one run_until step
        sim.call_at(k, lambda k=k: (calls.append(k), sim.run_frozen(lambda: sim.publish(0, next(iter(subs[0])), b""))))
    for t in range(1, 11):  # the sim runner advances in steps like this
        sim.run_until(float(t))
    assert calls == [0.5, 1.2, 1.6]
    assert sum(1 for name in sim.spans.columns["name"] if name == "publish") == 3
    assert sim.frozen_s > 0


def test_same_file_and_seed_give_the_same_spans_whatever_the_hash_seed(tmp_path):
    """Set iteration order of strings changes with PYTHONHASHSEED; the simulation must not."""
    import hashlib
    import os
    import subprocess
    import sys

    exp = {**BASE, "protocol": {"name": "poldercast", "params": {"cyclon": {"view_size": 6, "shuffle_length": 3}}},
           "workload": {"topics": 6, "subscriptions": {"min": 2, "max": 3}},
           "churn": {"model": "sessions", "fraction": 0.2, "session": {"mean_s": 3}, "downtime": {"mean_s": 2}}}
    digests = []
    for hash_seed in ("1", "2"):
        out = tmp_path / hash_seed
        code = ("import json, sys; from pathlib import Path; from controller.experiment.schema import parse_experiment;"
                "from controller.backends.rundir import RunDir; from controller.backends.sim import SimRunner;"
                "exp = parse_experiment(json.loads(sys.argv[1])); rd = RunDir.create(exp, Path(sys.argv[2]));"
                "SimRunner().run(exp, rd); print(rd.traces / 'spans.parquet')")
        done = subprocess.run([sys.executable, "-c", code, json.dumps({"name": "t", "seed": 3, "backend": "sim", **exp}),
                               str(out)], env={**os.environ, "PYTHONHASHSEED": hash_seed},
                              capture_output=True, text=True, check=True)
        rows = pq.read_table(done.stdout.strip().splitlines()[-1]).to_pylist()
        assert len(rows) > 100
        digests.append(hashlib.sha256(repr(rows).encode()).hexdigest())
    assert digests[0] == digests[1]


def test_ring_convergence_counts_gossip_cycles_not_frozen_rounds(tmp_path):
    """Frozen dissemination rounds move virtual time on but are no gossip cycles: snapshots carry
    the overlay's own clock, and ring convergence is reported per gossip cycle."""
    from analysis.overlay import snapshots
    from analysis.protocols.poldercast import RingConvergence
    from analysis.runfiles import read_stats

    exp, rd, _, _ = run(
        tmp_path, protocol={"name": "poldercast", "params": {"cyclon": {"view_size": 6, "shuffle_length": 3}}},
        nodes={"count": 40}, workload={"topics": 4, "subscriptions": {"min": 1, "max": 2}},
        publications={"mode": "per_topic", "rounds": 8, "round_interval_s": 1, "freeze": True},
        network={"delay": {"ms": 50}}, phases={"warmup_s": 0.5, "drain_s": 1}, outputs={"snapshot_every_s": 1})
    subs = {json.loads(line)["node"]: json.loads(line)["topics"] for line in (rd.path / "subscriptions.jsonl").read_text().splitlines()}
    meta = json.loads((rd.path / "run.json").read_text())
    tracker = RingConvergence(subs, meta["started_ns"], meta["cycle_s"])
    curve = [c for snap in snapshots(rd.path) if (c := tracker.add(snap.table)) is not None]
    assert meta["events_planned"] == 8 * 4 == _published(rd.path)  # per_topic: rounds x topics
    periodic = curve[:-1]  # the last one is the end-of-run snapshot
    assert [round(c["cycle"], 6) for c in periodic[:5]] == [1, 2, 3, 4, 5]
    assert periodic[4]["t_s"] > 5.05  # each frozen round took virtual time (50 ms hops)
    # Overhead per cycle counts gossip time only: a CYCLON node sends a request and answers one
    # per cycle on average (the frozen rounds are 0.1 s or more each, a fifth of the run here).
    from analysis.jobs.summarize import gossip_duration_s
    from analysis.overlay import overhead

    stats = read_stats(rd.path)
    assert meta["frozen_ns"] > 0.15 * (meta["ended_ns"] - meta["started_ns"])
    per_cycle = overhead(stats, gossip_duration_s(meta), meta["cycle_s"])["by_layer"]["cyclon"]["msgs_per_node_per_cycle"]
    assert 1.9 < per_cycle < 2.1, per_cycle


def test_variants_fork_after_the_warm_up_and_each_equals_its_own_run_from_scratch(tmp_path):
    """sim.variants builds the overlay once and forks before the first event; each variant's run
    directory holds exactly what a run of its own experiment.yaml writes (churn with fresh
    rejoins included: a core built after the fork gets the variant's parameters)."""
    import subprocess
    import sys

    import yaml

    exp = {"name": "v", "seed": 2, "backend": "sim",
           "protocol": {"name": "poldercast", "params": {"cyclon": {"view_size": 6, "shuffle_length": 3}}},
           "nodes": {"count": 40}, "workload": {"topics": 6, "subscriptions": {"min": 2, "max": 3}},
           "publications": {"mode": "per_topic", "rounds": 3, "freeze": True},
           "churn": {"model": "sessions", "fraction": 0.2, "session": {"mean_s": 3}, "downtime": {"mean_s": 2},
                     "rejoin": "fresh"},
           "network": {"delay": {"ms": 10}}, "phases": {"warmup_s": 5, "drain_s": 2},
           "outputs": {"snapshot_every_s": 2},
           "sim": {"variants": [{"fanout": 3, "shortcut_source": "cyclon"}, {"fanout": 2, "ring_failover": True}],
                   "parallel_variants": 2}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(exp))

    def cli_run(path, out):
        subprocess.run([sys.executable, "-m", "controller.cli.main", "run", str(path), "--out", str(out), "--no-analyze"],
                       check=True, capture_output=True, text=True)
        [rd] = out.iterdir()
        return rd

    sweep = cli_run(tmp_path / "sweep.yaml", tmp_path / "sweep")
    index = json.loads((sweep / "variants.json").read_text())
    assert [v["exit_code"] for v in index] == [0, 0]
    copies = []
    for v in index:
        forked = sweep / v["run_dir"]
        scratch = cli_run(forked / "experiment.yaml", tmp_path / v["run_dir"].replace("/", "-"))
        assert yaml.safe_load((forked / "experiment.yaml").read_text())["protocol"]["params"]["fanout"] == v["variant"]["fanout"]
        assert (forked / "subscriptions.jsonl").read_text() == (scratch / "subscriptions.jsonl").read_text()
        assert output_digests(forked) == output_digests(scratch)
        spans = pq.read_table(forked / "traces" / "spans.parquet").to_pylist()
        assert any(s["name"] == "publish" for s in spans)
        copies.append(sum(s["name"] == "receive" for s in spans))
    assert copies[0] != copies[1]  # fanout 3 and fanout 2 disseminated differently on the same overlay


def _published(run_dir) -> int:
    import pyarrow.parquet as pq

    names = pq.read_table(run_dir / "traces" / "spans.parquet", columns=["name"]).column("name").to_pylist()
    return names.count("publish")


def test_the_snapshots_the_runs_write_are_the_snapshots_the_analysis_reads():
    """The writer's schema (node) and the reader's (analysis, which imports nothing of node) are one."""
    from analysis.schemas import SNAPSHOTS
    from node.wire.snapshots import SNAPSHOT_SCHEMA

    assert SNAPSHOT_SCHEMA.equals(SNAPSHOTS)


def test_a_snapshot_table_reads_back_as_its_snapshots(tmp_path):
    """A snapshot written to the run directory reads back, row by row, as the snapshots taken:
    per node and layer, the neighbours, the per-topic links, the topics in name order."""
    from analysis.overlay import snapshots
    from controller.backends.rundir import Snapshots, snapshot_table
    from node.kit.types import LayerSnapshot, NodeSnapshot

    snaps = [NodeSnapshot(7, ["z", "b\u00e9", 'q"t'], [
        LayerSnapshot("cyclon", [3, 1]), LayerSnapshot("rings", []),
        LayerSnapshot("rings.succ", [], {"z": [4], "b\u00e9": [9, 2]})]),
        NodeSnapshot(2, [], [LayerSnapshot("cyclon", [7])])]
    rd = RunDir(tmp_path)
    Snapshots(rd).write(snapshot_table(snaps, 2 * 10**9, 5))
    Snapshots(rd).write(snapshot_table(snaps[1:], 10**9))
    first, second = snapshots(tmp_path)
    assert [r["node"] for r in first.rows] == [2] and first.rows[0]["gossip_ns"] == 10**9
    assert second.rows == [
        {"t_ns": 2 * 10**9, "gossip_ns": 5, "node": 7, "layer": "cyclon", "neighbours": [3, 1], "per_topic": {},
         "topics": ["b\u00e9", 'q"t', "z"]},
        {"t_ns": 2 * 10**9, "gossip_ns": 5, "node": 7, "layer": "rings", "neighbours": [], "per_topic": {},
         "topics": ["b\u00e9", 'q"t', "z"]},
        {"t_ns": 2 * 10**9, "gossip_ns": 5, "node": 7, "layer": "rings.succ", "neighbours": [],
         "per_topic": {"b\u00e9": [9, 2], "z": [4]}, "topics": ["b\u00e9", 'q"t', "z"]},
        {"t_ns": 2 * 10**9, "gossip_ns": 5, "node": 2, "layer": "cyclon", "neighbours": [7], "per_topic": {},
         "topics": []}]
    assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == [f"{10**9:020d}.parquet", f"{2 * 10**9:020d}.parquet"]
