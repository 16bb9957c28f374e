"""Runs on a host that falls behind (issue 57; SIGSTOP of a peer process stands in for an
overloaded host): a stalled process is unresponsive, not crashed, and its stall shows in
``fidelity.verdict``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time

from analysis.fidelity import covered_s, verdict
from analysis.jobs.summarize import partial
from controller.backends import driver, local
from controller.backends.local import LocalRunner
from controller.backends.rundir import RunDir
from controller.experiment.schema import parse_experiment


def two_processes(name: str, publications: int, rate_per_s: float, drain_s: float, network: dict | None = None):
    """Six flooding peers in two processes (nodes 0-2 and 3-5); no link probes unless ``network`` asks."""
    return parse_experiment({
        "name": name, "seed": 3, "backend": "local",
        "protocol": {"name": "gossip", "params": {"gamma": 1.0, "cyclon": {"view_size": 4, "shuffle_length": 2}}},
        "nodes": {"count": 6, "peers_per_process": 3},
        "workload": {"topics": 2, "subscriptions": {"min": 1, "max": 1}},
        "publications": {"count": publications, "rate_per_s": rate_per_s},
        "network": {"delay": {"ms": 5}, "fidelity_links": 0, **(network or {})},
        "phases": {"warmup_s": 2, "drain_s": drain_s},
    })


def test_a_stalled_peer_process_is_unresponsive_not_crashed(tmp_path, monkeypatch):
    exp = two_processes("stalled", publications=4, rate_per_s=4, drain_s=1)
    monkeypatch.setattr(driver, "RPC_TIMEOUT_S", 2.0)
    stalled: list[int] = []
    fidelity = local._LocalRun._fidelity

    async def stall_then_collect(self):
        proc = self.host_of[3]  # the second process: nodes 3 to 5
        os.kill(proc.pid, signal.SIGSTOP)
        stalled.extend(n for n, p in self.host_of.items() if p is proc)
        asyncio.get_running_loop().call_later(8.0, os.kill, proc.pid, signal.SIGCONT)
        return await fidelity(self)
    monkeypatch.setattr(local._LocalRun, "_fidelity", stall_then_collect)
    rd = RunDir.create(exp, tmp_path)
    LocalRunner().run(exp, rd)
    timeline = [json.loads(line) for line in (rd.path / "timeline.jsonl").read_text().splitlines()]
    meta = json.loads((rd.path / "run.json").read_text())
    assert meta["status"] == "complete" and sorted(stalled) == [3, 4, 5]
    assert not [e for e in timeline if e["kind"] == "crash"]
    record = partial(meta, timeline)
    assert record["unplanned_crashes"] == []
    assert {u["node"] for u in record["unresponsive"]} == {3, 4, 5}
    assert all(u["missed"] == 3 for u in record["unresponsive"])  # the snapshot, Leave and the counters
    assert all(u["why"].endswith("DEADLINE_EXCEEDED") for u in record["unresponsive"])
    assert record["nodes_affected"] == [3, 4, 5]


def test_a_peer_process_starved_mid_run_degrades_that_window_and_no_other(tmp_path, monkeypatch):
    """Issue 57: a peer process stopped for 3 s in the middle of a run (SIGSTOP: its event loop
    gets no CPU, as on a host that cannot keep up) gets ``degraded`` windows covering the stall
    and none elsewhere; the run's verdict is ``degraded``, not ``ok`` or ``invalid``. The link
    probes during the run (a round a second on 6 links) see the stall too. The load phase (36 s)
    is long enough that the stall, with what a busy machine adds, stays well under half of it."""
    exp = two_processes("starved", publications=72, rate_per_s=2, drain_s=2,
                        network={"fidelity_links": 6, "fidelity_every_s": 1.0, "fidelity_probes": 5})
    runs: list = []
    start_peers = local._LocalRun.start_peers

    async def keep(self):
        runs.append(self)
        await start_peers(self)
    monkeypatch.setattr(local._LocalRun, "start_peers", keep)
    rd = RunDir.create(exp, tmp_path)
    run = threading.Thread(target=LocalRunner().run, args=(exp, rd))
    run.start()
    try:
        deadline = time.monotonic() + 60
        while not (runs and len(runs[0].host_of) == 6 and (rd.path / "timeline.jsonl").exists()
                   and '"kind": "host"' in (rd.path / "timeline.jsonl").read_text()):
            assert time.monotonic() < deadline and run.is_alive(), "no load readings"
            time.sleep(0.2)
        time.sleep(4.0)  # some readings before the stall
        proc = runs[0].host_of[3]
        stalled_from = time.time_ns()
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(3.0)
        os.kill(proc.pid, signal.SIGCONT)
        stalled_to = time.time_ns()
    finally:
        run.join(timeout=120)
    meta = json.loads((rd.path / "run.json").read_text())
    timeline = [json.loads(line) for line in (rd.path / "timeline.jsonl").read_text().splitlines()]
    v = verdict(meta, timeline, None)
    assert meta["status"] == "complete" and v["verdict"] == "degraded", v
    lo, hi = (stalled_from - meta["started_ns"]) / 1e9, (stalled_to - meta["started_ns"]) / 1e9
    mine = [w for w in v["windows"] if w["node"] == 3]
    # every degraded window of the stalled process overlaps the stall (a window reaches back to
    # the reading before it), and they cover it; the other process's windows are degraded only
    # if that process fell behind too (on a busy machine it may: its loop gets the CPU late)
    assert mine and all(w["end_s"] > lo and w["start_s"] < hi + 1.5 for w in mine), (lo, hi, v["windows"])
    assert covered_s(mine) >= 0.8 * (hi - lo) and covered_s(mine) <= hi - lo + 3.0, (lo, hi, mine)
    # the probe rounds: about one a second, and one whose links reached the stopped process
    # during the stall lost its probes or got them late
    rounds = [e["round"] for e in timeline if e["kind"] == "probe"]
    assert v["probe_rounds"] == len(set(rounds)) >= 8, v["probe_rounds"]
    probed = [w for w in v["windows"] if w["node"] is None]
    assert any(w["start_s"] < hi and w["end_s"] > lo for w in probed), (lo, hi, probed)
