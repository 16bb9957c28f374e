"""The compiled loops (node/sim/native/: CYCLON, PolderCast) against the Python cores they stand in
for: the same random draws as Python's generator, and the same run, byte for byte, on the same
seeds.

Where cargo is present `make setup` builds the extension, and these tests require it; without
cargo the extension cannot be built and the simulator runs its Python loop (tested here too)."""

from __future__ import annotations

import json
import os
import random
import shutil
from collections import Counter

import pytest

from controller.backends.rundir import RunDir, output_digests
from controller.backends.sim import SimRunner
from controller.experiment.schema import parse_experiment
from node.kit import create_protocol
from node.kit.links import LinkRule
from node.kit.types import Descriptor
from node.protocols.cyclon.layer import Cyclon, CyclonConfig
from node.protocols.gossip.protocol import GossipConfig
from node.protocols.poldercast.ringcast import RingCast
from node.sim import Simulation, mirror, native
from node.sim.check import Diverged, first_divergence

pytestmark = pytest.mark.unit

compiled = pytest.mark.skipif(not native.available() and not shutil.which("cargo"),
                              reason="no cargo here: the compiled CYCLON loop cannot be built")
"""Where cargo is present and the extension is not built, these fail (on its absence)."""
fingerprinted = pytest.mark.skipif(os.environ.get(mirror.UNVERIFIED_ENV) == "1",
                                   reason="make native-verify: the runs are compared before their fingerprints are recorded")
"""The tests of the fingerprint check itself, which ``make native-verify`` switches off."""

GOSSIP = {
    "protocol": {"name": "gossip", "params": {"gamma": 0.2, "cyclon": {"view_size": 8, "shuffle_length": 4}}},
    "nodes": {"count": 120},
    "workload": {"topics": 4, "subscriptions": {"min": 1, "max": 2}},
    "publications": {"count": 10, "rate_per_s": 5},
    "network": {"delay": {"ms": 10}},
    "phases": {"warmup_s": 12, "drain_s": 3},
    "outputs": {"snapshot_every_s": 4},
    "sim": {"wire_codec": False},
}


def run(tmp_path, engine: str, **sections) -> tuple[dict[str, str], dict]:
    """Run an experiment in sim with ``engine``: the SHA-256 of each output, and run.json."""
    exp = parse_experiment({"name": "t", "seed": 5, "backend": "sim", **GOSSIP, **sections,
                            "sim": {**GOSSIP["sim"], **sections.get("sim", {}), "engine": engine}})
    rd = RunDir.create(exp, tmp_path / engine)
    SimRunner().run(exp, rd)
    return output_digests(rd.path), json.loads((rd.path / "run.json").read_text())


def assert_same_run(tmp_path, **sections) -> dict:
    """The run in the compiled loop and in Python: the same files; returns the native run.json.
    Where they differ, the failure says where the runs first diverge (``sim.engine: check``)."""
    python, python_meta = run(tmp_path, "python", **sections)
    compiled_run, meta = run(tmp_path, "native", **sections)
    if compiled_run != python:
        differ = sorted(k for k in python.keys() | compiled_run.keys() if python.get(k) != compiled_run.get(k))
        try:
            run(tmp_path / "check", "check", **{**sections, "sim": {**sections.get("sim", {}), "check_every_s": 1.0}})
            where = "the check found no divergence in the overlay's state (the difference is in what it wrote)"
        except Diverged as e:
            where = str(e)
        pytest.fail(f"the compiled loop's run differs from the Python cores' in {', '.join(differ)}; {where}")
    assert python_meta["sim_native_steps"] == 0
    assert 0 < meta["sim_native_steps"] <= meta["sim_steps"] == python_meta["sim_steps"]
    return meta


@compiled
@pytest.mark.parametrize("seed", ["1:node:0", "7:node:123", "x"])
def test_random_draws_are_pythons(seed):
    rng = random.Random(seed)
    state = list(rng.getstate()[1])
    assert native.overlaylab_native.mt_randoms(state, 3000) == [rng.random() for _ in range(3000)]
    state = list(rng.getstate()[1])
    # sample: the pool algorithm (small populations, CYCLON's) and the set one (large), from
    # one state carried on, so that the generator's index wraps past 624 words too.
    for population, k in [(20, 9), (20, 10), (19, 19), (1, 1), (3, 0), (6, 5), (22, 3), (100, 9), (5000, 30)] * 20:
        drawn, state = native.overlaylab_native.mt_sample(state, population, k)
        assert drawn == rng.sample(range(population), k)
        assert tuple(state) == rng.getstate()[1]


@compiled
def test_cyclon_overlay_is_the_python_ones_byte_for_byte(tmp_path):
    """The CYCLON-scale setting (one late publication, gamma 0), small, with settled snapshots:
    the compiled loop runs all but the end, and every output file is the same."""
    meta = assert_same_run(tmp_path, protocol={"name": "gossip", "params": {
        "gamma": 0.0, "cyclon": {"view_size": 20, "shuffle_length": 10, "timeout_ms": 500}}},
        nodes={"count": 400, "bootstrap_contacts": 20}, publications={"count": 1, "rate_per_s": 1},
        phases={"warmup_s": 20, "drain_s": 1}, outputs={"snapshot_every_s": 5})
    assert meta["sim_native_steps"] > 0.9 * meta["sim_steps"]


@compiled
def test_late_replies_losses_jitter_and_refills_are_the_python_ones(tmp_path, monkeypatch):
    """Replies later than the timeout (half of them), lost and jittered messages, and views so
    small that nodes empty them and refill from their reserves: then dissemination in Python."""
    refills = []
    refill = Cyclon._refill
    monkeypatch.setattr(Cyclon, "_refill", lambda self: (refills.append(self.stack.node_id), refill(self))[1])
    meta = assert_same_run(tmp_path, protocol={"name": "gossip", "params": {
        "gamma": 0.5, "cyclon": {"view_size": 3, "shuffle_length": 2, "timeout_ms": 12}}},
        network={"delay": {"ms": 10}, "jitter_ms": 6, "loss": 0.05})
    assert refills, "no view emptied: the refill path went untested"
    assert meta["sim_native_steps"] > 1000


@compiled
def test_cyclon_churn_runs_inside_the_loop(tmp_path):
    """Nodes offline at the start (messages to them lost), then joins, crashes and rejoins
    (``resume``) in the compiled CYCLON loop, which keeps the run up to the first publication
    (gossip's events run in Python)."""
    meta = assert_same_run(tmp_path, churn={"model": "sessions", "fraction": 0.3, "session": {"mean_s": 4},
                                            "downtime": {"mean_s": 2}, "arrival_rate_per_s": 2, "start_s": -6,
                                            "rejoin": "resume"})
    assert meta["sim_native_takes"] == 1 and meta["sim_native_steps"] > 0.4 * meta["sim_steps"]


@compiled
def test_engine_native_names_what_it_cannot_run(tmp_path):
    with pytest.raises(RuntimeError, match="sim.wire_codec is on"):
        run(tmp_path, "native", sim={"wire_codec": True})
    with pytest.raises(RuntimeError, match="neither a CYCLON nor a PolderCast node"):
        run(tmp_path, "native", protocol={"name": "spidercast"})
    with pytest.raises(RuntimeError, match="sim.failure_detection is heartbeat"):
        run(tmp_path, "native", sim={"wire_codec": False, "failure_detection": "heartbeat"})


# --- the PolderCast loop -------------------------------------------------------------------------

POLDERCAST = {
    "protocol": {"name": "poldercast", "params": {}},
    "nodes": {"count": 250, "bootstrap_contacts": 20},
    # followers of a power-law graph: a few heavy subscribers with big RINGS views, whose
    # rankings go by bitsets in the loop
    "workload": {"model": "social", "graph": "synthetic", "directed": True, "mean_follows": 10},
    "publications": {"mode": "per_topic", "rounds": 4, "round_interval_s": 1, "topics_per_round": 20,
                     "freeze": True},
    "phases": {"warmup_s": 8, "drain_s": 1},
    "outputs": {"snapshot_every_s": 2},
}


@compiled
def test_poldercast_overlay_and_frozen_rounds_are_the_python_ones_byte_for_byte(tmp_path):
    """E1's setting, small: the loop runs the whole run (the overlay, the RingCast rounds on the
    frozen overlay, their spans), and every output file is the same."""
    meta = assert_same_run(tmp_path, **POLDERCAST)
    assert meta["sim_native_steps"] == meta["sim_steps"]


@compiled
@pytest.mark.parametrize("params", [
    {"priority_mode": "sum", "fanout": 3, "shortcut_source": "vicinity"},
    {"ring_removal": "on_initiate", "ring_selection": "random", "shortcut_source": "cyclon"},
])
def test_poldercast_choices_are_the_python_ones(tmp_path, params):
    assert_same_run(tmp_path, **{**POLDERCAST, "protocol": {"name": "poldercast", "params": params}})


@compiled
def test_poldercast_late_replies_losses_jitter_and_refills_are_the_python_ones(tmp_path, monkeypatch):
    """Replies later than the timeouts, lost and jittered messages and event copies, and CYCLON
    views so small that nodes empty them and refill from the other views."""
    refills = []
    refill = Cyclon._refill
    monkeypatch.setattr(Cyclon, "_refill", lambda self: (refills.append(self.stack.node_id), refill(self))[1])
    assert_same_run(tmp_path, **{
        **POLDERCAST, "protocol": {"name": "poldercast", "params": {
            "timeout_ms": 14, "cyclon": {"view_size": 3, "shuffle_length": 2, "timeout_ms": 12}}},
        "network": {"delay": {"ms": 10}, "jitter_ms": 6, "loss": 0.05}})
    assert refills, "no view emptied: the refill path went untested"


@compiled
def test_poldercast_is_handed_back_for_a_partition_and_taken_again_after_it(tmp_path):
    """A partition needs the Python cores while it holds; a quiet stretch after it, the loop
    takes the run over again (two hand-overs each way), and the files are the same."""
    meta = assert_same_run(tmp_path, **{**POLDERCAST, "phases": {"warmup_s": 16, "drain_s": 1},
                                        "network": {"partitions": [{"start_s": 3, "end_s": 4, "nodes": list(range(20))}]}})
    assert meta["sim_native_steps"] > 0.8 * meta["sim_steps"]


@compiled
@pytest.mark.parametrize("leave,failover", [("crash", False), ("graceful", False), ("crash", True)])
def test_poldercast_churn_runs_inside_the_loop(tmp_path, monkeypatch, leave, failover):
    """E5's setting, small: nodes offline at the start join later, sessions end in crashes (or
    graceful leaves) and nodes rejoin with their state (``resume``), a flash crowd and a sharp
    drop, with and without ``ring_failover`` (a copy to a dead ring neighbour goes to the next);
    the loop runs joins and departures itself, so it keeps the run (every step compiled), and
    every output file is the Python cores'."""
    failovers = []
    on_send_failed = RingCast.on_send_failed
    monkeypatch.setattr(RingCast, "on_send_failed", lambda self, *a: (failovers.extend(r := on_send_failed(self, *a)), r)[1])
    meta = assert_same_run(tmp_path, **{
        **POLDERCAST, "phases": {"warmup_s": 8, "drain_s": 2},
        "protocol": {"name": "poldercast", "params": {"ring_failover": failover}},
        "churn": {"model": "sessions", "fraction": 0.3, "session": {"mean_s": 4}, "downtime": {"mean_s": 2},
                  "start_s": 0, "leave": leave, "rejoin": "resume",
                  "phases": [{"kind": "flash_crowd", "at_s": 0, "nodes": 30, "over_s": 3},
                             {"kind": "sharp_drop", "at_s": 5, "fraction": 0.2, "return_after_s": 2}]}})
    [timeline] = (tmp_path / "native").glob("*/timeline.jsonl")
    entries = [json.loads(line) for line in timeline.read_text().splitlines()]
    kinds = Counter(e["kind"] for e in entries if not e.get("initial"))
    assert kinds["join"] > 50 and kinds["crash" if leave == "crash" else "leave"] > 30
    assert meta["sim_native_steps"] == meta["sim_steps"] and meta["sim_native_takes"] == 1  # never handed back
    assert meta["sim_native_loops"] == {"poldercast": native.verified_digest("poldercast")}
    assert bool(failovers) == failover  # the Python run's: copies re-sent past a dead ring neighbour


@compiled
def test_poldercast_fresh_rejoins_are_handed_back(tmp_path):
    """A rejoin with a fresh core (``rejoin: fresh``) is built in Python: the run is handed back
    for it and taken again at once (joins and crashes run in the loop), and the files are the
    Python cores'."""
    meta = assert_same_run(tmp_path, **{
        **POLDERCAST, "phases": {"warmup_s": 8, "drain_s": 2},
        "churn": {"model": "sessions", "fraction": 0.2, "session": {"mean_s": 4}, "downtime": {"mean_s": 2},
                  "start_s": 0, "rejoin": "fresh"}})
    [timeline] = (tmp_path / "native").glob("*/timeline.jsonl")
    rejoins = Counter(json.loads(line)["node"] for line in timeline.read_text().splitlines()
                      if json.loads(line)["kind"] == "join")
    fresh = sum(n - 1 for n in rejoins.values())
    assert fresh > 10 and meta["sim_native_takes"] == 1 + fresh


def test_without_the_extension_auto_runs_the_python_loop(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "overlaylab_native", None)
    digests, meta = run(tmp_path, "auto")
    assert meta["sim_native_steps"] == 0 and meta["sim_steps"] > 1000
    with pytest.raises(RuntimeError, match="not built"):
        run(tmp_path / "again", "native")


@compiled
def test_poldercast_variants_forked_after_the_warm_up_are_the_python_ones(tmp_path):
    """E3's shortcut: the warm-up once, then a forked child per variant, each taking the run into
    the loop again with its own fanout: every variant's files are the same."""
    sections = {**POLDERCAST, "nodes": {"count": 120, "bootstrap_contacts": 20},
                "publications": {**POLDERCAST["publications"], "rounds": 2}}
    digests = {}
    for engine in ("python", "native"):
        exp = parse_experiment({"name": "t", "seed": 5, "backend": "sim", **sections,
                                "sim": {"wire_codec": False, "engine": engine, "parallel_variants": 1,
                                        "variants": [{"fanout": 2, "shortcut_source": "cyclon"}, {"fanout": 3}]}})
        rd = RunDir.create(exp, tmp_path / engine)
        SimRunner().run(exp, rd)
        variants = sorted((rd.path / "variants").iterdir())
        assert len(variants) == 2
        digests[engine] = {v.name: output_digests(v) for v in variants}
        steps = [json.loads((v / "run.json").read_text()) for v in variants]
    assert digests["native"] == digests["python"]
    assert all(m["sim_native_steps"] == m["sim_steps"] for m in steps)  # the native run's, the last


# --- the loops refuse to stand in for code they were not verified against ------------------------

CHANGES = {  # a one-character change to a mirrored rule, per loop it reaches
    "ringcast": ("node.protocols.poldercast.ringcast", "ring, k = [succ, pred], f - 2", "ring, k = [succ, pred], f - 1",
                 POLDERCAST),
    "cyclon-merge": ("node.protocols.cyclon.layer", "if len(self.view) >= self.config.view_size:",
                     "if len(self.view) > self.config.view_size:", GOSSIP),
    "vicinity-ranking": ("node.protocols.poldercast.vicinity", "for key in sorted(groups, reverse=True):",
                         "for key in sorted(groups, reverse=False):", POLDERCAST),
}


def patched(monkeypatch, module: str, old: str, new: str) -> None:
    """``module``'s source as the fingerprints read it, with ``old`` replaced (no file touched)."""
    real = mirror.source

    def source(name: str) -> str:
        text = real(name)
        if name == module:
            assert text.count(old) == 1, old
            return text.replace(old, new)
        return text
    monkeypatch.setattr(mirror, "source", source)


@compiled
@fingerprinted
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_mirrored_rule_runs_python_under_auto_and_is_refused_under_native(tmp_path, monkeypatch, caplog, change):
    module, old, new, sections = CHANGES[change]
    _, meta = run(tmp_path / "before", "auto", **sections)
    assert meta["sim_native_steps"] > 0 and meta["sim_native_stale"] is None  # the tree as verified
    patched(monkeypatch, module, old, new)
    with caplog.at_level("WARNING", logger="overlaylab.sim"):
        _, meta = run(tmp_path / "after", "auto", **sections)
    assert meta["sim_native_steps"] == 0 and module in meta["sim_native_stale"]
    warnings = [r for r in caplog.records if r.name == "overlaylab.sim"]
    assert len(warnings) == 1 and module in warnings[0].getMessage()
    with pytest.raises(RuntimeError, match=module.replace(".", r"\.")):
        run(tmp_path / "native", "native", **sections)


def test_a_docstring_or_comment_is_no_change():
    module = "node.protocols.cyclon.layer"
    text = mirror.source(module)
    before = mirror._fingerprint(text, module, "")
    assert mirror._fingerprint(text.replace('"""', '"""Reworded. ', 1) + "\n# a comment\n", module, "") == before
    assert mirror._fingerprint(text.replace(">= self.config.view_size", "> self.config.view_size"), module, "") != before


@fingerprinted
def test_the_verified_fingerprints_are_the_trees_and_the_extensions():
    """The committed fingerprints are the running code's (after a change to mirrored code,
    `make native-verify`), and the built extension embeds them."""
    assert json.loads(mirror.VERIFIED.read_text()) == mirror.fingerprints()
    if native.available():
        assert json.loads(native.overlaylab_native.verified()) == json.loads(mirror.VERIFIED.read_text())


# --- a divergence names its first step (node/sim/check.py) -----------------------------------------

def cyclon_overlay(engine: str) -> Simulation:
    """60 CYCLON nodes (the gossip before its first publication), the compiled loop's kind."""
    sim = Simulation(seed=5, link_rules=[LinkRule(delay_ms=10)], wire_codec=False, engine=engine)
    config = GossipConfig(cyclon=CyclonConfig(view_size=8, shuffle_length=4))
    for i in range(60):
        sim.add_node(create_protocol("gossip", Descriptor(i, f"n{i}", frozenset({"t"})), config, random.Random(f"5:{i}")))
    pick = random.Random(5)
    for i in range(60):
        sim.start_node(i, [Descriptor(j, f"n{j}") for j in pick.sample([j for j in range(60) if j != i], 4)])
    return sim


@compiled
def test_the_check_finds_no_divergence_where_there_is_none():
    assert first_divergence(cyclon_overlay, t_end=6.0) is None


@compiled
def test_a_divergence_in_the_compiled_loop_is_reported_with_its_step_node_and_state(monkeypatch):
    """A test-only fault in the loop (one view entry aged twice at the first tick from 3.2 s):
    the check names the time, the step, the node, the field and both values, not digests."""
    monkeypatch.setenv("OVERLAYLAB_NATIVE_DIVERGE_AT_S", "3.2")
    found = first_divergence(cyclon_overlay, t_end=6.0)
    assert found is not None and 3.2 <= found.time_s <= 3.2 + 1.0 + 1e-3
    assert found.steps > 0 and found.due
    [(node, fields)] = list(found.nodes.items())[:1]
    assert "cyclon.view" in fields
    py_view, native_view = fields["cyclon.view"]
    assert [n for n, _ in py_view] == [n for n, _ in native_view]  # the same entries, one age apart
    assert sum(a for _, a in native_view) == sum(a for _, a in py_view) + 1
    assert f"node {node} cyclon.view" in str(found) and "first divergence at t =" in str(found)


@compiled
def test_engine_check_runs_python_and_compares_the_compiled_loop_at_checkpoints(tmp_path, monkeypatch):
    """``sim.engine: check``: the run is the Python cores' (the same files as ``python``),
    with the compiled loop's compared at every checkpoint and at the end; the loop runs there
    though the code it mirrors reads as changed (checking it is the point)."""
    python, _ = run(tmp_path, "python")
    patched(monkeypatch, *CHANGES["cyclon-merge"][:3])
    checked, meta = run(tmp_path, "check", sim={"check_every_s": 2.0})
    assert checked == python
    assert meta["sim_native_steps"] == 0
    assert meta["sim_check"]["checkpoints"] == 1 + int(meta["ended_ns"] / 1e9 // 2.0)
    assert meta["sim_check"]["compiled_steps"] > 1000


@compiled
def test_engine_check_names_the_first_divergent_step_node_and_state(tmp_path, monkeypatch):
    """The test-only fault in the compiled CYCLON loop (an entry aged twice at the first tick
    from 3.2 s) is reported by ``sim.engine: check`` with its time, step, node and both views."""
    monkeypatch.setenv("OVERLAYLAB_NATIVE_DIVERGE_AT_S", "3.2")
    with pytest.raises(Diverged) as caught:
        run(tmp_path, "check", sim={"check_every_s": 2.0})
    found = caught.value.divergence
    assert 3.2 <= found.time_s <= 4.0 + 1e-3 and found.steps > 0 and found.due
    node, diff = next(iter(found.nodes.items()))
    py_view, native_view = diff["cyclon.view"]
    assert sum(a for _, a in native_view) == sum(a for _, a in py_view) + 1
    assert f"node {node} cyclon.view: python" in str(caught.value)


@compiled
def test_engine_check_finds_poldercast_s_runs_equal(tmp_path):
    """The check over PolderCast's three layers, RingCast and frozen rounds: every field of
    the declared state equal at each checkpoint (no cache compared), the files the Python
    run's."""
    python, _ = run(tmp_path, "python", **POLDERCAST)
    checked, meta = run(tmp_path, "check", **{**POLDERCAST, "sim": {"check_every_s": 1.0}})
    assert checked == python
    assert meta["sim_check"]["checkpoints"] >= 10 and meta["sim_check"]["compiled_steps"] > 0


@compiled
def test_options_cross_into_the_loops_by_name():
    """A missing, unknown or mistyped option is refused with its name, not read by position."""
    link = {"delay_ms": 10.0, "jitter_ms": 0.0, "loss": 0.0, "partitioned": False}
    words = list(random.Random(1).getstate()[1])
    cyclon = {"view_size": 8, "shuffle_length": 4, "timeout_s": 0.5, "period_s": 1.0, "refill": True, "layer_bytes": 9}
    native.overlaylab_native.Engine(4, cyclon, link, words)
    for options, link_options, message in [
        ({k: v for k, v in cyclon.items() if k != "refill"}, link, "option refill is missing"),
        ({**cyclon, "view_sise": 8}, link, "unknown option view_sise"),
        ({**cyclon, "view_size": "8"}, link, "option view_size"),
        (cyclon, {**link, "loss": None}, "option loss"),
    ]:
        with pytest.raises(ValueError, match=message):
            native.overlaylab_native.Engine(4, options, link_options, words)
    with pytest.raises(ValueError, match="option ring_selection: \"nearest\" is not one of"):
        native.overlaylab_native.PolderEngine(4, 1, {
            "cyclon.view_size": 8, "cyclon.shuffle_length": 4, "cyclon.refill": True, "vicinity_view": 8,
            "vicinity_gossip": 4, "ring_size": 4, "ring_gossip": 4, "periods_s": [1.0] * 3, "timeouts_s": [0.5] * 3,
            "layer_bytes": [9] * 3, "priority_mode": "max", "ring_removal": "on_timeout", "ring_selection": "nearest",
            "fanout": 2, "shortcut_layers": ["cyclon"], "seen_capacity": 10, "ring_failover": False}, link, words, [3], [0])
