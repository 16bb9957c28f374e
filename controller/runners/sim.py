"""The ``sim`` backend: the experiment's plans carried out by the discrete-event simulator.

Time is virtual (seconds from 0); spans go to ``traces/spans.parquet`` in the flat schema that the
analysis reads (ARCHITECTURE.md, "Traces"), written in chunks so 10K+ peers fit in memory.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq

from node.core import create_protocol
from node.core.types import Descriptor
from node.sim import Simulation, SpanColumns

from .. import plans
from ..config import Experiment
from ..progress import phase
from ..rundir import RunDir, Timeline, run_meta, snapshot_rows
from .base import Runner

SPAN_SCHEMA = pa.schema([
    ("trace_id", pa.string()), ("span_id", pa.string()), ("parent_span_id", pa.string()),
    ("name", pa.string()), ("time_ns", pa.int64()), ("node", pa.int64()), ("from_node", pa.int64()),
    ("event_id", pa.string()), ("topic", pa.string()), ("hops", pa.int32()),
    ("first_copy", pa.bool_()), ("subscriber", pa.bool_()),
])


def sim_addr(node: int) -> str:
    return f"sim:{node}"


class SimRunner(Runner):
    def run(self, exp: Experiment, rd: RunDir) -> None:
        subs = plans.subscriptions(exp)
        contacts = plans.bootstrap_contacts(exp)
        pubs = plans.publications(exp, subs)
        writer = pq.ParquetWriter(rd.traces / "spans.parquet", SPAN_SCHEMA)
        spans = SpanColumns(sink=lambda cols: writer.write_table(pa.table(cols, schema=SPAN_SCHEMA)))
        sim = Simulation(
            seed=exp.seed, link_rules=plans.link_rules(exp), wire_codec=exp.sim.wire_codec,
            spans=spans, validate=exp.sim.check_invariants,
        )
        timeline = Timeline(rd)
        try:
            rd.write_jsonl("subscriptions.jsonl", ({"node": i, "topics": sorted(t)} for i, t in enumerate(subs)))
            for i in range(exp.nodes.count):
                me = Descriptor(i, sim_addr(i), subs[i])
                sim.add_node(create_protocol(exp.protocol.name, me, exp.protocol.params, random.Random(f"{exp.seed}:node:{i}")))
            for i in range(exp.nodes.count):
                timeline.record(0, "join", i)
                sim.start_node(i, [Descriptor(j, sim_addr(j), subs[j]) for j in contacts[i]])
            warmup = exp.phases.warmup_s
            for k, p in enumerate(pubs):
                sim.call_at(warmup + p.at_s, lambda p=p, k=k: sim.publish(p.node, p.topic, plans.payload(exp, k)))
            end = warmup + (pubs[-1].at_s if pubs else 0.0) + exp.phases.drain_s
            with phase(f"sim: {exp.nodes.count} peers, {end:.0f} s of virtual time", end) as advance:
                t = 0.0
                while t < end:
                    t = min(end, t + 1.0)
                    sim.run_until(t)
                    advance(t)
            spans.flush()
        finally:
            writer.close()
            timeline.close()
        rd.write_jsonl("snapshots.jsonl", (row for n in sim.nodes.values() for row in snapshot_rows(n.snapshot())))
        rd.write_jsonl("stats.jsonl", ({"node": i, "counters": dict(c)} for i, c in sim.stats.items()))
        rd.write_json("run.json", run_meta(
            exp, rd, started_ns=0, measure_start_ns=round(warmup * 1e9), ended_ns=round(end * 1e9),
            sim_steps=sim.steps, spans=spans.count,
        ))
