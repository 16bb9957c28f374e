"""The rejoin rule on the simulator: a fresh rejoin is a new incarnation with draws of its own
and new event ids; resume keeps the core."""

from __future__ import annotations

import random

import pyarrow.parquet as pq
import pytest

from controller.backends import sim as sim_backend
from controller.backends.rundir import RunDir
from controller.backends.sim import SimRunner
from controller.experiment.schema import parse_experiment
from node.kit.rejoin import core_seed

pytestmark = pytest.mark.unit

BASE = {
    "name": "rejoin", "seed": 3, "backend": "sim",
    "protocol": {"name": "gossip", "params": {"gamma": 1.0, "cyclon": {"view_size": 6, "shuffle_length": 3}}},
    "nodes": {"count": 30},
    "workload": {"topics": 2, "subscriptions": {"min": 1, "max": 1}},
    "publications": {"count": 60, "rate_per_s": 4, "publisher": "any"},
    "phases": {"warmup_s": 3, "drain_s": 2},
}


def draws(rng: random.Random, n: int = 10) -> list[float]:
    copy = random.Random()
    copy.setstate(rng.getstate())
    return [copy.random() for _ in range(n)]


def run_recording_cores(tmp_path, monkeypatch, rejoin: str) -> tuple[dict[int, list], list[dict]]:
    """Run with churn; every core the run builds, per node in order, with its first 10 draws."""
    built: dict[int, list] = {}
    new_core = sim_backend._SimRun.new_core

    def recording(self, i):
        core = new_core(self, i)
        built.setdefault(i, []).append((core, draws(core.rng)))
        return core
    monkeypatch.setattr(sim_backend._SimRun, "new_core", recording)
    exp = parse_experiment({**BASE, "churn": {
        "model": "sessions", "fraction": 0.3, "session": {"distribution": "constant", "mean_s": 4},
        "downtime": {"distribution": "constant", "mean_s": 2}, "rejoin": rejoin}})
    rd = RunDir.create(exp, tmp_path)
    SimRunner().run(exp, rd)
    return built, pq.read_table(rd.traces / "spans.parquet").to_pylist()


def test_a_fresh_rejoin_draws_differently_from_the_first_life_and_publishes_new_ids(tmp_path, monkeypatch):
    built, spans = run_recording_cores(tmp_path, monkeypatch, "fresh")
    lives = {i: cores for i, cores in built.items() if len(cores) > 1}
    assert len(lives) >= 5
    for i, cores in lives.items():
        first = cores[0][1]
        assert first == draws(random.Random(core_seed(3, i, 0)))  # the first life: the node's own seed
        for k, (core, drawn) in enumerate(cores[1:], start=1):
            assert drawn != first and drawn == draws(random.Random(core_seed(3, i, k)))
            assert core.incarnation == str(k)
    ids = [s["event_id"] for s in spans if s["name"] == "publish"]
    assert len(ids) == len(set(ids)) == 60
    assert any(e.split("-")[1] != "0" for e in ids)  # some published by a later life


def test_resume_keeps_the_core(tmp_path, monkeypatch):
    built, _ = run_recording_cores(tmp_path, monkeypatch, "resume")
    assert all(len(cores) == 1 for cores in built.values())


def test_keep_state_is_resume_s_former_name():
    exp = parse_experiment({**BASE, "churn": {"model": "sessions", "rejoin": "keep_state"}})
    assert exp.churn.rejoin == "resume"
