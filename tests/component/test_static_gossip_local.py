"""static_gossip on 100 real gRPC peers (experiments/gossip-local.yaml): with per-link coins the
set of nodes each event reaches is the same on real peers under 30 ± 10 ms links as in the
simulator with and without delay, and the Spark summary's reach agrees with the plain-Python
crosscheck."""

import json
from pathlib import Path

import pytest

from analysis.crosscheck import compare
from controller.cli.main import main
from tests.conftest import ROOT
from tests.helpers import reached_sets

FILE = str(ROOT / "experiments" / "gossip-local.yaml")


def run(tmp_path: Path, name: str, *args: str) -> Path:
    out = tmp_path / name
    with pytest.raises(SystemExit) as done:
        main(["run", FILE, "--out", str(out), *args])
    assert done.value.code == 0
    [rd] = out.iterdir()
    return rd


@pytest.mark.slow
def test_the_reached_sets_are_the_same_on_real_peers_with_delay_and_in_the_simulator(tmp_path, capsys):
    local = run(tmp_path, "local")
    sim_delay = run(tmp_path, "sim", "--backend", "sim", "--no-analyze")
    sim_none = run(tmp_path, "sim0", "--backend", "sim", "--no-analyze",
                   "--set", "network.delay.ms=0", "--set", "network.jitter_ms=0")
    capsys.readouterr()
    sets = reached_sets(local)
    assert len(sets) == 40 and len(json.loads((local / "run.json").read_text())["topology"]) == 1
    assert sets == reached_sets(sim_delay) == reached_sets(sim_none)
    sizes = sorted(len(v) for v in sets.values())
    assert sizes[0] == 1 and sizes[-1] > 40  # some events die at the source, others take off (Γ > Γc)

    summary = json.loads((local / "summary.json").read_text())
    pm = summary["protocol_metrics"]
    assert pm["receivers_mean"] == pytest.approx(sum(sizes) / 40)
    assert summary["fidelity"]["delay_ms"]["measured_mean"] > 25  # the delay was there
    assert summary["errors"]["send_failed"] == 0 and pm["max_hops"] < pm["ttl"]
    disagree = [r for r in compare(local) if not r["agree"]]
    assert not disagree
