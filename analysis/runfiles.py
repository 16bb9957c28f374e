"""Reading a run directory's own files, also after a crash cut them short."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSON-lines file (none if it is missing); a last line cut short by a crash is
    left out, a bad line elsewhere is an error."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    rows = []
    for k, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if k < len(lines) - 1:
                raise
    return rows


def read_stats(rd: Path) -> list[dict]:
    """Every node's counters: ``stats.parquet`` ({node, counters} rows), or a run written before it
    was columns, ``stats.jsonl``."""
    if (rd / "stats.parquet").exists():
        return [{"node": r["node"], "counters": dict(r["counters"])} for r in pq.read_table(rd / "stats.parquet").to_pylist()]
    return read_jsonl(rd / "stats.jsonl")


def run_end_ns(meta: dict, timeline: list[dict], last_span_ns: int) -> int:
    """When the run ended: ``run.json``'s ``ended_ns``, or, where the controller died before it
    wrote one, the last thing written (a span or a timeline line)."""
    if "ended_ns" in meta:
        return meta["ended_ns"]
    return max([last_span_ns, meta["started_ns"], *(e["t_ns"] for e in timeline)])
