"""A default local run is closed to the machine's other users (issue 52): a process that drops
to uid nobody, given every peer's addresses, can neither call a peer nor act on one (publish into
it). The same attack on a run that listens on 127.0.0.1 without TLS (``security.listen: tcp``)
gets through, publishing events the plan never had (so the test can fail), and the run's summary
says so (``partial.unplanned_control``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from analysis.jobs.summarize import partial
from controller.backends import local
from controller.backends.local import LocalRunner
from controller.backends.rundir import RunDir
from controller.experiment.schema import parse_experiment
from tests.component.test_local_peers import otlp_spans

pytestmark = [pytest.mark.component,
              pytest.mark.skipif(os.geteuid() != 0, reason="plays another user by dropping root's privileges")]
NOBODY = 65534
NODES = 6


def attacked_run(tmp_path, monkeypatch, security: dict) -> tuple[dict, int, int, list[dict]]:
    """Run a small local run while another user attacks it; returns each call's outcome, the
    events the plan published, the events the traces hold, and the run's partial record (from
    its timeline, as summary.json has it)."""
    exp = parse_experiment({
        "name": "other-user", "seed": 5, "backend": "local",
        "protocol": {"name": "gossip", "params": {"gamma": 1.0, "cyclon": {"view_size": 4, "shuffle_length": 2}}},
        "nodes": {"count": NODES, "peers_per_process": 3},
        "workload": {"topics": 2, "subscriptions": {"min": 1, "max": 1}},
        "publications": {"count": 6, "rate_per_s": 3},
        "network": {"delay": {"ms": 5}, "fidelity_links": 0},
        "phases": {"warmup_s": 4, "drain_s": 1},
        "security": security,
    })
    rd = RunDir.create(exp, tmp_path)
    attacker = subprocess.Popen([sys.executable, "-m", "tests.component.other_user", str(NOBODY)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    found: list[tuple[str, str]] = []
    all_up = threading.Event()
    connect = local._LocalRun._connect

    def spy(self, node, addr, control_addr):
        found.append((addr, control_addr))
        if len(found) == NODES:
            all_up.set()
        connect(self, node, addr, control_addr)
    monkeypatch.setattr(local._LocalRun, "_connect", spy)
    run = threading.Thread(target=LocalRunner().run, args=(exp, rd))
    run.start()
    try:
        assert all_up.wait(90), "the peers never came up"
        out, _ = attacker.communicate(json.dumps(found) + "\n", timeout=60)  # during the warm-up
    finally:
        attacker.kill()
        run.join(timeout=120)
    assert not run.is_alive()
    published = [s for s in otlp_spans(rd.traces) if s["name"] == "publish"]
    timeline = [json.loads(line) for line in (rd.path / "timeline.jsonl").read_text().splitlines()]
    meta = json.loads((rd.path / "run.json").read_text())
    return json.loads(out), exp.publications.count, len(published), partial(meta, timeline)


def test_another_user_can_neither_reach_nor_act_on_a_default_local_run(tmp_path, monkeypatch):
    outcome, planned, published, fell_short = attacked_run(tmp_path, monkeypatch, {})
    calls = [code for methods in outcome.values() for code in methods.values()]
    assert sum("Publish" in methods for methods in outcome.values()) == NODES  # every peer's Control, and its Peer service
    assert all(code == "UNAVAILABLE" for code in calls), outcome
    assert all(addr.startswith("unix:") for addr in outcome)
    assert published == planned and fell_short is None


def test_the_same_attack_on_peers_listening_on_tcp_gets_through(tmp_path, monkeypatch):
    outcome, planned, published, fell_short = attacked_run(tmp_path, monkeypatch, {"listen": "tcp"})
    calls = [code for methods in outcome.values() for code in methods.values()]
    assert sum("Publish" in methods for methods in outcome.values()) == NODES
    assert all(code == "OK" for code in calls), outcome
    assert published == planned + NODES  # one forged publication into every peer
    # ... which the run records: the peers counted the calls without the run's caller token
    assert fell_short["unplanned_control"] == [{"node": n, "calls": {"Publish": 1}} for n in range(NODES)]
    assert fell_short["nodes_affected"] == list(range(NODES))
