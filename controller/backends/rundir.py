"""The run directory: everything one run leaves behind, self-contained.

``runs/<run-id>/`` holds ``experiment.yaml`` (resolved: re-runs the run), ``run.json`` (what
ran, when), ``subscriptions.jsonl``, ``timeline.jsonl`` (joins, leaves, crashes, faults: one
line each, flushed as it happens, so a crash keeps what was written), ``traces/`` (OTLP JSON
lines from local peers, or ``spans.parquet`` from the simulator), ``snapshots/`` and
``stats.parquet`` (per-node overlay links over time, counters at the end), and the analysis outputs
(``summary.json``, ``metrics/``, ``report.html``). Files other than the timeline are written to a
temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import TypeAdapter

from controller.experiment.schema import Experiment, dump_experiment
from node.wire.snapshots import SNAPSHOT_SCHEMA, snapshot_table  # noqa: F401 (the run directory's formats, here with the rest)


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, exp: Experiment, out_dir: str | Path, run_id: str | None = None) -> RunDir:
        """A new run directory; ``run_id`` names it when the run began elsewhere (the k8s
        backend's in-cluster controller writes the run its caller created)."""
        if run_id is not None:
            path = Path(out_dir) / run_id
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            base = f"{exp.name}-{exp.backend}-s{exp.seed}-{stamp}"
            path, n = Path(out_dir) / base, 1
            while path.exists():
                n += 1
                path = Path(out_dir) / f"{base}-{n}"
        (path / "traces").mkdir(parents=True, exist_ok=run_id is not None)
        rd = cls(path)
        rd.write_text("experiment.yaml", dump_experiment(exp))
        return rd

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def traces(self) -> Path:
        return self.path / "traces"

    def write_text(self, name: str, text: str) -> None:
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.path / name)

    def write_json(self, name: str, obj) -> None:
        self.write_text(name, json.dumps(obj, indent=2, sort_keys=True) + "\n")

    def write_jsonl(self, name: str, rows: Iterable[dict]) -> None:
        self.write_text(name, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))

    def read_json(self, name: str):
        return json.loads((self.path / name).read_text())


class JsonLines:
    """An append-only JSON-lines file, flushed after every write: a crash keeps what was written,
    and long runs do not hold their rows in memory."""

    def __init__(self, rd: RunDir, name: str) -> None:
        self._f = open(rd.path / name, "a", encoding="utf-8")

    def write(self, rows: Iterable[dict]) -> None:
        self._f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class Timeline(JsonLines):
    """Append-only record of controller actions, one JSON line each, flushed at once."""

    def __init__(self, rd: RunDir) -> None:
        super().__init__(rd, "timeline.jsonl")

    def record(self, t_ns: int, kind: str, node: int | None = None, **extra) -> None:
        self.write([{"t_ns": t_ns, "kind": kind, "node": node, **extra}])


STATS_SCHEMA = pa.schema([("node", pa.int32()), ("counters", pa.map_(pa.string(), pa.int64()))])
"""Every node's counters at the end of the run (``stats.parquet``)."""


class Snapshots:
    """``snapshots/``: one Parquet file per snapshot, named by its time (zero-padded, so names
    sort in time order), each written to a temporary name and renamed: a crash loses at most the
    snapshot being written."""

    def __init__(self, rd: RunDir) -> None:
        self.dir = rd.path / "snapshots"
        self.dir.mkdir(exist_ok=True)

    def write(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        name = f"{table['t_ns'][0].as_py():020d}.parquet"
        tmp = self.dir / f".{name}.tmp"
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, self.dir / name)


def write_stats(rd: RunDir, counters: Iterable[tuple[int, dict]]) -> None:
    """``stats.parquet``: (node, its counters), renamed into place when whole."""
    rows = sorted(counters, key=lambda r: r[0])
    table = pa.table({"node": [n for n, _ in rows], "counters": [sorted(c.items()) for _, c in rows]}, schema=STATS_SCHEMA)
    tmp = rd.path / ".stats.parquet.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, rd.path / "stats.parquet")


def output_digests(path: Path) -> dict[str, str]:
    """SHA-256 of each of a run's outputs: the spans and the timeline by their bytes; the snapshots
    and counters by their rows (canonical JSON), so a run written before they were columns
    (``snapshots.jsonl``, ``stats.jsonl``) compares with one written after."""
    def rows_digest(rows: Iterable[dict]) -> str:
        h = hashlib.sha256()
        for r in rows:
            h.update((json.dumps(r, sort_keys=True) + "\n").encode())
        return h.hexdigest()

    def parquet_rows(files: Iterable[Path], maps: tuple[str, ...]) -> Iterator[dict]:
        for f in files:
            for r in pq.read_table(f).to_pylist():
                yield {**r, **{m: dict(r[m]) for m in maps}}

    def json_rows(f: Path) -> Iterator[dict]:
        yield from (json.loads(line) for line in f.read_text().splitlines()) if f.exists() else ()

    snapshots = sorted((path / "snapshots").glob("*.parquet"))
    return {
        "traces/spans.parquet": hashlib.sha256((path / "traces" / "spans.parquet").read_bytes()).hexdigest(),
        "timeline.jsonl": hashlib.sha256((path / "timeline.jsonl").read_bytes()).hexdigest(),
        "snapshots": rows_digest(parquet_rows(snapshots, ("per_topic",)) if snapshots else json_rows(path / "snapshots.jsonl")),
        "stats": rows_digest(parquet_rows([path / "stats.parquet"], ("counters",)) if (path / "stats.parquet").exists()
                             else json_rows(path / "stats.jsonl")),
    }


def run_meta(exp: Experiment, rd: RunDir, **times) -> dict:
    return {
        "run_id": rd.run_id, "backend": exp.backend, "protocol": exp.protocol.name,
        "seed": exp.seed, "nodes": exp.nodes.count, "topics": getattr(exp.workload, "topics", None),
        "networks": exp.sim.networks, "protocol_params": TypeAdapter(type(exp.protocol.params)).dump_python(
            exp.protocol.params, mode="json"),
        "cycle_s": exp.cycle_s(), **times,
    }
