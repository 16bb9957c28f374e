"""`overlaylab model` over a sweep of static_gossip runs (sweep.points, not a grid): the model
the command evaluates on re-rendered graphs equals the one each run's analysis evaluated on the
graphs its run.json recorded, and the simulated means stand beside it."""

import json

import pytest
import yaml

from controller.cli.main import main
from tests.conftest import ROOT


@pytest.mark.slow
def test_model_against_a_sweep_of_listed_points(tmp_path, capsys):
    exp = yaml.safe_load((ROOT / "experiments" / "gossip-poisson.yaml").read_text())
    exp["nodes"]["count"] = 1000
    exp["sim"]["networks"] = 2
    exp["publications"]["count"] = 100
    exp["sweep"] = {"points": [{"protocol.params.gamma": 0.05, "workload.sigma": 0.05},
                               {"protocol.params.gamma": 0.3, "workload.sigma": 0.1}]}
    file = tmp_path / "g.yaml"
    file.write_text(yaml.safe_dump(exp))
    with pytest.raises(SystemExit) as done:
        main(["sweep", str(file), "--out", str(tmp_path / "out")])
    assert done.value.code == 0
    [sweep_dir] = (tmp_path / "out").iterdir()
    with pytest.raises(SystemExit) as done:
        main(["model", str(file), "--results", str(sweep_dir)])
    assert done.value.code == 0
    assert "model against simulation" in capsys.readouterr().err  # the console writes to stderr
    rows = json.loads((sweep_dir / "model.json").read_text())["rows"]
    assert [r["regime"] for r in rows] == ["below", "above"]
    assert (sweep_dir / "model.png").stat().st_size > 0 and (sweep_dir / "model.csv").exists()
    points = json.loads((sweep_dir / "sweep.json").read_text())["points"]
    for row, point in zip(rows, points, strict=True):
        summary = json.loads((sweep_dir / point["run_dir"] / "summary.json").read_text())
        pm = summary["protocol_metrics"]
        assert len(pm["receivers_mean_per_network"]) == 2 and pm["events"] == 200
        assert row["model_receivers"] == pytest.approx(pm["model"]["receivers_mean"], rel=1e-9)
        assert row["sim_receivers"] == pm["receivers_mean"]
        assert row["sim_over_model"] == pytest.approx(pm["receivers_mean"] / row["model_receivers"])
    below, above = rows
    assert 0.7 < below["sim_over_model"] < 1.3  # eq. 17 at Gamma 0.0975, 200 events
    assert above["sim_receivers"] > 200  # above Gamma_c the events take off
