"""Protocol analyses by protocol name: what a protocol adds to ``summary.json``'s
``protocol_metrics``, its plots and its report section.

The summary job looks the run's protocol (``run.json``) up here; a protocol without an analysis
gets the common metrics only. An analysis is fed the snapshots one at a time as they stream from
``snapshots.jsonl`` (a 10,000-node run's snapshots never sit in memory at once), then asked for
its metrics, its plots and its report rows. Nothing here imports the protocol cores: an
analysis computes from the run's files alone, so it is a second route to what the cores did.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


class ProtocolAnalysis:
    """Base: no protocol metrics. ``meta`` is ``run.json``; ``subscriptions`` node -> topics."""

    title = ""
    wants_events = False
    """Whether the summary job should hand it the per-event rows (``add_events``)."""

    def __init__(self, meta: dict, subscriptions: dict[int, list[str]]) -> None:
        self.meta, self.subscriptions = meta, subscriptions

    def add_timeline(self, rows: list[dict]) -> None:
        """The run's timeline (joins, leaves, crashes, faults), before the snapshots."""

    def add_snapshot(self, rows: list[dict]) -> None:
        """One snapshot's rows (one ``t_ns``), in time order."""

    def add_events(self, rows: list[dict]) -> None:
        """Every event's row of ``metrics/events.parquet`` (if ``wants_events``)."""

    def add_stats(self, rows: list[dict]) -> None:
        """Every node's counters (``stats.jsonl``), after the snapshots."""

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


_analyses: dict[str, Callable[[dict, dict[int, list[str]]], ProtocolAnalysis]] = {}


def register_analysis(protocol: str, factory: Callable[[dict, dict[int, list[str]]], ProtocolAnalysis]) -> None:
    _analyses[protocol] = factory


def analysis_for(meta: dict, subscriptions: dict[int, list[str]]) -> ProtocolAnalysis:
    return _analyses.get(meta["protocol"], ProtocolAnalysis)(meta, subscriptions)


def sweep_analysis(protocol: str, sweep_dir: Path, runs: list[tuple[dict, dict]]) -> dict:
    factory = _analyses.get(protocol, ProtocolAnalysis)
    return getattr(factory, "sweep", ProtocolAnalysis.sweep)(sweep_dir, runs)


from . import dps, poldercast, spidercast, stan, static_gossip  # noqa: E402,F401  (register their analyses)
