"""The claims registry of `overlaylab reproduce` (controller/reproduce/): every paper's claims
listed, every check's runs valid experiment files, and the verdict rules on hand-made numbers."""

from __future__ import annotations

import pytest
import yaml

from controller.experiment.schema import load_experiment
from controller.reproduce import registry, select
from controller.reproduce.claims import CLAIMS, Expect, mean_sd
from controller.reproduce.papers import dps
from controller.reproduce.runner import judge, needed

pytestmark = pytest.mark.unit

COUNTS = {"poldercast": 17, "spidercast": 18, "stan": 14, "dps": 14, "ferretti": 9}
"""P1-P17, C1-C18, S1-S14, R1-R14, F1-F9: the design specs' checkable headlines."""


def test_every_claim_of_every_paper_is_listed_with_a_check_or_why_not():
    claims = registry()
    assert {p: len(cs) for p, cs in claims.items()} == COUNTS
    for paper, cs in claims.items():
        assert [c.id for c in cs] == [r["id"] for r in yaml.safe_load((CLAIMS / f"{paper}.yaml").read_text())]
        for c in cs:
            assert c.statement and c.source
            assert c.check is not None or c.why_not


@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_every_run_a_check_needs_is_a_valid_experiment(scale):
    keys = needed([c for cs in registry().values() for c in cs], scale)
    assert keys
    for file, sets in keys:
        exp = load_experiment(file, list(sets))
        assert exp.backend == "sim", (file, sets)


def test_select_takes_papers_and_claim_ids_and_names_what_it_does_not_know():
    assert [c.id for c in select(["C2", "p1"])["spidercast"]] == ["C2"]
    assert list(select(["stan"])) == ["stan"]
    with pytest.raises(ValueError, match="no paper or claim called x9"):
        select(["X9"])


def test_verdict_rules():
    assert Expect("<=", 60).verdict(42.0) == "reproduced"
    assert Expect("<=", 60).verdict(None) == "not reproduced"
    assert Expect(">=", 1.0).verdict(0.999) == "not reproduced"
    assert Expect("true").verdict(True) == "reproduced" and Expect("true").verdict(False) == "not reproduced"
    table = Expect("==", [10.81, 10.11, 9.53], tol=0.06, shape="decreasing")
    assert table.verdict([11.2, 10.5, 9.9]) == "within tolerance"
    assert table.verdict([13.0, 12.0, 11.0]) == "shape only"
    assert table.verdict([13.0, 12.0, 12.5]) == "not reproduced"
    assert Expect("==", [25.13, 54.74], abs_tol=5.0).verdict([24.3, 49.8]) == "within tolerance"
    assert Expect("==", 0.4, tol=0.25).verdict(mean_sd([0.31, 0.33, 0.29])) == "within tolerance"
    assert Expect("decreasing").verdict([3, 2, 1]) == "reproduced" and Expect("increasing").verdict([1, 1]) == "not reproduced"


@pytest.mark.unit
def test_bounds_hold_for_every_number_and_a_two_part_claim_takes_its_weakest_part():
    assert Expect("<=", 12).verdict([10.2, 11.9]) == "reproduced" and Expect("<=", 12).verdict([10.2, 12.1]) == "not reproduced"
    assert Expect(">=", 45).verdict([86.0, 44.9]) == "not reproduced"
    between = Expect("between", (0.51, 0.82), abs_tol=0.05)
    assert between.verdict([0.47, 0.86]) == "reproduced" and between.verdict([0.45]) == "not reproduced"
    both = Expect("all", [Expect("decreasing"), Expect("==", [1.0, 2.0], tol=0.1, shape="increasing")])
    assert both.verdict([[3, 2], [1.05, 2.1]]) == "within tolerance"
    assert both.verdict([[3, 2], [1.5, 2.5]]) == "shape only"
    assert both.verdict([[2, 3], [1.0, 2.0]]) == "not reproduced"
    assert both.paper() == [None, [1.0, 2.0]] and "decreasing; " in both.describe()
    with pytest.raises(ValueError):  # a part without a value is a registration error, not a verdict
        both.verdict([[3, 2]])


def test_a_claim_is_not_scored_on_a_run_whose_host_fell_behind():
    [claim] = select(["C2"])["spidercast"]
    keys = needed([claim], "quick")
    invalid = {k: {"run_id": f"r{i}", "fidelity": {"verdict": "invalid"}} for i, k in enumerate(keys)}
    record = judge(claim, "quick", invalid)
    assert record["verdict"] == "not reproduced" and record["why"].startswith("not scored: fidelity.verdict is invalid")
    assert "ours" not in record


def test_a_paper_re_run_alone_keeps_the_others_in_the_report(tmp_path, monkeypatch):
    from controller.reproduce import report

    def rows(paper: str, verdict: str) -> dict[str, list[dict]]:
        return {paper: [{"id": "X1", "statement": "s", "setup": "", "source": "", "why": "", "explained": "",
                         "note": "", "options": {}, "verdict": verdict}]}

    monkeypatch.setattr(report, "_commit", lambda: "aaaaaaa")
    report.write(tmp_path, "paper", {**rows("stan", "reproduced"), **rows("dps", "not testable")})
    monkeypatch.setattr(report, "_commit", lambda: "bbbbbbb")
    record = report.write(tmp_path, "paper", rows("stan", "not reproduced"))
    assert list(record["papers"]) == ["stan", "dps"]
    assert record["papers"]["dps"]["commit"] == "aaaaaaa" and record["papers"]["dps"]["counts"] == {"not testable": 1}
    assert record["papers"]["stan"]["commit"] == "bbbbbbb" and record["papers"]["stan"]["counts"] == {"not reproduced": 1}
    index = (tmp_path / "index.html").read_text()
    assert "dps.html" in index and "aaaaaaa" in index and "bbbbbbb" in index
    assert list(report.write(tmp_path, "quick", rows("stan", "reproduced"))["papers"]) == ["stan"]  # another scale: not kept


@pytest.mark.parametrize("spreading, explained", [(2295.0, True), (2100.0, False)])
def test_an_explanation_that_rests_on_a_measured_fact_holds_only_with_it(spreading, explained):
    """F7: the plain mean misses 2,200; the explanation (events that spread reach it) stands only
    where the runs show it, else the claim fails the command."""
    from controller.reproduce import failures

    [claim] = select(["F7"])["ferretti"]
    metrics = {"receivers_mean": 2100.0, "receivers_mean_spreading": spreading}
    row = judge(claim, "quick", {k: {"run_id": "r", "protocol_metrics": metrics} for k in needed([claim], "quick")})
    assert row["verdict"] == "not reproduced" and row["ours"] == [2100.0, spreading]
    assert bool(row["explained"]) is explained
    assert failures({"papers": {"ferretti": {"claims": [row]}}}) == ([] if explained else ["F7"])


def test_a_check_that_breaks_fails_its_claim_and_not_the_report():
    """P5 on a run whose analysis has no RINGS degrees: that claim is not reproduced, with the
    error as why, and fails the command; the other claims are judged as usual."""
    from controller.reproduce import failures

    [claim] = select(["P5"])["poldercast"]
    row = judge(claim, "quick", {k: {"run_id": "r", "protocol_metrics": {}} for k in needed([claim], "quick")})
    assert row["verdict"] == "not reproduced" and "its check failed: KeyError" in row["why"]
    assert failures({"papers": {"poldercast": {"claims": [row]}}}) == ["P5"]


def test_e5_phases_pool_the_rounds_published_in_each():
    """P13: the miss ratio per phase of the E5 file, from the time series' rounds by when they
    were published."""
    from controller.reproduce.papers.poldercast import miss_by_phase

    series = [{"t_s": t, "published": 1, "expected": 100, "delivered": 100 - miss} for t, miss in
              ((1, 2), (5, 0), (30, 1), (85, 10), (99, 30), (120, 0))]
    series.append({"t_s": 50, "published": 0, "expected": 0, "delivered": 0})
    assert miss_by_phase([{"load": {"timeseries": series}}]) == pytest.approx([0.01, 0.01, 0.2, 0.0])


def test_without_vicinity_slowdown_is_the_ratio_of_cycles_and_none_where_a_run_never_got_there():
    from controller.reproduce.papers.poldercast import slowdown

    def run(curve):
        return {"protocol_metrics": {"ring_convergence": [{"cycle": c, "incomplete_rings_pct": p} for c, p in curve]}}

    with_v = run([(10, 5.0), (20, 1.0), (30, 0.0)])
    assert slowdown([with_v, run([(40, 2.0), (60, 0.5), (90, 0.0)])]) == [3.0, 3.0]
    assert slowdown([with_v, run([(40, 2.0), (60, 0.5)])]) == [3.0, None]


def test_rings_degree_slope_is_one_for_linear_growth_and_skips_thin_bins():
    from controller.reproduce.papers.poldercast import rings_degree_slope

    bins = [{"subscriptions_from": 2 ** k, "nodes": 10, "mean_rings_degree": 3 * 2 ** k} for k in range(6)]
    bins.append({"subscriptions_from": 128, "nodes": 1, "mean_rings_degree": 1.0})
    assert rings_degree_slope({"protocol_metrics": {"rings_degree_by_subscriptions": bins}}) == pytest.approx(1.0)


def test_fig_3_load_claims_read_each_variant_s_runs_and_judge_trends_by_ratio():
    """R9-R12 from made-up summaries in the runs' order (variant, then setting): leader-based
    root whose max node grows, epidemic flat and under half of it, generic flat."""
    def summary(sent_median, sent_max, received_median, received_max):
        return {"protocol_metrics": {"messages_per_node_per_event": {"median": sent_median, "max": sent_max},
                                     "received_per_node_per_event": {"median": received_median, "max": received_max}}}
    leader_root = [summary(0.05, m, 1.0, m) for m in (10, 20, 40)]
    epidemic_root = [summary(3.0, 8, 2.5, 9) for _ in range(3)]
    leader_generic = [summary(0.05, m, 1.0, 12) for m in (10, 19, 38)]
    claims = {c.id: c for c in dps.claims()}
    load = leader_root + epidemic_root + leader_generic
    assert claims["R10"].check.metric(load) == [2.5, 1.0]
    assert claims["R11"].check.metric(load) == [4.0, 0.05, 0.2]
    assert claims["R12"].check.metric(load) == [4.0, 1.0, 40 / 38]
    for cid in ("R10", "R11", "R12"):
        expect, _ = claims[cid].check.at("quick")
        assert expect.verdict(claims[cid].check.metric(load)) == "reproduced"
    flat_leader = [summary(0.05, 10, 1.0, 10)] * 3 + epidemic_root + leader_generic
    assert claims["R11"].check.at("quick")[0].verdict(claims["R11"].check.metric(flat_leader)) == "not reproduced"
    scale = [summary(0.05, m, 1.0, m) for m in (10, 15, 20)] + [summary(3.0, 8, 2.5, 9)] * 3
    assert claims["R9"].check.metric(scale) == [1.0, 1.0, 1.0, 2.0]
    assert claims["R9"].check.at("quick")[0].verdict(claims["R9"].check.metric(scale)) == "reproduced"
