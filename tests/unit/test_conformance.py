"""What every registered protocol must do, checked for each by itself (a new protocol is
covered the moment it registers): runs reproducible across hash seeds, every message it emits
survives the codec unchanged, its invariants hold after every step. The gRPC half of the suite
is tests/component/test_conformance_grpc.py."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter

import pytest
import yaml

from controller.backends.rundir import output_digests
from controller.experiment import plans
from controller.experiment.schema import parse_experiment
from node.kit import create_protocol, protocol_names
from node.kit.messages import declared_kinds, example, fully_open, malformed, to_signal
from node.kit.types import Descriptor, EventMsg, RemoteProtocolError, Signal
from node.sim import Simulation
from node.wire import codec
from tests.conftest import PLUGIN_ENV, ROOT
from tests.helpers import conformance_experiment

PROTOCOLS = protocol_names()


def test_the_suite_covers_the_builtin_protocols_and_one_registered_by_a_test():
    assert {"gossip", "poldercast", "toy-flood"} <= set(PROTOCOLS)


def _digests(run_dir) -> dict[str, str]:
    return output_digests(run_dir)


@pytest.mark.parametrize("name", PROTOCOLS)
def test_same_file_and_seed_give_byte_identical_runs_under_two_hash_seeds(name, tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(conformance_experiment(name, outputs={"snapshot_every_s": 2})))
    digests = []
    for hash_seed in ("1", "2"):
        out = tmp_path / hash_seed
        subprocess.run([sys.executable, "-m", "controller.cli.main", "run", str(path), "--out", str(out), "--no-analyze"],
                       cwd=ROOT, check=True, capture_output=True,
                       env={**os.environ, **PLUGIN_ENV, "PYTHONHASHSEED": hash_seed})
        [rd] = out.iterdir()
        digests.append(_digests(rd))
    assert digests[0] == digests[1]


def small_run(name: str) -> tuple[Simulation, list]:
    """The conformance experiment in the simulator with invariants checked after every step;
    returns it and every message sent."""
    exp = parse_experiment(conformance_experiment(name))
    plan = plans.render(exp)
    sim = Simulation(seed=exp.seed, wire_codec=False, validate=True)
    sent = []
    send = sim.send
    sim.send = lambda node, action, span: (sent.append(action.msg), send(node, action, span))  # type: ignore[method-assign]
    subs = plan.subscriptions
    for i in range(exp.nodes.count):
        sim.add_node(create_protocol(name, Descriptor(i, f"sim:{i}", subs[i]), exp.protocol.params,
                                     random.Random(f"{exp.seed}:node:{i}"), sim.shared))
    for i in range(exp.nodes.count):
        sim.start_node(i, [Descriptor(j, f"sim:{j}", plans.contact_topics(plan, i, j)) for j in plan.contacts[i]])
    for p in plan.publications:
        sim.call_at(p.at_s, lambda p=p: sim.publish(p.node, p.topic, b"x"))
    sim.run_until(plan.end_s, max_steps=2_000_000)
    return sim, sent


@pytest.fixture(scope="module", params=PROTOCOLS)
def run(request):
    return request.param, *small_run(request.param)


def test_every_message_a_protocol_emits_round_trips_the_codec_exactly(run):
    name, sim, sent = run
    kinds = Counter(type(m).__name__ for m in sent)
    maintained = any(layer.period is not None for layer in next(iter(sim.nodes.values())).layers.values())
    assert kinds["EventMsg"] > 0 and len(kinds) >= 1 + maintained, kinds  # events, and a maintained layer's messages
    for msg in sent:
        decoded, size = codec.roundtrip(msg, sender=0)
        assert decoded == msg, (name, msg)
        assert size == codec.wire_size(msg, 0)


def test_invariants_hold_after_every_step_and_every_event_is_delivered(run):
    """Simulation(validate=True) checked each core after every message and timer; here, at the
    end, every subscriber got every event of its topics (a static network, no loss)."""
    name, sim, _ = run
    for core in sim.nodes.values():
        core.validate()
    cols = sim.spans.columns
    firsts = {(e, n) for e, n, name_, first in zip(cols["event_id"], cols["node"], cols["name"], cols["first_copy"])
              if first}
    topic_of = dict(zip(cols["event_id"], cols["topic"]))
    publisher = {e: n for e, n, name_ in zip(cols["event_id"], cols["node"], cols["name"]) if name_ == "publish"}
    wanted = {(e, n) for e, t in topic_of.items() for n, core in sim.nodes.items() if t in core.topics and n != publisher[e]}
    assert wanted and wanted <= firsts, f"{name}: {len(wanted - firsts)} of {len(wanted)} deliveries missing"


def test_every_received_copy_leaves_under_its_sender_s_span_of_the_event(run):
    """Each event's trace is one tree: every receive span names a parent span the run holds
    (a copy sent later, a held or buffered event among them, still leaves under the sender's
    span of that event)."""
    name, sim, _ = run
    cols = sim.spans.columns
    ids = set(cols["span_id"])
    orphans = [(e, n) for e, n, kind, parent in zip(cols["event_id"], cols["node"], cols["name"], cols["parent_span_id"])
               if kind == "receive" and parent not in ids]
    assert not orphans, f"{name}: {len(orphans)} copies without a parent span, e.g. {orphans[:3]}"


def test_events_are_event_messages_and_layer_messages_name_a_layer_of_the_stack(run):
    name, sim, sent = run
    layers = set(next(iter(sim.nodes.values())).layers)
    assert {m.layer for m in sent if not isinstance(m, EventMsg)} <= layers


def test_malformed_signals_of_every_declared_kind_of_its_layers_are_refused(run):
    """Each typed message kind (node/kit/messages.py) of the protocol's layers: one the run sent
    (or, for a kind this small run never sends, one built from its types), with an item missing
    or extra and each bound crossed, is refused (RemoteProtocolError: the drivers count it as
    malformed) and leaves the core valid."""
    name, sim, sent = run
    node_id, core = next(iter(sim.nodes.items()))
    for spec in [k for k in declared_kinds() if k.layer in core.layers]:
        good = next((m for m in sent if isinstance(m, Signal) and (m.layer, m.kind) == (spec.layer, spec.name)),
                    to_signal(example(spec, core.me)))
        bad = list(malformed(spec, good))
        assert bad or fully_open(spec), spec
        for msg in bad:
            with pytest.raises(RemoteProtocolError):
                core.on_message(msg.sender.node_id, msg, sim.now)
        core.validate()
