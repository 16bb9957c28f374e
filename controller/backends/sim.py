"""The ``sim`` backend: the experiment's plans carried out by the discrete-event simulator.

Time is virtual (seconds from 0); spans go to ``traces/spans.parquet`` in the flat schema that the
analysis reads (ARCHITECTURE.md, "Traces"), written in chunks so 10K+ peers fit in memory.
Churn: a crash stops the node (messages to it are lost); a graceful leave lets the core say
goodbye first; a rejoin reuses the old core (``resume``) or builds a new one (``fresh``).
Partitions switch on and off in the link model at their times.

Variants (``sim.variants``): the overlay is built once; just before the first publication the
process forks, one child per variant (at most ``sim.parallel_variants`` at a time). A child
copies what the run wrote so far into ``variants/<label>/``, sets the variant's dissemination
parameters on every core and carries on to the end, writing a complete run directory. The
parent waits for them and writes ``variants.json``; its own directory holds the shared warm-up.
"""

from __future__ import annotations

import gc
import itertools
import os
import random
import shutil
import signal
import sys
import tempfile
import traceback

import pyarrow as pa
import pyarrow.parquet as pq

from controller.backends.base import Runner
from controller.backends.rundir import RunDir, Snapshots, Timeline, run_meta, write_stats
from controller.cli.progress import console, phase
from controller.experiment import plans
from controller.experiment.network import link_model_for_sim
from controller.experiment.schema import Experiment, ExperimentError, variant_experiment, variant_label
from node.kit import create_protocol
from node.kit.rejoin import core_seed
from node.kit.types import Descriptor
from node.sim import Simulation, SpanColumns
from node.sim.accelerators import NoAccelerator
from node.sim.check import Diverged, bisect, differences
from node.sim.engine import paused_gc

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
        run = _SimRun(exp, rd)
        try:
            run.run()
        except VariantsDone:
            return
        except BaseException:
            if run.child:  # never return into the parent's caller from a forked child
                traceback.print_exc()
                _exit(1)
            raise
        if run.child:
            _exit(0)


class _SimRun:
    """One simulated run: the plan's schedule (``plans.schedule``, the one the ``Driver`` of
    the other backends carries out) as entries of the simulator's clock."""

    def __init__(self, exp: Experiment, rd: RunDir, check_twin: bool = False) -> None:
        """``check_twin``: the compiled loop's run beside a ``sim.engine: check`` run."""
        self.exp, self.rd = exp, rd
        self.plan = plans.render(exp)
        self.child = False  # a forked variant
        self.forked = False  # this process forked the variants and wrote none of them
        self.writer: pq.ParquetWriter | None = None  # opened on the first spans, where this process writes
        self.spans = SpanColumns(sink=self._write_spans)
        self.sim = Simulation(seed=exp.seed, links=link_model_for_sim(self.plan.network, exp.seed),
                              wire_codec=exp.sim.wire_codec, spans=self.spans, validate=exp.sim.check_invariants,
                              engine="python" if exp.sim.engine == "check" else exp.sim.engine, unverified_ok=check_twin,
                              failure_detection=exp.sim.failure_detection)
        self.timeline = Timeline(rd)
        self.snapshots = Snapshots(rd)
        self.alive: set[int] = set()
        self.started: set[int] = set()
        self.cores_built: dict[int, int] = {}
        self._contacts: tuple[list[int] | None, list[Descriptor]] = (None, [])
        """The last contact list joined with and its descriptors (nodes that share one list share them)."""

    def _write_spans(self, cols) -> None:
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.rd.traces / "spans.parquet", SPAN_SCHEMA)
        self.writer.write_table(pa.table(cols, schema=SPAN_SCHEMA))

    # --- nodes --------------------------------------------------------------------------------

    def new_core(self, i: int):
        """Node ``i``'s next core: its k-th (k > 0, a fresh rejoin) has its own seed and event ids."""
        exp = self.exp
        k = self.cores_built.get(i, 0)
        self.cores_built[i] = k + 1
        me = Descriptor(i, sim_addr(i), self.plan.subscriptions[i])
        return create_protocol(exp.protocol.name, me, exp.protocol.params, random.Random(core_seed(exp.seed, i, k)),
                               self.sim.shared, str(k))

    def join(self, i: int, contacts: list[int], initial: bool = False) -> None:
        if i in self.alive:
            return
        if self.exp.churn.rejoin == "fresh" and i in self.started:
            self.sim.replace_node(self.new_core(i))
        self.started.add(i)
        self.alive.add(i)
        self.timeline.record(ns(self.sim.now), "join", i, **({"initial": True} if initial else {}))
        if contacts is not self._contacts[0]:
            self._contacts = (contacts, [Descriptor(j, sim_addr(j), plans.contact_topics(self.plan, i, j)) for j in contacts])
        self.sim.start_node(i, self._contacts[1])

    def depart(self, i: int, kind: str) -> None:
        if i not in self.alive:
            return
        self.alive.discard(i)
        self.timeline.record(ns(self.sim.now), kind, i)
        self.sim.stop_node(i, graceful=kind == "leave")

    def partition(self, cut: frozenset[int], on: bool) -> None:
        (self.sim.links.partitions.append if on else self.sim.links.partitions.remove)(cut)
        self.timeline.record(ns(self.sim.now), "fault_on" if on else "fault_off", None, fault="partition",
                             nodes=sorted(cut))

    def publish(self, batch: list[plans.Step]) -> None:
        for step in batch:
            p = step.publication
            self.sim.publish(p.node, p.topic, plans.payload(self.exp, step.index))

    # --- snapshots ----------------------------------------------------------------------------

    def write_snapshot(self) -> None:
        """Every alive node's views, at virtual time and at gossip time (frozen rounds out)."""
        sim = self.sim
        at, gossip_at = ns(sim.now), ns(sim.now - sim.frozen_s)
        self.snapshots.write(sim.snapshot_table(sorted(self.alive), at, gossip_at))

    def settled_snapshot(self) -> None:
        """A snapshot once the exchanges in flight have finished (timers held), so a partner
        that a RINGS/VICINITY exchange removed for a moment is not counted as missing: the
        end-of-cycle view the paper's simulator measures. Periodic, and at the end."""
        self.sim.settle()
        self.write_snapshot()

    # --- variants -----------------------------------------------------------------------------

    def fork_variants(self) -> None:
        """Fork one child per variant; return in each child as that variant, raise
        VariantsDone in the parent when all have ended."""
        exp, rd = self.exp, self.rd
        self.spans.flush()
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
                        for name in ("subscriptions.jsonl", "timeline.jsonl"):
                            if (rd.path / name).exists():
                                shutil.copyfile(rd.path / name, vrd.path / name)
                        shutil.copytree(rd.path / "snapshots", vrd.path / "snapshots", dirs_exist_ok=True)
                        self.timeline.close()
                        self.exp, self.rd = vexp, vrd
                        self.timeline, self.snapshots = Timeline(vrd), Snapshots(vrd)
                        for core in self.sim.nodes.values():
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
        self.forked = True
        raise VariantsDone

    # --- the run ------------------------------------------------------------------------------

    def _schedule(self) -> None:
        """The plan's steps as calls on the simulator's clock (entries due at one time run in the
        order scheduled); publications at one time are one round, on a frozen overlay if
        ``publications.freeze``; the variants fork just before the first publication."""
        exp, sim = self.exp, self.sim
        frozen = exp.publications.freeze and exp.publications.mode == "per_topic"
        forked_at = min((p.at_s for p in self.plan.publications), default=self.plan.end_s)
        rounds: dict[float, list[plans.Step]] = {}
        for step in plans.schedule(exp, self.plan, load=False):
            if step.kind == "publish":
                if exp.sim.variants and not rounds:
                    sim.call_at(forked_at, self.fork_variants)
                if step.at_s not in rounds:
                    batch = rounds[step.at_s] = []
                    sim.call_at(step.at_s, (lambda b=batch: sim.run_frozen(lambda: self.publish(b))) if frozen
                                else (lambda b=batch: self.publish(b)), native_ok=True)
                rounds[step.at_s].append(step)
            elif step.kind == "join":
                sim.call_at(step.at_s, lambda s=step: self.join(s.node, plans.join_contacts(exp, self.plan, s.node, s.at_s, self.alive)),
                            native_ok=True)
            elif step.kind in ("leave", "crash"):
                sim.call_at(step.at_s, lambda s=step: self.depart(s.node, s.kind), native_ok=True)
            elif step.kind in ("partition_on", "partition_off"):
                sim.call_at(step.at_s, lambda s=step: self.partition(s.nodes, s.kind == "partition_on"))
            else:
                raise ExperimentError(f"the sim backend cannot carry out a {step.kind!r} step")
        if exp.sim.variants and not rounds:
            sim.call_at(forked_at, self.fork_variants)
        every = exp.outputs.snapshot_every_s
        if every:
            for k in range(1, int(self.plan.end_s / every) + 1):
                sim.call_at(k * every, self.settled_snapshot, native_ok=True)

    def start(self) -> None:
        """The network built and started, the plan scheduled: virtual time 0."""
        rd, plan, sim = self.rd, self.plan, self.sim
        rd.write_jsonl("subscriptions.jsonl", ({"node": i, "topics": sorted(t)} for i, t in enumerate(plan.subscriptions)))
        with paused_gc():
            for i in range(len(plan.subscriptions)):
                sim.add_node(self.new_core(i))
            for i in range(len(plan.subscriptions)):
                if i not in plan.churn.offline_at_start:
                    self.join(i, plans.initial_contacts(plan, i), initial=True)
        self._schedule()

    def run(self) -> None:
        exp, rd, plan, sim = self.exp, self.rd, self.plan, self.sim
        n = len(plan.subscriptions)
        check = _Check(exp) if exp.sim.engine == "check" else None
        try:
            self.start()
            # The network as built (the plan, every core) out of the cyclic garbage collector's
            # reach: its full collections walked it again and again (a tenth of a 10,000-node
            # PolderCast run). Reference counting still frees what is dropped; only cycles among
            # these objects (a replaced core) stay.
            gc.freeze()  # undone at the end of the run (a sweep may run the next one here)
            networks = f" ({exp.sim.networks} networks)" if exp.sim.networks > 1 else ""
            with phase(f"sim: {n} peers{networks}, {plan.end_s:.0f} s of virtual time", plan.end_s) as advance:
                t = 0.0
                while t < plan.end_s + sim.frozen_s:  # freezes push the schedule later
                    t = min(plan.end_s + sim.frozen_s, t + 1.0)
                    sim.run_until(t)
                    if check is not None:
                        check.advance(sim, t)
                    advance(t - sim.frozen_s)
            end_ns = ns(sim.now)
            self.settled_snapshot()
            if check is not None:
                check.end(sim)
            sim.sync()
            self.spans.flush()
        finally:
            gc.unfreeze()
            if check is not None:
                check.close()
            if self.writer is None and not self.forked:  # a run with no spans
                self.writer = pq.ParquetWriter(self.rd.traces / "spans.parquet", SPAN_SCHEMA)
            if self.writer is not None:
                self.writer.close()
            self.timeline.close()
        exp, rd = self.exp, self.rd  # a forked variant's own
        write_stats(rd, ((i, {**c, **(sim.nodes[i].counters() if i in sim.nodes else {})}) for i, c in sim.stats.items()))
        rd.write_json("run.json", run_meta(
            exp, rd, started_ns=0, measure_start_ns=ns(exp.phases.warmup_s), ended_ns=end_ns,
            frozen_ns=ns(sim.frozen_s), sim_steps=sim.steps, sim_native_steps=sim.native_steps,
            sim_native_takes=sim.native_takes, sim_native_loops=sim.native_loops, sim_native_stale=sim.native_stale,
            **({"sim_check": check.record()} if check is not None else {}),
            spans=self.spans.count,
            events_planned=len(plan.publications) + plan.skipped_publications, skipped_publications=plan.skipped_publications,
            **plans.manifest(plan),
        ))


class _Check:
    """``sim.engine: check``: the run is the Python cores'; beside it the same run in the
    compiled loop (in a scratch directory; the loop runs even where the Python code it mirrors
    changed since it was verified: that is what the check checks) is compared with it every ``sim.check_every_s`` of
    virtual time and at the end (:mod:`node.sim.check`). At the first difference the interval
    is bisected and :class:`~node.sim.check.Diverged` raised with the step, the nodes, the
    fields and both values."""

    def __init__(self, exp: Experiment) -> None:
        if exp.sim.variants:
            raise ExperimentError("sim.engine: check does not run with sim.variants")
        self.exp, self.every_s = exp, exp.sim.check_every_s
        self.scratch = tempfile.TemporaryDirectory(prefix="overlaylab-check-")
        self.builds = itertools.count()
        self.twin = self.build_run("native")
        self.checked_at, self.checkpoints = 0.0, 0

    def build_run(self, engine: str) -> _SimRun:
        exp = self.exp.model_copy(update={"sim": self.exp.sim.model_copy(update={"engine": engine})})
        run = _SimRun(exp, RunDir.create(exp, self.scratch.name, run_id=f"{engine}-{next(self.builds)}"), check_twin=True)
        run.start()
        return run

    def build(self, engine: str) -> Simulation:
        return self.build_run(engine).sim

    def advance(self, sim: Simulation, t: float) -> None:
        """The twin run to ``t``; compared where a checkpoint is due."""
        twin = self.twin.sim
        try:
            twin.run_until(t)
        except NoAccelerator as e:
            raise ExperimentError(f"sim.engine: check: {e}") from None
        if t - self.checked_at >= self.every_s - 1e-9:
            self.compare(sim, t)

    def compare(self, sim: Simulation, t: float) -> None:
        self.checkpoints += 1
        if differences(sim, self.twin.sim):
            raise Diverged(bisect(self.build, self.checked_at, t))
        self.checked_at = t

    def end(self, sim: Simulation) -> None:
        """The twin's last settled snapshot (where the run's was taken), and the last comparison."""
        self.twin.settled_snapshot()
        self.compare(sim, sim.now)

    def record(self) -> dict:
        return {"every_s": self.every_s, "checkpoints": self.checkpoints, "compiled_steps": self.twin.sim.native_steps}

    def close(self) -> None:
        self.twin.timeline.close()
        self.scratch.cleanup()
