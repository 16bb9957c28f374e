"""Locust's own statistics (CSV), read beside the traces: offered publications per second."""

from __future__ import annotations

import csv
from pathlib import Path


def read_locust(run_dir: Path) -> dict | None:
    """Totals from ``locust/stats_stats.csv`` and the per-second offered rate from
    ``stats_stats_history.csv`` (Aggregated rows), or None when Locust did not run."""
    stats, history = run_dir / "locust" / "stats_stats.csv", run_dir / "locust" / "stats_stats_history.csv"
    if not stats.exists():
        return None
    with open(stats) as f:
        total = next((r for r in csv.DictReader(f) if r["Name"] == "Aggregated"), None)
    series = []
    if history.exists():
        # Locust's own Requests/s column is a moving average; the per-second offered rate is the
        # difference of the cumulative request count between consecutive rows.
        prev = None
        with open(history) as f:
            for r in csv.DictReader(f):
                if r["Name"] != "Aggregated":
                    continue
                row = (int(r["Timestamp"]), int(r["Total Request Count"]), int(r["Total Failure Count"]), int(r["User Count"]))
                if prev is not None and row[0] > prev[0]:
                    dt = row[0] - prev[0]
                    series.append({"t_unix_s": row[0], "users": row[3], "requests_per_s": (row[1] - prev[1]) / dt,
                                   "failures_per_s": (row[2] - prev[2]) / dt})
                prev = row
    requests = int(total["Request Count"]) if total else 0
    return {
        "requests": requests,
        "failures": int(total["Failure Count"]) if total else 0,
        "requests_per_s": float(total["Requests/s"]) if total else 0.0,
        "median_response_ms": float(total["Median Response Time"]) if total and requests else None,
        "history": series,
    }
