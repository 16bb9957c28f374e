"""The run directory: everything one run leaves behind, self-contained.

``runs/<run-id>/`` holds ``experiment.yaml`` (resolved: re-runs the run), ``run.json`` (what
ran, when), ``subscriptions.jsonl``, ``timeline.jsonl`` (joins, leaves, crashes, faults: one
line each, flushed as it happens, so a crash keeps what was written), ``traces/`` (OTLP JSON
lines from local peers, or ``spans.parquet`` from the simulator), ``snapshots.jsonl`` and
``stats.jsonl`` (per-node overlay links and counters at the end), and the analysis outputs
(``summary.json``, ``metrics/``, ``report.html``). Files other than the timeline are written to a
temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

from pydantic import TypeAdapter

from controller.experiment.schema import Experiment, dump_experiment


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

    def write_text(self, lines: str) -> None:
        """Lines already encoded (``SnapshotLines``)."""
        self._f.write(lines)
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class Timeline(JsonLines):
    """Append-only record of controller actions, one JSON line each, flushed at once."""

    def __init__(self, rd: RunDir) -> None:
        super().__init__(rd, "timeline.jsonl")

    def record(self, t_ns: int, kind: str, node: int | None = None, **extra) -> None:
        self.write([{"t_ns": t_ns, "kind": kind, "node": node, **extra}])


def snapshot_rows(snap, t_ns: int, gossip_ns: int | None = None) -> list[dict]:
    """One row per (node, layer) of a :class:`node.kit.types.NodeSnapshot` taken at ``t_ns``.
    ``gossip_ns``: the same moment with the simulator's frozen dissemination rounds left out (the
    overlay's own clock, which counts gossip cycles); ``t_ns`` where nothing was frozen."""
    return [
        {"t_ns": t_ns, "gossip_ns": t_ns if gossip_ns is None else gossip_ns, "node": snap.node_id,
         "topics": list(snap.topics), "layer": layer.layer, "neighbours": list(layer.neighbours),
         "per_topic": layer.per_topic}
        for layer in snap.layers
    ]


class SnapshotLines:
    """``snapshot_rows`` as the lines ``JsonLines.write`` makes of them, with each node's topics
    encoded once while they stay the same: a heavy subscriber's thousands of topics are on each
    of its rows in every snapshot (at 10,000 nodes, most of a snapshot's bytes)."""

    def __init__(self) -> None:
        self._topics: dict[int, tuple[list, str]] = {}

    def lines(self, snap, t_ns: int, gossip_ns: int | None = None) -> str:
        topics = list(snap.topics)
        known = self._topics.get(snap.node_id)
        if known is None or known[0] != topics:
            known = self._topics[snap.node_id] = (topics, json.dumps(topics))
        # the keys in sorted order, as json.dumps(row, sort_keys=True) writes them
        head = f'{{"gossip_ns": {t_ns if gossip_ns is None else gossip_ns}, "layer": '
        tail = f', "node": {snap.node_id}, "per_topic": '
        end = f', "t_ns": {t_ns}, "topics": {known[1]}}}\n'
        return "".join(f'{head}{json.dumps(layer.layer)}, "neighbours": {json.dumps(list(layer.neighbours))}{tail}'
                       f'{json.dumps(layer.per_topic, sort_keys=True)}{end}' for layer in snap.layers)


def run_meta(exp: Experiment, rd: RunDir, **times) -> dict:
    return {
        "run_id": rd.run_id, "backend": exp.backend, "protocol": exp.protocol.name,
        "seed": exp.seed, "nodes": exp.nodes.count, "topics": getattr(exp.workload, "topics", None),
        "networks": exp.sim.networks, "protocol_params": TypeAdapter(type(exp.protocol.params)).dump_python(
            exp.protocol.params, mode="json"),
        "cycle_s": exp.cycle_s(), **times,
    }
