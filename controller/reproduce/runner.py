"""Run what the selected claims need, once each (a run two claims share runs once), as
``overlaylab run`` processes spread over the cores, then analyse them all in one Spark session;
then give each claim its verdict."""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor, as_completed
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
            for beside in (None, *c.check.beside):
                keys.update(dict.fromkeys(c.check.runs_at(scale, beside)))
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
    if not todo:
        return summaries
    spark = get_spark()
    # Each run is analysed as soon as it ends, while the others still simulate: Spark's jobs on
    # a small run wait on scheduling more than on the cores.
    with ThreadPoolExecutor(workers) as pool:
        for future in as_completed([pool.submit(_run, k, runs_dir) for k in todo]):
            key, run_dir = future.result()
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
    keys = check.runs_at(scale)
    got = [summaries.get(k) for k in keys]
    runs = _runs(keys, got)
    if any(g is None for g in got):
        return {**row, "verdict": "not reproduced", "why": "a run it needs failed", "runs": runs}
    invalid = [g["run_id"] for g in got if g is not None and (g.get("fidelity") or {}).get("verdict") == "invalid"]
    if invalid:  # the numbers describe an overloaded host, not the protocol (analysis/fidelity.py)
        return {**row, "verdict": "not reproduced", "runs": runs,
                "why": f"not scored: fidelity.verdict is invalid for {', '.join(invalid)}"}
    try:
        ours = check.metric([g for g in got if g is not None])
    except Exception as e:  # a check that breaks is this claim's failure, not the report's
        return {**row, "verdict": "not reproduced", "runs": runs, "why": f"its check failed: {e!r}"}
    expect, x = check.at(scale)
    verdict: Verdict = expect.verdict(ours)
    return {**row, "verdict": verdict, "ours": ours, "paper": expect.paper(), "rule": expect.describe(),
            "options": check.options, "note": check.note, "x": x, "x_label": check.x_label, "runs": runs,
            "explained": _explained(check, ours) if verdict == "not reproduced" else "",
            "beside": {label: _beside(check, scale, label, summaries) for label in check.beside}}


def _runs(keys: list[RunKey], got: list[dict | None]) -> list[dict[str, Any]]:
    """Which runs a number came from: file, sets, run id and the folder under ``runs/`` (two runs
    of one file started in the same second share a run id, never a folder)."""
    return [{"file": f, "sets": list(s), "run_id": g["run_id"] if g else None, "dir": key_name((f, s))}
            for (f, s), g in zip(keys, got)]


def _explained(check, ours: Any) -> str:
    return check.explained(ours) if callable(check.explained) else check.explained


def _beside(check, scale: Scale, label: str, summaries: dict[RunKey, dict | None]) -> dict[str, Any]:
    """Our number under another rule (``Check.beside``), with its runs; None where one failed."""
    keys = check.runs_at(scale, label)
    got = [summaries.get(k) for k in keys]
    return {"sets": list(check.beside[label]), "ours": check.metric(got) if all(got) else None,
            "runs": _runs(keys, got)}


