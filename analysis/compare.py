"""Side-by-side comparison of runs (for example the same experiment and seed in sim and local):
each headline metric of summary.json with its difference, each run's fidelity verdict (whether
its host kept up: analysis/fidelity.py), and the total variation distance between the hop
distributions (0 = identical, 1 = disjoint)."""

from __future__ import annotations

import json
from pathlib import Path

METRICS = [
    ("hit_ratio",), ("complete_event_ratio",), ("hops", "mean"), ("hops", "p50"), ("hops", "p99"), ("hops", "max"),
    ("latency_ms", "p50"), ("latency_ms", "p99"), ("duplication_factor",), ("relay_ratio",),
    ("degree", "mean"), ("topic_connectivity",), ("overhead", "msgs_per_node_per_cycle"),
]


def _get(summary: dict, path: tuple) -> float | None:
    for key in path:
        summary = summary.get(key) if isinstance(summary, dict) else None
    return summary


def hop_tvd(a: dict[str, int], b: dict[str, int]) -> float | None:
    ta, tb = sum(a.values()), sum(b.values())
    if not ta or not tb:
        return None
    return 0.5 * sum(abs(a.get(k, 0) / ta - b.get(k, 0) / tb) for k in set(a) | set(b))


def expand_sweeps(dirs: list[str]) -> list[Path]:
    """Run directories, with each sweep directory (it has sweep.json) replaced by its runs."""
    out: list[Path] = []
    for d in map(Path, dirs):
        if (d / "sweep.json").exists():
            record = json.loads((d / "sweep.json").read_text())
            out += [d / r["run_dir"] for r in record.get("rows", []) if r.get("status") == "ok"]
        else:
            out.append(d)
    return out


def compare(run_dirs: list[str | Path]) -> dict:
    summaries = [json.loads((Path(d) / "summary.json").read_text()) for d in run_dirs]
    rows = []
    for path in METRICS:
        values = [_get(s, path) for s in summaries]
        base = values[0]
        rows.append({"metric": ".".join(path), "values": values,
                     "diff": [None if v is None or base is None else v - base for v in values[1:]]})
    return {
        "runs": [s["run_id"] for s in summaries],
        "backends": [s["backend"] for s in summaries],
        "verdicts": [(s.get("fidelity") or {}).get("verdict") for s in summaries],
        "metrics": rows,
        "hop_tvd": [hop_tvd(summaries[0].get("hop_histogram", {}), s.get("hop_histogram", {})) for s in summaries[1:]],
    }
