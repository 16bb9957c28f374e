"""Busy is not dead (issue 57): a peer process that cannot answer the end-of-run snapshot and
counters because it is stalled (SIGSTOP here; an overloaded host in the issue) is recorded as
unresponsive, not as an unplanned crash, and the run says so in ``partial``."""

from __future__ import annotations

import asyncio
import json
import os
import signal

from analysis.jobs.summarize import partial
from controller.backends import driver, local
from controller.backends.local import LocalRunner
from controller.backends.rundir import RunDir
from controller.experiment.schema import parse_experiment


def test_a_stalled_peer_process_is_unresponsive_not_crashed(tmp_path, monkeypatch):
    exp = parse_experiment({
        "name": "stalled", "seed": 3, "backend": "local",
        "protocol": {"name": "gossip", "params": {"gamma": 1.0, "cyclon": {"view_size": 4, "shuffle_length": 2}}},
        "nodes": {"count": 6, "peers_per_process": 3},
        "workload": {"topics": 2, "subscriptions": {"min": 1, "max": 1}},
        "publications": {"count": 4, "rate_per_s": 4},
        "network": {"delay": {"ms": 5}, "fidelity_links": 0},
        "phases": {"warmup_s": 2, "drain_s": 1},
    })
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
    assert all(u["why"].endswith("DEADLINE_EXCEEDED") for u in record["unresponsive"])
    assert record["nodes_affected"] == [3, 4, 5]
