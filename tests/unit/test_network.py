import statistics

import pytest

from controller.experiment.network import NetworkPlan
from controller.experiment.schema import parse_experiment
from controller.experiment.workloads import PlanError


def net(n=50, **network):
    return NetworkPlan(parse_experiment({"seed": 4, "nodes": {"count": n}, "network": network}))


def test_constant():
    assert net(delay={"model": "constant", "ms": 12}).base_delay(1, 2) == 12


@pytest.mark.parametrize("dist", ["uniform", "normal", "lognormal", "exponential", "pareto"])
def test_per_link_distributions_have_their_mean_and_are_fixed_per_link(dist):
    plan = net(n=200, delay={"model": "distribution", "distribution": dist, "mean_ms": 40, "std_ms": 10})
    values = [plan.base_delay(s, d) for s in range(200) for d in range(200) if s != d]
    assert statistics.mean(values) == pytest.approx(40, rel=0.08)
    if dist in ("uniform", "normal", "lognormal"):
        assert statistics.pstdev(values) == pytest.approx(10, rel=0.1)
    assert plan.base_delay(3, 7) == plan.base_delay(3, 7)
    assert net(n=200, delay={"model": "distribution", "distribution": dist}).base_delay(3, 7) == \
        net(n=200, delay={"model": "distribution", "distribution": dist}).base_delay(3, 7)


def test_geo_delay_is_symmetric_and_grows_with_distance():
    plan = net(delay={"model": "geo", "base_ms": 5, "ms_per_unit": 100})
    assert plan.base_delay(1, 2) == plan.base_delay(2, 1) >= 5
    assert plan.base_delay(3, 3) == 5
    assert max(plan.base_delay(0, j) for j in range(50)) <= 5 + 100 * 2 ** 0.5


def test_matrix_delay(tmp_path):
    m = tmp_path / "m.txt"
    m.write_text("0\t10\t20\n10\t0\t30\n20\t30\t0\n")
    plan = net(n=3, delay={"model": "matrix", "path": str(m), "scale": 0.5})
    values = sorted(plan.base_delay(s, d) for s in range(3) for d in range(3) if s != d)
    assert values == [5, 5, 10, 10, 15, 15]
    big = net(n=7, delay={"model": "matrix", "path": str(m)})  # more nodes than hosts: reused
    assert all(big.base_delay(s, d) in (0, 5, 10, 15) for s in range(7) for d in range(7))


def test_matrix_of_the_wrong_shape_names_the_row(tmp_path):
    m = tmp_path / "m.txt"
    m.write_text("0 10 20\n10 0\n20 30 0\n")
    with pytest.raises(PlanError, match="m.txt: row 2 has 2 values; a 3x3 matrix needs 3"):
        net(delay={"model": "matrix", "path": str(m)})
    m.write_text("0 x\n1 0\n")
    with pytest.raises(PlanError, match="m.txt:1: not a row of numbers"):
        net(delay={"model": "matrix", "path": str(m)})


def test_partitions_by_fraction_and_by_nodes():
    plan = net(n=100, partitions=[{"start_s": 1, "end_s": 2, "fraction": 0.25}, {"start_s": 3, "end_s": 4, "nodes": [1, 2]}])
    assert len(plan.partitions[0].nodes) == 25
    assert plan.partitions[1].nodes == {1, 2}
    with pytest.raises(PlanError, match=r"network.partitions.0.nodes: \[500\]"):
        net(n=10, partitions=[{"start_s": 1, "end_s": 2, "nodes": [500]}])
