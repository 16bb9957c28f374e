"""`overlaylab crosscheck`: the plain-Python computation of the core metrics agrees with the Spark
summary, also where every copy of an event ties on time (0 ms links), and finds a difference
when the summary is wrong."""

from __future__ import annotations

import json
import re
import shutil

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from analysis import metrics
from analysis.crosscheck import compare
from analysis.jobs import summarize
from controller.cli import progress
from controller.cli.main import main
from tests.helpers import cli_run, conformance_experiment, synthetic_run


@pytest.fixture(scope="module")
def zero_delay_run(tmp_path_factory):
    """PolderCast (fanout 3) on links of 0 ms: every copy of an event arrives at one instant."""
    exp = conformance_experiment("poldercast", network={"delay": {"model": "constant", "ms": 0}}, nodes={
        "count": 40, "bootstrap_contacts": 4, "contacts": "random"})
    exp["protocol"]["params"] = {"fanout": 3}
    return cli_run(exp, tmp_path_factory.mktemp("tie"))


def test_hops_are_the_flagged_first_copies_when_copies_tie_on_time(zero_delay_run):
    rd = zero_delay_run
    spans = pq.read_table(rd / "traces" / "spans.parquet").to_pylist()
    receives = [s for s in spans if s["name"] == "receive"]
    times = {}
    for s in receives:
        times.setdefault((s["event_id"], s["node"]), set()).add(s["time_ns"])
    assert sum(len(t) == 1 for t in times.values()) > 0  # copies that tie on time exist
    flagged = [s["hops"] for s in receives if s["first_copy"] and s["subscriber"]]
    summary = json.loads((rd / "summary.json").read_text())
    assert summary["hit_ratio"] == 1.0
    assert summary["hops"]["mean"] == pytest.approx(sum(flagged) / len(flagged))
    assert summary["hops"]["max"] == max(flagged)


def test_crosscheck_agrees_with_the_summary_and_catches_a_wrong_one(zero_delay_run, capsys):
    rd = zero_delay_run
    assert all(r["agree"] for r in compare(rd)), [r for r in compare(rd) if not r["agree"]]
    with pytest.raises(SystemExit) as done:
        main(["crosscheck", str(rd)])
    assert done.value.code == 0
    summary = json.loads((rd / "summary.json").read_text())
    summary["hops"]["mean"] += 0.5
    (rd / "summary.json").write_text(json.dumps(summary))
    assert [r["metric"] for r in compare(rd) if not r["agree"]] == ["hops.mean"]
    with pytest.raises(SystemExit) as done:
        main(["crosscheck", str(rd)])
    assert done.value.code == 1
    assert "hops.mean" in capsys.readouterr().out


def test_a_deliberate_difference_in_the_spark_analysis_is_reported(zero_delay_run, spark, tmp_path, monkeypatch):
    """The two computations share no rule: a Spark analysis that takes, of copies tied on time,
    the one with the most hops (a test-only switch) disagrees with the crosscheck on hops."""
    rd = tmp_path / "run"
    shutil.copytree(zero_delay_run, rd)

    monkeypatch.setattr(metrics, "first_copy_order", lambda: F.struct("time_ns", (-F.col("hops")).alias("most_hops")))
    summarize.run(rd, spark)
    differ = {r["metric"] for r in compare(rd) if not r["agree"]}
    assert "hops.mean" in differ and not differ - {"hops.mean", "hops.p50", "hops.p99", "hops.max"}


def test_crosscheck_of_a_run_not_analysed_says_so(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["crosscheck", str(tmp_path)])
    assert done.value.code == 2
    assert "has no summary.json" in capsys.readouterr().err


@pytest.mark.slow
def test_a_synthetic_run_is_analysed_and_crosschecked(tmp_path, monkeypatch, capsys):
    """The generator behind `make bench-spark` writes a run the analysis reads like any other;
    its ties (whole milliseconds), misses, duplicates, relays and churn agree in both computations."""
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0)  # the progress line of a long analysis, at every step
    rd = synthetic_run(tmp_path / "synthetic", spans=20000, nodes=400, topics=40, analyse=True)
    logged = capsys.readouterr().err
    assert re.search(r"analysis of synthetic: spans read and partitioned by event \(\d[\d,]+ rows\): 1/4 .* left", logged)
    assert "analysis of synthetic: done" in logged
    summary = json.loads((rd / "summary.json").read_text())
    meta = json.loads((rd / "run.json").read_text())
    assert summary["spans"]["publish"] + summary["spans"]["receive"] == meta["spans"] > 15_000
    assert 0.98 < summary["hit_ratio"] < 1.0 and summary["relay_ratio"] > 0 and summary["churn"]["crashes"] == 8
    assert all(r["agree"] for r in compare(rd)), [r for r in compare(rd) if not r["agree"]]
