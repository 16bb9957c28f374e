"""The ``sim`` backend: the experiment's plans carried out by the discrete-event simulator.

Time is virtual (seconds from 0); spans go to ``traces/spans.parquet`` in the flat schema that the
analysis reads (ARCHITECTURE.md, "Traces"), written in chunks so 10K+ peers fit in memory.
Churn: a crash stops the node (messages to it are lost); a graceful leave lets the core say
goodbye first; a rejoin reuses the old core (``keep_state``) or builds a new one (``fresh``).
Partitions switch on and off in the link model at their times.

Variants (``sim.variants``): the overlay is built once; just before the first publication the
process forks, one child per variant (at most ``sim.parallel_variants`` at a time). A child
copies what the run wrote so far into ``variants/<label>/``, sets the variant's dissemination
parameters on every core and carries on to the end, writing a complete run directory. The
parent waits for them and writes ``variants.json``; its own directory holds the shared warm-up.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sys
import traceback

import pyarrow as pa
import pyarrow.parquet as pq

from node.core import create_protocol
from node.core.types import Descriptor
from node.sim import Simulation, SpanColumns

from .. import plans
from ..config import Experiment, variant_experiment, variant_label
from ..network import link_model_for_sim
from ..progress import console, phase
from ..rundir import JsonLines, RunDir, Timeline, run_meta, snapshot_rows
from .base import Runner

SPAN_SCHEMA = pa.schema([
    ("trace_id", pa.string()), ("span_id", pa.string()), ("parent_span_id", pa.string()),
    ("name", pa.string()), ("time_ns", pa.int64()), ("node", pa.int64()), ("from_node", pa.int64()),
    ("event_id", pa.string()), ("topic", pa.string()), ("hops", pa.int32()),
    ("first_copy", pa.bool_()), ("subscriber", pa.bool_()),
])


def sim_addr(node: int) -> str:
    return f"sim:{node}"


def ns(t: float) -> int:
    return round(t * 1e9)


def _exit(code: int) -> None:
    """End a forked child now (no cleanup of what it shares with its parent), output flushed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class VariantsDone(Exception):
    """Raised in the parent once every variant's child has ended."""


class SimRunner(Runner):
    def run(self, exp: Experiment, rd: RunDir) -> None:
        self.child = False
        try:
            self._run(exp, rd)
        except VariantsDone:
            return
        except BaseException:
            if self.child:  # never return into the parent's caller from a forked child
                traceback.print_exc()
                _exit(1)
            raise
        if self.child:
            _exit(0)

    def _run(self, exp: Experiment, rd: RunDir) -> None:
        plan = plans.render(exp)
        subs = plan.subscriptions
        writer = None  # opened on the first spans, in whichever run directory this process writes
        forked = False  # this process forked the variants and wrote none of them

        def write_spans(cols) -> None:
            nonlocal writer
            if writer is None:
                writer = pq.ParquetWriter(rd.traces / "spans.parquet", SPAN_SCHEMA)
            writer.write_table(pa.table(cols, schema=SPAN_SCHEMA))

        spans = SpanColumns(sink=write_spans)
        sim = Simulation(seed=exp.seed, links=link_model_for_sim(plan.network, exp.seed),
                         wire_codec=exp.sim.wire_codec, spans=spans, validate=exp.sim.check_invariants)
        timeline = Timeline(rd)
        alive: set[int] = set()
        started: set[int] = set()
        snapshots = JsonLines(rd, "snapshots.jsonl")

        def write_snapshot() -> None:
            """Every alive node's views, at virtual time and at gossip time (frozen rounds out)."""
            at, gossip_at = ns(sim.now), ns(sim.now - sim.frozen_s)
            snapshots.write(row for i in sorted(alive) for row in snapshot_rows(sim.nodes[i].snapshot(), at, gossip_at))

        def settled_snapshot() -> None:
            """A snapshot once the exchanges in flight have finished (timers held), so a partner
            that a RINGS/VICINITY exchange removed for a moment is not counted as missing: the
            end-of-cycle view the paper's simulator measures. Periodic, and at the end."""
            sim.run_frozen(lambda: None)
            write_snapshot()

        def descriptor(j: int) -> Descriptor:
            return Descriptor(j, sim_addr(j), subs[j])

        def new_core(i: int):
            me = Descriptor(i, sim_addr(i), subs[i])
            return create_protocol(exp.protocol.name, me, exp.protocol.params, random.Random(f"{exp.seed}:node:{i}"), sim.shared)

        def join(i: int, contacts: list[int], initial: bool = False) -> None:
            if i in alive:
                return
            if exp.churn.rejoin == "fresh" and i in started:
                sim.replace_node(new_core(i))
            started.add(i)
            alive.add(i)
            timeline.record(ns(sim.now), "join", i, **({"initial": True} if initial else {}))
            sim.start_node(i, [descriptor(j) for j in contacts])

        def depart(i: int, kind: str) -> None:
            if i not in alive:
                return
            alive.discard(i)
            timeline.record(ns(sim.now), kind, i)
            sim.stop_node(i, graceful=kind == "leave")

        def fork_variants() -> None:
            """Fork one child per variant; return in each child as that variant, raise
            VariantsDone in the parent when all have ended."""
            nonlocal exp, rd, timeline, snapshots, forked
            spans.flush()
            out = rd.path / "variants"
            pending = [(variant_experiment(exp, v), variant_label(v)) for v in exp.sim.variants]
            running: dict[int, str] = {}
            ended: dict[str, int] = {}
            limit = exp.sim.parallel_variants or os.cpu_count() or 1
            try:
                while pending or running:
                    if pending and len(running) < limit:
                        vexp, label = pending.pop(0)
                        pid = os.fork()
                        if pid == 0:
                            self.child = True
                            vrd = RunDir.create(vexp, out, run_id=label)
                            for name in ("subscriptions.jsonl", "timeline.jsonl", "snapshots.jsonl"):
                                if (rd.path / name).exists():
                                    shutil.copyfile(rd.path / name, vrd.path / name)
                            timeline.close()
                            snapshots.close()
                            exp, rd = vexp, vrd
                            timeline, snapshots = Timeline(rd), JsonLines(rd, "snapshots.jsonl")
                            for core in sim.nodes.values():
                                core.config = vexp.protocol.params
                            return
                        running[pid] = label
                        continue
                    pid, status = os.wait()
                    label = running.pop(pid)
                    ended[label] = os.waitstatus_to_exitcode(status)
                    console.print(f"variant {label}: {'done' if ended[label] == 0 else f'failed ({ended[label]})'}")
            except BaseException:
                if self.child:
                    raise  # a child failing to set up: its siblings are not its to stop
                for pid in running:
                    os.kill(pid, signal.SIGTERM)
                for pid in running:
                    os.waitpid(pid, 0)
                raise
            rd.write_json("variants.json", [
                {"variant": v, "run_dir": f"variants/{variant_label(v)}", "exit_code": ended[variant_label(v)]}
                for v in exp.sim.variants])
            failed = [label for label, code in ended.items() if code]
            if failed:
                raise RuntimeError(f"variants failed: {', '.join(failed)} (see their output above)")
            forked = True
            raise VariantsDone

        def partition(cut: frozenset[int], on: bool) -> None:
            (sim.links.partitions.append if on else sim.links.partitions.remove)(cut)
            timeline.record(ns(sim.now), "fault_on" if on else "fault_off", None, fault="partition", nodes=sorted(cut))

        try:
            rd.write_jsonl("subscriptions.jsonl", ({"node": i, "topics": sorted(t)} for i, t in enumerate(subs)))
            for i in range(exp.nodes.count):
                sim.add_node(new_core(i))
            for i in range(exp.nodes.count):
                if i not in plan.churn.offline_at_start:
                    join(i, plans.initial_contacts(plan, i), initial=True)
            for e in plan.churn.events:
                if e.kind == "join":
                    sim.call_at(e.at_s, lambda e=e: join(e.node, plans.join_contacts(exp, e.node, e.at_s, alive)))
                else:
                    sim.call_at(e.at_s, lambda e=e: depart(e.node, e.kind))
            for w in plan.network.partitions:
                sim.call_at(w.start_s, lambda w=w: partition(w.nodes, True))
                sim.call_at(w.end_s, lambda w=w: partition(w.nodes, False))
            if exp.sim.variants:
                # before the first publication (entries at one time run in the order scheduled)
                sim.call_at(min((p.at_s for p in plan.publications), default=plan.end_s), fork_variants)
            rounds: dict[float, list[tuple[int, plans.Publication]]] = {}
            for k, p in enumerate(plan.publications):
                rounds.setdefault(p.at_s, []).append((k, p))

            def publish(batch) -> None:
                for k, p in batch:
                    sim.publish(p.node, p.topic, plans.payload(exp, k))

            frozen = exp.publications.freeze and exp.publications.mode == "per_topic"
            for at, batch in rounds.items():
                sim.call_at(at, (lambda b=batch: sim.run_frozen(lambda: publish(b))) if frozen else (lambda b=batch: publish(b)))
            every = exp.outputs.snapshot_every_s
            if every:
                for k in range(1, int(plan.end_s / every) + 1):
                    sim.call_at(k * every, settled_snapshot)
            with phase(f"sim: {exp.nodes.count} peers, {plan.end_s:.0f} s of virtual time", plan.end_s) as advance:
                t = 0.0
                while t < plan.end_s + sim.frozen_s:  # freezes push the schedule later
                    t = min(plan.end_s + sim.frozen_s, t + 1.0)
                    sim.run_until(t)
                    advance(t - sim.frozen_s)
            end_ns = ns(sim.now)
            settled_snapshot()
            spans.flush()
        finally:
            if writer is None and not forked:
                writer = pq.ParquetWriter(rd.traces / "spans.parquet", SPAN_SCHEMA)  # a run with no spans
            if writer is not None:
                writer.close()
            timeline.close()
        snapshots.close()
        rd.write_jsonl("stats.jsonl", ({"node": i, "counters": dict(c)} for i, c in sim.stats.items()))
        rd.write_json("run.json", run_meta(
            exp, rd, started_ns=0, measure_start_ns=ns(exp.phases.warmup_s), ended_ns=end_ns,
            frozen_ns=ns(sim.frozen_s), sim_steps=sim.steps, spans=spans.count,
            skipped_publications=plan.skipped_publications,
        ))
