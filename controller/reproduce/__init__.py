"""``overlaylab reproduce``: the five seed papers' headline claims, checked claim by claim.

``claims/<paper>.yaml`` lists every claim of a paper (from the design specs); ``papers/<paper>.py``
says how this project checks the ones it can (:class:`~controller.reproduce.claims.Check`) and
why the others are not testable. :func:`reproduce` runs what the selected claims need at a scale
(``quick``: minutes on one machine; ``paper``: the paper's N, rounds and repetitions), judges
each claim and writes the report (``report.py``).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from controller.reproduce.claims import FAILED, PAPERS, Claim, Scale
from controller.reproduce.report import write
from controller.reproduce.runner import execute, judge, needed


def registry() -> dict[str, list[Claim]]:
    """Every paper's claims, each with its check or why it has none."""
    out = {}
    for paper in PAPERS:
        module = importlib.import_module(f"controller.reproduce.papers.{paper}")
        out[paper] = module.claims()
    return out


def select(targets: list[str]) -> dict[str, list[Claim]]:
    """The claims ``targets`` name (papers or claim ids, any case; none: all)."""
    everything = registry()
    if not targets:
        return everything
    wanted = {t.lower() for t in targets}
    unknown = wanted - set(everything) - {c.id.lower() for cs in everything.values() for c in cs}
    if unknown:
        raise ValueError(f"no paper or claim called {', '.join(sorted(unknown))} (papers: {', '.join(PAPERS)})")
    return {p: [c for c in cs if p in wanted or c.id.lower() in wanted] for p, cs in everything.items()
            if p in wanted or any(c.id.lower() in wanted for c in cs)}


def reproduce(targets: list[str], scale: Scale, out: Path, workers: int | None = None, resume: bool = False,
              runs: Path | None = None) -> dict:
    """Run (under ``runs``, default ``out/runs``), judge and report; returns the record written
    to ``out/reproduce.json``, less the papers it kept from an earlier report there."""
    chosen = select(targets)
    claims = [c for cs in chosen.values() for c in cs]
    summaries = execute(needed(claims, scale), runs or out / "runs", workers, resume)
    record = write(out, scale, {p: [judge(c, scale, summaries) for c in cs] for p, cs in chosen.items()})
    return {**record, "papers": {p: record["papers"][p] for p in chosen}}


def failures(record: dict) -> list[str]:
    """The claims that did not reproduce and that no registered explanation covers."""
    return [f"{c['id']}" for p in record["papers"].values() for c in p["claims"]
            if c["verdict"] in FAILED and not c.get("explained")]
