import pytest

from controller.experiment.schema import ExperimentError, apply_overrides, load_experiment, parse_experiment
from tests.conftest import ROOT

EXPERIMENTS = sorted((ROOT / "experiments").glob("*.yaml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_every_shipped_experiment_validates(path):
    exp = load_experiment(path)
    assert exp.name


@pytest.mark.parametrize("data, field, expected", [
    ({"nodez": {"count": 3}}, "nodez", "unknown field"),
    ({"nodes": {"count": "many"}}, "nodes.count", "valid integer"),
    ({"nodes": {"count": 0}}, "nodes.count", "greater than 0"),
    ({"protocol": {"name": "gossip", "params": {"gama": 0.5}}}, "protocol.gossip.params.gama", "unknown field"),
    ({"protocol": {"name": "gossip", "params": {"cyclon": {"view_size": "big"}}}}, "protocol.gossip.params.cyclon.view_size", "valid integer"),
    ({"protocol": {"name": "nosuch"}}, "protocol", "expected tags: 'dps', 'gossip', 'poldercast'"),
    ({"protocol": {"name": "poldercast", "params": {"fanout": 1}}}, "protocol.poldercast.params", "fanout must be at least 2"),
    ({"network": {"loss": 1.5}}, "network.loss", "less than or equal to 1"),
    ({"backend": "cloud"}, "backend", "'sim', 'local' or 'k8s'"),
    ({"workload": {"model": "uniform", "subscriptions": {"min": 3, "max": 2}}}, "workload.uniform.subscriptions", "exceeds max"),
    ({"workload": {"model": "zipfian"}}, "workload", "does not match any of the expected tags"),
    ({"workload": {"model": "zipf", "alpha": -1}}, "workload.zipf.alpha", "greater than or equal to 0"),
    ({"churn": {"model": "sessions", "session": {"distribution": "pareto", "shape": 0.5}}}, "churn.session", "shape > 1"),
    ({"churn": {"model": "trace"}}, "churn", "needs churn.path"),
    ({"network": {"delay": {"model": "matrix"}}}, "network.delay.matrix.path", "Field required"),
    ({"network": {"partitions": [{"start_s": 5, "end_s": 1, "fraction": 0.5}]}}, "network.partitions.0", "must come after"),
    ({"publications": {"rate_per_s": -3}}, "publications.rate_per_s", "greater than 0"),
])
def test_bad_fields_are_named_with_what_was_expected(data, field, expected):
    with pytest.raises(ExperimentError) as err:
        parse_experiment(data, source="exp.yaml")
    text = str(err.value)
    assert text.startswith("exp.yaml:")
    assert f"  {field}: " in text
    assert expected in text


def test_overrides_reach_any_field_and_parse_values():
    exp = load_experiment(ROOT / "experiments/quickstart.yaml",
                          ["nodes.count=64", "protocol.params.gamma=0.25", "network.loss=0.01", "backend=sim"])
    assert exp.nodes.count == 64
    assert exp.protocol.params.gamma == 0.25
    assert exp.network.loss == 0.01
    assert exp.backend == "sim"


def test_override_errors():
    with pytest.raises(ExperimentError, match="PATH=VALUE"):
        apply_overrides({}, ["nodes.count"])
    with pytest.raises(ExperimentError, match="not a section"):
        apply_overrides({"seed": 1}, ["seed.x=2"])
    with pytest.raises(ExperimentError, match="nodes.count"):
        load_experiment(ROOT / "experiments/quickstart.yaml", ["nodes.count=-1"])
    with pytest.raises(ExperimentError, match="'3' is not an index of a list of 1"):
        apply_overrides({"churn": {"phases": [{}]}}, ["churn.phases.3.at_s=1"])


def test_overrides_index_lists():
    exp = load_experiment(ROOT / "experiments/dps-crashes.yaml", ["churn.phases.0.probability=0.25"])
    assert exp.churn.phases[0].probability == 0.25
    assert apply_overrides({"a": [1, 2]}, ["a.1=5"]) == {"a": [1, 5]}


def test_unreadable_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [1, 2\n")
    with pytest.raises(ExperimentError, match="bad.yaml: cannot read"):
        load_experiment(bad)
    with pytest.raises(ExperimentError, match="missing.yaml"):
        load_experiment(tmp_path / "missing.yaml")


@pytest.mark.parametrize("variants, backend, expected", [
    ([{"ring_size": 6}], "sim", "sim.variants[0]: 'ring_size' is not a dissemination parameter of poldercast"),
    ([{"fanout": 2}, {"fanout": 1}], "sim", "sim.variants[1]: fanout must be at least 2"),
    ([{"shortcut_source": "nope"}], "sim", "sim.variants[0]: shortcut_source: Input should be 'both', 'cyclon' or 'vicinity'"),
    ([{"fanout": 3}, {"fanout": 3}], "sim", "sim.variants: two variants are the same"),
    ([{"fanout": 3}], "local", "only the sim backend forks a run into variants"),
])
def test_variant_errors_name_the_variant_and_what_was_expected(variants, backend, expected):
    with pytest.raises(ExperimentError) as err:
        parse_experiment({"backend": backend, "protocol": {"name": "poldercast"}, "sim": {"variants": variants}})
    assert expected in str(err.value)


def test_sweep_points_follow_the_grid_and_name_their_paths():
    from controller.experiment.schema import Sweep

    s = Sweep(grid={"a.b": [1, 2], "c": ["x"]}, points=[{"a.b": 9, "d.e": True}])
    assert s.settings() == [{"a.b": 1, "c": "x"}, {"a.b": 2, "c": "x"}, {"a.b": 9, "d.e": True}]
    assert s.paths() == ["a.b", "c", "d.e"]
    with pytest.raises(ValueError, match=r"points\[0\]: no settings"):
        Sweep(points=[{}])
    with pytest.raises(ValueError, match="cannot sweep its own settings"):
        Sweep(points=[{"sweep.seeds": [1]}])


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 10)}]\n" for p, k in zip("abcdefgh", "bcdefghi"))


@pytest.mark.parametrize("text, says", [
    (LAUGHS, "more than 100,000 values once its aliases are expanded"),  # 10^9 values expanded
    ("name: x\nnodes: " + "[" * 200 + "]" * 200 + "\n", "line 2: nested more than 32 levels deep"),
    ("name: x\nseed: 1\nname: y\n", "line 3: key 'name' given twice"),
    ("name: x\n#" + "y" * (2 << 20) + "\n", "bytes (at most 1,048,576)"),
])
def test_a_hostile_yaml_file_is_refused_at_once_and_says_why(tmp_path, text, says):
    import time

    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    start = time.monotonic()
    with pytest.raises(ExperimentError, match=f"{path}: cannot read: .*{says}".replace("(", r"\(").replace(")", r"\)")):
        load_experiment(path)
    assert time.monotonic() - start < 2


def test_a_set_value_goes_through_the_same_limits():
    with pytest.raises(ExperimentError, match=r"--set 'seed=\{a: 1, a: 2\}': line 1: key 'a' given twice"):
        apply_overrides({}, ["seed={a: 1, a: 2}"])


@pytest.mark.parametrize("data, says", [
    ({"network": {"delay": {"ms": 1e308}}}, "network.delay.constant.ms: Input should be less than or equal to 3600000"),
    ({"network": {"delay": {"ms": float("nan")}}}, "network.delay.constant.ms: Input should be a finite number"),
    ({"publications": {"rate_per_s": float("inf")}}, "publications.rate_per_s: Input should be a finite number"),
    ({"publications": {"rate_per_s": 1e9}}, "publications.rate_per_s: Input should be less than or equal to 100000"),
    ({"network": {"bandwidth_kbps": 1e-300}}, "network.bandwidth_kbps: Input should be greater than or equal to 1"),
])
def test_numbers_are_finite_and_within_their_physical_range(data, says):
    with pytest.raises(ExperimentError, match=says):
        parse_experiment({"name": "x", **data})


def test_a_data_path_that_leads_out_of_the_data_folder_is_refused_with_its_field(tmp_path, monkeypatch):
    monkeypatch.setenv("OVERLAYLAB_DATA_DIR", str(tmp_path / "datasets"))
    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nworkload:\n  model: trace\n  path: data:../../../../etc/passwd\n")
    with pytest.raises(ExperimentError, match=r"workload.path: 'data:../../../../etc/passwd' leads out of the data folder") as e:
        load_experiment(path)
    assert "root:" not in str(e.value)


def test_a_bad_line_of_a_data_file_is_named_by_its_field_and_number_never_echoed(tmp_path):
    from controller.experiment import plans
    from controller.experiment.datafiles import PlanError

    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    exp = parse_experiment({"name": "x", "nodes": {"count": 4}, "workload": {"model": "trace", "path": str(secret)}})
    with pytest.raises(PlanError, match=r"workload.path: .*secret.txt:1: expected 'node topic'") as e:
        plans.render(exp)
    assert "root" not in str(e.value).replace(str(tmp_path), "")


@pytest.mark.parametrize("text, says", [
    ("name: x\nsweep: {grid: {seed: " + str(list(range(1000))) + ", nodes.count: " + str(list(range(2, 1002))) + "}}\n",
     "sweep: Value error, 1,000,000 runs (points x seeds); at most 10,000"),
    ("name: x\nsweep: {grid: {nodes.count: [8, 0]}}\n", "sweep point 001_count-0_s1:\n"),
])
def test_validate_checks_every_sweep_point_as_sweep_does(tmp_path, capsys, text, says):
    from controller.cli.main import main

    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit) as done:
        main(["validate", str(path)])
    assert done.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("data, says", [
    ({"nodes": {"count": 10**8}}, "nodes.count: Input should be less than or equal to 1000000"),
    ({"publications": {"count": 10**9}}, "publications.count: Input should be less than or equal to 10000000"),
])
def test_counts_are_within_what_a_backend_can_run(data, says):
    import time

    start = time.monotonic()
    with pytest.raises(ExperimentError, match=says):
        parse_experiment({"name": "x", **data})
    assert time.monotonic() - start < 2
