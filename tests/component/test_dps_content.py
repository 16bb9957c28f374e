"""A DPS content run end to end (sim, Spark): the Table 1 shares in summary.json against the
same shares counted without Spark, from the plan's filters and events (numpy, the workload's
own matcher) and from the spans; ``overlaylab crosscheck`` agrees on the common metrics."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from controller.cli.main import main
from controller.experiment.content_workloads import matching_matrix
from node.protocols.dps.content import parse_event, parse_filter
from tests.helpers import cli_run

N = 150
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    exp = yaml.safe_load(open("experiments/dps-table1.yaml"))
    exp.update(nodes={"count": N, "contacts": "seed"}, publications={"count": 120, "rate_per_s": 40, "publisher": "any"},
               phases={"warmup_s": 20, "drain_s": 3})
    exp["workload"]["name"] = "stock"
    return cli_run(exp, tmp_path_factory.mktemp("dps"))


def test_table1_shares_agree_with_a_count_outside_spark(run):
    summary = json.loads((run / "summary.json").read_text())
    assert summary["hit_ratio"] == 1.0
    pm = summary["protocol_metrics"]
    subs = {json.loads(line)["node"]: json.loads(line)["topics"] for line in (run / "subscriptions.jsonl").open()}
    spans = pq.read_table(run / "traces" / "spans.parquet").to_pylist()
    pubs = sorted((s for s in spans if s["name"] == "publish"), key=lambda s: s["event_id"])
    nodes = sorted(subs)
    filters = [parse_filter(subs[v][0]) for v in nodes]
    match = matching_matrix(filters, [parse_event(p["topic"]) for p in pubs])  # events x nodes
    for k, p in enumerate(pubs):
        match[k, nodes.index(p["node"])] = False  # the publisher is not its own receiver
    reached = {}
    for s in spans:
        if s["name"] == "receive":
            reached.setdefault(s["event_id"], set()).add(s["node"])
    contacted = [len(reached.get(p["event_id"], set()) - {p["node"]}) for p in pubs]
    false_pos = [len(reached.get(p["event_id"], set()) - {p["node"]} - {nodes[j] for j in np.flatnonzero(match[k])})
                 for k, p in enumerate(pubs)]
    assert pm["events"] == len(pubs) == 120
    assert pm["matching_pct"] == pytest.approx(100 * match.sum(axis=1).mean() / N)
    assert pm["contacted_pct"] == pytest.approx(100 * np.mean(contacted) / N)
    assert pm["false_positive_pct"] == pytest.approx(100 * np.mean(false_pos) / N)
    assert 0 < pm["matching_pct"] < pm["contacted_pct"] < 100


def test_crosscheck_agrees_on_a_content_run(run, capsys):
    with pytest.raises(SystemExit) as done:
        main(["crosscheck", str(run)])
    assert done.value.code == 0, capsys.readouterr().out
