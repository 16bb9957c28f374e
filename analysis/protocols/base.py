"""The base of every protocol analysis: what the summary job hands it and asks of it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analysis.overlay import Snapshot


class ProtocolAnalysis:
    """Base: no protocol metrics. ``meta`` is ``run.json``; ``subscriptions`` node -> topics."""

    title = ""
    wants_events = False
    """Whether the summary job should hand it the per-event rows (``add_events``)."""

    def __init__(self, meta: dict, subscriptions: dict[int, list[str]]) -> None:
        self.meta, self.subscriptions = meta, subscriptions

    def add_timeline(self, rows: list[dict]) -> None:
        """The run's timeline (joins, leaves, crashes, faults), before the snapshots."""

    def add_snapshot(self, snapshot: Snapshot) -> None:
        """One snapshot (one ``t_ns``; its ``rows``, or its Arrow ``table``), in time order."""

    def add_events(self, rows: list[dict]) -> None:
        """Every event's row of ``metrics/events.parquet`` (if ``wants_events``)."""

    def add_stats(self, rows: list[dict]) -> None:
        """Every node's counters (``stats.parquet``), after the snapshots."""

    def metrics(self, final: list[dict]) -> dict:
        """``protocol_metrics``; ``final`` is the last snapshot's rows."""
        return {}

    def plots(self, plots: Path, metrics: dict) -> dict[str, str]:
        """Draw into ``plots``; returns {plot name: path relative to the run directory}."""
        return {}

    def report_rows(self, metrics: dict) -> list[tuple[str, object]]:
        """(label, value) rows of the report's section for this protocol."""
        return []

    @staticmethod
    def sweep(sweep_dir: Path, runs: list[tuple[dict, dict]]) -> dict:
        """Across a sweep's runs ((table row, summary) each): what ``sweep.json`` records under
        ``protocol``, with plots drawn into ``sweep_dir``. Default: nothing."""
        return {}
