"""Large synthetic run directories, to measure and check the analysis at scale without running a
simulation first (``overlaylab synthetic OUT --spans N``; ``make bench-spark``).

A run of ``nodes`` nodes, each subscribed to ``subs_per_node`` of ``topics`` topics at random,
and events published one after another by a random subscriber of a random topic. Every other
subscriber gets a first copy after ``hops`` × 20 ms (± jitter), hops 1 + geometric; a share
``miss`` gets none, a share ``dup`` gets a second copy later, and ``relays`` copies per event go to
non-subscribers. A share ``churn`` of the nodes crashes once and rejoins. Copies of an event may
tie on time (whole milliseconds). The files have the simulator's formats, so
``overlaylab analyze`` and ``overlaylab crosscheck`` read them like any run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import types as T

from . import schemas

_ARROW = {T.StringType: pa.string(), T.LongType: pa.int64(), T.IntegerType: pa.int32(), T.BooleanType: pa.bool_()}
SPANS_ARROW = pa.schema([(f.name, _ARROW[type(f.dataType)]) for f in schemas.SPANS.fields])
MS = 1_000_000


def write_synthetic_run(out: Path, spans: int, *, nodes: int = 10_000, topics: int = 1_000, subs_per_node: int = 20,
                        miss: float = 0.005, dup: float = 0.15, relays: int = 2, churn: float = 0.02,
                        seed: int = 1, chunk_events: int = 2_000) -> Path:
    """Write a run of about ``spans`` spans into the new directory ``out``; return it."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True)
    (out / "traces").mkdir()
    subs = [rng.choice(topics, subs_per_node, replace=False) for _ in range(nodes)]
    members: list[list[int]] = [[] for _ in range(topics)]
    for node, ts in enumerate(subs):
        for t in ts:
            members[t].append(node)
    member_arrays = [np.array(m, dtype=np.int64) for m in members]
    per_event = nodes * subs_per_node / topics * (1 - miss + dup) + relays + 1
    events = max(1, round(spans / per_event))
    gap_ns = 10 * MS
    end_ns = events * gap_ns + 10_000 * MS

    writer = pq.ParquetWriter(out / "traces" / "spans.parquet", SPANS_ARROW)
    written = 0
    for start in range(0, events, chunk_events):
        table = _chunk(rng, range(start, min(events, start + chunk_events)), member_arrays, nodes, gap_ns,
                       miss, dup, relays, written)
        writer.write_table(table)
        written += table.num_rows
    writer.close()

    crashed = rng.choice(nodes, round(churn * nodes), replace=False)
    timeline = [{"t_ns": 0, "kind": "join", "node": n, "initial": True} for n in range(nodes)]
    for n in crashed:
        down = int(rng.integers(0, end_ns // 2))
        timeline += [{"t_ns": down, "kind": "crash", "node": int(n)},
                     {"t_ns": down + int(rng.integers(MS, 5_000 * MS)), "kind": "join", "node": int(n)}]
    timeline.sort(key=lambda e: e["t_ns"])
    _lines(out / "timeline.jsonl", timeline)
    _lines(out / "subscriptions.jsonl", ({"node": n, "topics": sorted(f"t{t}" for t in ts)} for n, ts in enumerate(subs)))
    (out / "experiment.yaml").write_text(f"name: synthetic\nseed: {seed}\nbackend: sim\n"
                                         f"analysis: {{delivery_window_s: 5.0}}\n")
    meta = {"run_id": out.name, "backend": "sim", "protocol": "synthetic", "seed": seed, "nodes": nodes,
            "topics": topics, "cycle_s": 1.0, "started_ns": 0, "measure_start_ns": 0, "ended_ns": end_ns,
            "events_planned": events, "spans": written, "synthetic": True}
    (out / "run.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return out


def _chunk(rng: np.random.Generator, events: range, members: list[np.ndarray], nodes: int, gap_ns: int,
           miss: float, dup: float, relays: int, first_span: int) -> pa.Table:
    """The spans of ``events``: one publish each, then its copies."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("event", "node", "src", "time", "hops", "first", "sub")}

    def add(event, node, src, time, hops, first, sub):
        for k, v in zip(cols, (event, node, src, time, hops, first, sub)):
            cols[k].append(v)

    topic_of, id_of = [], []
    for i, e in enumerate(events):
        topic = int(rng.integers(len(members)))
        while len(members[topic]) < 2:
            topic = int(rng.integers(len(members)))
        pub = int(rng.choice(members[topic]))
        topic_of.append(f"t{topic}")
        id_of.append(f"{pub}-0-{e + 1}")
        t0 = e * gap_ns
        add(np.array([i]), np.array([pub]), np.array([-1]), np.array([t0]), np.array([0]), np.array([True]),
            np.array([True]))
        rec = members[topic][members[topic] != pub]
        rec = rec[rng.random(len(rec)) >= miss]
        hops = 1 + rng.geometric(0.35, len(rec))
        times = t0 + (hops * 20 + rng.integers(-5, 6, len(rec))) * MS
        add(np.full(len(rec), i), rec, rng.integers(nodes, size=len(rec)), times, hops,
            np.ones(len(rec), bool), np.ones(len(rec), bool))
        twice = rng.random(len(rec)) < dup  # a later copy, not flagged first
        again = rec[twice]
        add(np.full(len(again), i), again, rng.integers(nodes, size=len(again)),
            times[twice] + rng.integers(0, 380, len(again)) * MS, hops[twice] + rng.geometric(0.3, len(again)),
            np.zeros(len(again), bool), np.ones(len(again), bool))
        others = rng.integers(nodes, size=relays)
        others = others[~np.isin(others, members[topic])]
        add(np.full(len(others), i), others, rng.integers(nodes, size=len(others)),
            t0 + rng.integers(20, 100, len(others)) * MS, np.full(len(others), 1), np.ones(len(others), bool),
            np.zeros(len(others), bool))
    c = {k: np.concatenate(v) for k, v in cols.items()}
    n = len(c["event"])
    is_pub = c["src"] < 0
    ids = np.array(id_of, dtype=object)
    trace = np.array([f"{e + 1:032x}" for e in events], dtype=object)
    return pa.table({
        "trace_id": trace[c["event"]],
        "span_id": np.array([f"{first_span + k:016x}" for k in range(n)], dtype=object),
        "parent_span_id": pa.nulls(n, pa.string()),
        "name": np.where(is_pub, "publish", "receive").astype(object),
        "time_ns": c["time"].astype(np.int64),
        "node": c["node"].astype(np.int64),
        "from_node": pa.array(np.where(is_pub, 0, c["src"]), mask=is_pub, type=pa.int64()),
        "event_id": ids[c["event"]],
        "topic": np.array(topic_of, dtype=object)[c["event"]],
        "hops": c["hops"].astype(np.int32),
        "first_copy": c["first"],
        "subscriber": c["sub"],
    }, schema=SPANS_ARROW)


def _lines(path: Path, rows) -> None:
    with path.open("w") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
