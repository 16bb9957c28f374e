import gzip
import statistics

import pytest

from controller.experiment import churn
from controller.experiment.dynamics import Lengths
from controller.experiment.schema import parse_experiment
from controller.experiment.workloads import PlanError


def plan(n=100, end=200.0, **c):
    return churn.render(parse_experiment({"seed": 2, "nodes": {"count": n}, "phases": {"warmup_s": 10}, "churn": c}), end)


def test_none_is_empty():
    p = plan(model="none")
    assert p.events == [] and p.offline_at_start == set()


@pytest.mark.parametrize("dist", ["exponential", "weibull", "pareto", "constant"])
def test_length_distributions_have_their_mean(dist):
    import random
    d = Lengths(distribution=dist, mean_s=10.0, shape=2.5)
    rng = random.Random(1)
    assert statistics.mean(churn.draw_length(d, rng) for _ in range(40000)) == pytest.approx(10.0, rel=0.05)


def test_sessions_alternate_and_respect_the_fraction():
    p = plan(model="sessions", fraction=0.2, session={"mean_s": 20}, downtime={"mean_s": 10}, start_s=5)
    nodes = {e.node for e in p.events}
    assert len(nodes) == 20
    for node in nodes:
        kinds = [e.kind for e in p.events if e.node == node]
        assert kinds[0] == "crash" and all(a != b for a, b in zip(kinds, kinds[1:]))
    assert min(e.at_s for e in p.events) >= 15 and max(e.at_s for e in p.events) < 200
    assert p.events == sorted(p.events)


def test_poisson_arrivals_start_offline():
    p = plan(model="sessions", fraction=0.1, arrival_rate_per_s=0.5, leave="graceful")
    assert len(p.offline_at_start) == 10
    first = sorted(min(e.at_s for e in p.events if e.node == v) for v in p.offline_at_start)
    assert all(e.kind in ("join", "leave") for e in p.events)
    assert first == sorted(first) and first[0] > 10


def test_flash_crowd_and_sharp_drop():
    p = plan(n=100, model="none", phases=[
        {"kind": "flash_crowd", "at_s": 20, "nodes": 30, "over_s": 10},
        {"kind": "sharp_drop", "at_s": 50, "fraction": 0.5, "return_after_s": 20},
    ])
    assert len(p.offline_at_start) == 30
    assert len(p.alive_at(29.9, 100)) == 70 + sum(1 for e in p.events if e.kind == "join" and e.at_s <= 29.9)
    assert len(p.alive_at(45, 100)) == 100
    assert len(p.alive_at(60.5, 100)) == 50
    assert len(p.alive_at(81, 100)) == 100


def test_crash_series_draw_one_live_node_per_step_with_the_given_probability_and_spare_some():
    p = plan(n=1000, end=1000, model="none", phases=[
        {"kind": "crashes", "at_s": 0, "until_s": 600, "every_s": 0.2, "probability": 0.1, "spare": [0]},
        {"kind": "crashes", "at_s": 700, "until_s": 800, "every_s": 0.4, "spare": [0]}])
    warm = min(e.at_s for e in p.events if e.at_s > 650) - 700  # phases start after the warm-up
    steady = [e for e in p.events if e.at_s < warm + 600]
    assert 240 <= len(steady) <= 360  # 3,000 draws at p = 0.1
    burst = [e.at_s - warm for e in p.events if e.at_s >= warm + 600]
    assert len(burst) == 250 and burst[0] == pytest.approx(700) and burst[-1] == pytest.approx(799.6)
    assert all(e.kind == "crash" for e in p.events) and 0 not in {e.node for e in p.events}
    assert len({e.node for e in p.events}) == len(p.events)  # each node crashes once
    assert len(p.alive_at(900, 1000)) == 1000 - len(p.events)


def test_plain_trace_replay_and_scaling(tmp_path):
    f = tmp_path / "churn.txt"
    f.write_text("# node join leave\na 0 100\nb 50 -\na 150 inf\n")
    p = plan(n=3, end=100, model="trace", path=str(f), time_scale=2)
    assert p.offline_at_start == {0, 1, 2}
    assert [(e.at_s, e.node, e.kind) for e in p.events] == [(0, 0, "join"), (25, 1, "join"), (50, 0, "crash"), (75, 0, "join")]


@pytest.mark.parametrize("line, message", [
    ("a 5\n", "expected 'node join_s leave_s'"),
    ("a x 5\n", "must be numbers"),
    ("a 9 5\n", "join_s <= leave_s"),
])
def test_malformed_trace_names_file_and_line(tmp_path, line, message):
    f = tmp_path / "churn.txt"
    f.write_text("a 0 1\n" + line)
    with pytest.raises(PlanError, match=f"churn.txt:2: .*{message}"):
        plan(model="trace", path=str(f))


def test_peersim_sessions(tmp_path):
    f = tmp_path / "s.txt.gz"
    with gzip.open(f, "wt") as g:
        g.write("u1 1 1000000 2 4000 2000 3000\n")   # online 4 s, offline 2 s, online 3 s
        g.write("u2 0 1000000 0 1000 5000\n")        # offline 1 s, online 5 s
    p = plan(n=2, end=100, model="trace", path=str(f), format="peersim")
    got = [(e.at_s, e.node, e.kind) for e in p.events]
    assert got == [(0.0, 0, "join"), (1.0, 1, "join"), (4.0, 0, "crash"), (6.0, 0, "join"), (6.0, 1, "crash"), (9.0, 0, "crash")]
