"""Protocol analyses by protocol name: what a protocol adds to ``summary.json``'s
``protocol_metrics``, its plots and its report section.

The summary job looks the run's protocol (``run.json``) up here by name: the module of that name
in this package, else the module whose ``ANALYSES`` lists it (SpiderCast's covers its comparison
overlays); a protocol without an analysis gets the common metrics only. An analysis is fed the snapshots one at a time as they stream from
``snapshots/`` (a 10,000-node run's snapshots never sit in memory at once), then asked for
its metrics, its plots and its report rows. Nothing here imports the protocol cores: an
analysis computes from the run's files alone, so it is a second route to what the cores did.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from analysis.protocols.base import ProtocolAnalysis


def analysis_class(protocol: str) -> type[ProtocolAnalysis]:
    """The analysis of ``protocol`` (``ProtocolAnalysis`` itself where it has none)."""
    modules = [m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"]
    for name in sorted(modules, key=lambda m: m != protocol):  # the module of that name first
        found = getattr(importlib.import_module(f"{__name__}.{name}"), "ANALYSES", {}).get(protocol)
        if found is not None:
            return found
    return ProtocolAnalysis


def analysis_for(meta: dict, subscriptions: dict[int, list[str]]) -> ProtocolAnalysis:
    return analysis_class(meta["protocol"])(meta, subscriptions)


def sweep_analysis(protocol: str, sweep_dir: Path, runs: list[tuple[dict, dict]]) -> dict:
    return analysis_class(protocol).sweep(sweep_dir, runs)


__all__ = ["ProtocolAnalysis", "analysis_class", "analysis_for", "sweep_analysis"]
