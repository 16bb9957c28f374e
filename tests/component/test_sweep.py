"""`overlaylab sweep`: every point of a grid run in parallel, analysed, and tabled; bad points
refused before anything runs."""

import csv
import json

import pytest
import yaml

from controller.cli.main import main
from controller.cli.sweep import point_row, points
from tests.conftest import ROOT


def sweep_file(tmp_path, grid: dict, seeds=(1, 2)) -> str:
    exp = yaml.safe_load((ROOT / "experiments" / "sweep-gossip-gamma.yaml").read_text())
    exp["nodes"]["count"] = 30
    exp["publications"].update(count=20)
    exp["phases"]["warmup_s"] = 5
    exp["sweep"] = {"grid": grid, "seeds": list(seeds)}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(exp))
    return str(path)


@pytest.mark.slow
def test_a_sweep_runs_every_point_and_tables_them(tmp_path, capsys):
    file = sweep_file(tmp_path, {"protocol.params.gamma": [0.0, 1.0]})
    with pytest.raises(SystemExit) as done:
        main(["sweep", file, "--out", str(tmp_path / "out"), "--parallel", "2"])
    assert done.value.code == 0
    [sweep_dir] = (tmp_path / "out").iterdir()
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert record["parallel"] == 2 and [p["rc"] for p in record["points"]] == [0, 0, 0, 0]
    assert [(p["settings"], p["seed"]) for p in record["points"]] == [
        ({"protocol.params.gamma": g}, s) for g in (0.0, 1.0) for s in (1, 2)]
    # Each point ran its own settings and seed...
    for p in record["points"]:
        ran = yaml.safe_load((sweep_dir / p["run_dir"] / "experiment.yaml").read_text())
        assert ran["protocol"]["params"]["gamma"] == p["settings"]["protocol.params.gamma"]
        assert ran["seed"] == p["seed"] and ran["nodes"]["count"] == 30
    # ... and the table tells them apart: gamma 0 never relays, flooding delivers everything.
    rows = {(r["protocol.params.gamma"], r["seed"]): r for r in record["rows"]}
    for seed in (1, 2):
        assert rows[(0.0, seed)]["relay"] == 0.0 < rows[(1.0, seed)]["relay"]
        assert rows[(1.0, seed)]["hit ratio"] == 1.0
        summary = json.loads((sweep_dir / rows[(1.0, seed)]["run_dir"] / "summary.json").read_text())
        assert summary["relay_ratio"] == rows[(1.0, seed)]["relay"] and summary["seed"] == seed
    with open(sweep_dir / "sweep.csv") as f:
        assert len(list(csv.DictReader(f))) == 4
    capsys.readouterr()

    with pytest.raises(SystemExit) as done:
        main(["compare", str(sweep_dir), "--json"])
    assert done.value.code == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 4


def test_a_bad_point_is_refused_before_anything_runs(tmp_path, capsys):
    file = sweep_file(tmp_path, {"nodes.count": [30, -5]}, seeds=[1])
    with pytest.raises(SystemExit) as done:
        main(["sweep", file, "--out", str(tmp_path / "out")])
    assert done.value.code != 0
    err = capsys.readouterr().err
    assert "001_count--5_s1" in err and "nodes.count" in err
    assert not (tmp_path / "out").exists()


def test_an_empty_grid_value_list_names_the_path(tmp_path, capsys):
    file = sweep_file(tmp_path, {"nodes.count": []}, seeds=[1])
    with pytest.raises(SystemExit):
        main(["sweep", file, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert "sweep.grid" in err and "nodes.count: no values" in err


def test_a_point_that_wrote_no_result_is_a_failed_row(tmp_path):
    """What the k8s path reads back for an index whose pod never wrote its point.json."""
    _, todo = points(sweep_file(tmp_path, {"nodes.count": [30]}, seeds=[1]))
    assert point_row(tmp_path, todo[0]) == {"point": "000_count-30_s1", "settings": {"nodes.count": 30}, "seed": 1,
                                             "rc": -1, "wall_s": None, "run_dir": None}


def test_an_interrupted_sweep_resumes_where_it_stopped(tmp_path):
    file = sweep_file(tmp_path, {"protocol.params.gamma": [0.0, 1.0]}, seeds=[1])
    with pytest.raises(SystemExit) as done:
        main(["sweep", file, "--out", str(tmp_path / "out"), "--no-analyze"])
    assert done.value.code == 0
    [sweep_dir] = (tmp_path / "out").iterdir()
    first = json.loads((sweep_dir / "sweep.json").read_text())["points"]
    for p in first:
        (sweep_dir / p["point"] / "marker").touch()
    (sweep_dir / first[1]["point"] / "point.json").unlink()  # as if killed while running point 1
    (sweep_dir / "sweep.json").unlink()
    with pytest.raises(SystemExit) as done:
        main(["sweep", file, "--resume", str(sweep_dir), "--no-analyze"])
    assert done.value.code == 0
    again = json.loads((sweep_dir / "sweep.json").read_text())["points"]
    assert again[0] == first[0] and (sweep_dir / first[0]["point"] / "marker").exists()  # kept
    assert again[1]["rc"] == 0 and not (sweep_dir / first[1]["point"] / "marker").exists()  # run again
    assert len(list((sweep_dir / first[1]["point"]).iterdir())) == 3  # log, point.json, one run
    # the file changed since: a point whose settings differ runs again, whatever its index
    sweep_file(tmp_path, {"protocol.params.gamma": [0.0, 0.5]}, seeds=[1])
    with pytest.raises(SystemExit) as done:
        main(["sweep", file, "--resume", str(sweep_dir), "--no-analyze"])
    assert done.value.code == 0
    changed = json.loads((sweep_dir / "sweep.json").read_text())["points"]
    assert changed[0] == first[0] and changed[1]["point"] == "001_gamma-0.5_s1" and changed[1]["rc"] == 0
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["000_gamma-0.0_s1", "001_gamma-0.5_s1"]
