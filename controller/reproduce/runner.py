"""Run what the selected claims need, once each (a run two claims share runs once), as
``overlaylab run`` processes spread over the cores, then analyse them all in one Spark session;
then give each claim its verdict."""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from controller.cli.progress import console
from controller.cli.sweep import run_process
from controller.reproduce.claims import Claim, Scale, Verdict

RunKey = tuple[str, tuple[str, ...]]


def key_name(key: RunKey) -> str:
    file, sets = key
    digest = hashlib.sha256(json.dumps([file, list(sets)]).encode()).hexdigest()[:8]
    return f"{Path(file).stem}-{digest}"


def needed(claims: list[Claim], scale: Scale) -> list[RunKey]:
    """Every run the claims need at ``scale``, each once, in a stable order."""
    keys: dict[RunKey, None] = {}
    for c in claims:
        if c.check is not None:
            for run in c.check.runs.get(scale, ()):
                keys.update(dict.fromkeys(run.expanded()))
    return list(keys)


def _run(key: RunKey, runs_dir: Path) -> tuple[RunKey, Path | None]:
    file, sets = key
    where = runs_dir / key_name(key)
    rc, run, wall = run_process(file, list(sets), where)
    console.print(f"reproduce: {file} {' '.join(sets)}: {'done' if rc == 0 else f'FAILED (see {where}/log.txt)'} "
                  f"in {wall:.0f} s")
    return key, (run if rc == 0 else None)


def _analysed(key: RunKey, runs_dir: Path) -> dict | None:
    """The summary of ``key``'s run already under ``runs_dir`` (``--resume``), if it has one."""
    where = runs_dir / key_name(key)
    found = sorted(where.glob("*/summary.json")) if where.is_dir() else []
    return json.loads(found[-1].read_text()) if found else None


def execute(keys: list[RunKey], runs_dir: Path, workers: int | None = None, resume: bool = False) -> dict[RunKey, dict | None]:
    """Each run's summary (None where it failed), the runs under ``runs_dir``. ``resume``: the
    runs an earlier invocation there ran and analysed are kept."""
    from analysis.jobs.summarize import run as summarize
    from analysis.spark import get_spark

    summaries: dict[RunKey, dict | None] = {k: _analysed(k, runs_dir) for k in keys} if resume else {}
    todo = [k for k in keys if summaries.get(k) is None]
    workers = workers or os.cpu_count() or 1
    console.print(f"reproduce: {len(todo)} runs ({len(keys) - len(todo)} kept), {workers} at a time -> {runs_dir}")
    with ThreadPoolExecutor(workers) as pool:
        done = list(pool.map(lambda k: _run(k, runs_dir), todo))
    if done:
        spark = get_spark()
        for key, run_dir in done:
            summaries[key] = summarize(str(run_dir), spark) if run_dir is not None else None
    return summaries


def judge(claim: Claim, scale: Scale, summaries: dict[RunKey, dict | None]) -> dict[str, Any]:
    """A claim's record: the paper's statement, our number(s), the verdict and what it ran under."""
    row: dict[str, Any] = {"id": claim.id, "statement": claim.statement, "setup": claim.setup, "source": claim.source,
                           "why": "", "explained": "", "note": "", "options": {}}
    check = claim.check
    if check is None or scale not in check.runs:
        why = claim.why_not if check is None else f"no {scale}-scale runs registered"
        return {**row, "verdict": "not testable", "why": why}
    keys = [k for run in check.runs[scale] for k in run.expanded()]
    got = [summaries.get(k) for k in keys]
    runs = [{"file": f, "sets": list(s), "run_id": g["run_id"] if g else None} for (f, s), g in zip(keys, got)]
    if any(g is None for g in got):
        return {**row, "verdict": "not reproduced", "why": "a run it needs failed", "runs": runs}
    invalid = [g["run_id"] for g in got if g is not None and (g.get("fidelity") or {}).get("verdict") == "invalid"]
    if invalid:  # the numbers describe an overloaded host, not the protocol (analysis/fidelity.py)
        return {**row, "verdict": "not reproduced", "runs": runs,
                "why": f"not scored: fidelity.verdict is invalid for {', '.join(invalid)}"}
    ours = check.metric([g for g in got if g is not None])
    expect, x = check.at(scale)
    verdict: Verdict = expect.verdict(ours)
    return {**row, "verdict": verdict, "ours": ours, "paper": expect.paper(), "rule": expect.describe(),
            "options": check.options, "note": check.note, "x": x, "x_label": check.x_label, "runs": runs,
            "explained": check.explained if verdict == "not reproduced" else ""}


