"""Sweeps: one experiment file over a grid of settings and seeds (``overlaylab sweep FILE``).

The file's ``sweep:`` section maps ``--set`` paths to lists of values (``grid``) and lists more
settings one by one (``points``); every combination and every listed setting, with every seed of
``sweep.seeds`` (default: the file's seed), is a point. Every point is loaded and
validated before the first one runs, so a bad value is refused with its point and field named.
Points run as ``overlaylab run`` processes of their own, ``sweep.parallel`` at a time (default:
one per core), each in its own directory with its log; a point that fails is recorded as failed
and the others carry on. Then every run is analysed in one Spark session, and the sweep's table
(one row per run; a point that forks into ``sim.variants`` gives one row per variant) goes to
``sweep.json`` and ``sweep.csv`` beside the points, and to the terminal.

    sweep-dir/
      sweep.json, sweep.csv      the points, their status and headline metrics
      000_count-1000_s1/         a point: log.txt, point.json and its run directory
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.cli.progress import console
from controller.experiment.schema import Experiment, ExperimentError, check_data_files, load_experiment

COLUMNS = [
    ("hit ratio", ("hit_ratio",)), ("complete", ("complete_event_ratio",)), ("mean hops", ("hops", "mean")),
    ("p99 latency ms", ("latency_ms", "p99")), ("dup.", ("duplication_factor",)), ("relay", ("relay_ratio",)),
    ("mean degree", ("degree", "mean")), ("msgs/node/cycle", ("overhead", "msgs_per_node_per_cycle")),
    ("receivers/event", ("protocol_metrics", "receivers_mean")),
    ("PVS initial", ("protocol_metrics", "ipvs_mean")), ("PVS final", ("protocol_metrics", "fpvs_mean")),
    ("LVS", ("protocol_metrics", "lvs_mean")), ("fidelity", ("fidelity", "verdict")),
]


@dataclass(frozen=True)
class Point:
    index: int
    settings: dict[str, Any]
    """The grid's ``--set`` path -> value for this point."""
    seed: int

    @property
    def label(self) -> str:
        """The point's directory: ``003_count-2000_fanout-3_s1``."""
        names = short_names(list(self.settings))
        parts = [f"{names[path]}-{_text(v)}" for path, v in self.settings.items()]
        return "_".join([f"{self.index:03d}", *parts, f"s{self.seed}"]).replace("/", "-")

    def overrides(self) -> list[str]:
        return [f"{path}={json.dumps(v)}" for path, v in self.settings.items()] + [f"seed={self.seed}"]


def short_names(paths: list[str]) -> dict[str, str]:
    """Each path's last part, or the whole path where two paths end alike."""
    last = [p.rsplit(".", 1)[-1] for p in paths]
    return {p: name if last.count(name) == 1 else p for p, name in zip(paths, last)}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def points(file: str | Path, overrides: list[str] = (), *, check: bool = True,
           sim_only: bool = False) -> tuple[Experiment, list[Point]]:
    """The file's base experiment and its points, each validated (``check``; an index of the
    sweep's Job trusts the sweep that made it) and, with ``sim_only``, each a simulation."""
    base = load_experiment(file, overrides)
    settings = base.sweep.settings() or ([{}] if base.sweep.seeds else [])
    if not settings:
        raise ExperimentError(f"{file}: no sweep.grid, sweep.points or sweep.seeds: nothing to sweep "
                              "(add a sweep: section, docs/experiments.md)")
    seeds = base.sweep.seeds or [base.seed]
    found = [Point(k, s, seed) for k, (s, seed) in enumerate(itertools.product(settings, seeds))]
    for p in found if check else ():
        try:
            exp = load_experiment(file, [*overrides, *p.overrides()])
            check_data_files(exp, str(file))
        except ExperimentError as e:
            raise ExperimentError(f"sweep point {p.label}:\n{e}") from None
        if sim_only and exp.backend != "sim":
            raise ExperimentError(f"sweep point {p.label}: backend {exp.backend}; a sweep over --backend k8s "
                                  "runs simulations (set backend: sim)")
    return base, found


def run_process(file: str | Path, overrides: list[str], where: Path) -> tuple[int, Path | None, float]:
    """``overlaylab run FILE --no-analyze`` as a process into ``where`` (its log in
    ``log.txt``): its exit code, its run directory (None if it wrote none) and wall seconds."""
    where.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "controller.cli.main", "run", str(file), *(a for o in overrides for a in ("--set", o)),
           "--out", str(where), "--no-analyze"]
    t0 = time.perf_counter()
    with open(where / "log.txt", "wb") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    runs = sorted(d for d in where.iterdir() if d.is_dir())
    return rc, (runs[-1] if runs else None), time.perf_counter() - t0


def run_point(file: str | Path, overrides: list[str], p: Point, sweep_dir: Path) -> dict:
    """Run one point as an ``overlaylab run`` process into ``sweep_dir/<label>/`` (its log, its
    run directory and ``point.json``: the row ``sweep.json`` lists it by)."""
    where = sweep_dir / p.label
    where.mkdir(parents=True)
    rc, run, wall = run_process(file, [*overrides, *p.overrides()], where)
    row = {"point": p.label, "settings": p.settings, "seed": p.seed, "rc": rc,
           "wall_s": round(wall, 2), "run_dir": str(run.relative_to(sweep_dir)) if run else None}
    (where / "point.json").write_text(json.dumps(row, indent=2) + "\n")
    console.print(f"sweep: {p.label}: {'done' if rc == 0 else f'FAILED (rc {rc}, see {where}/log.txt)'}"
                  f" in {row['wall_s']} s")
    return row


def point_row(sweep_dir: Path, p: Point) -> dict:
    """The row point ``p`` wrote, found by its index (where the experiment went through Helm, a
    value such as 1.0 comes back as 1 and the label differs), or a failed row where it wrote none."""
    row = {"point": p.label, "settings": p.settings, "seed": p.seed, "rc": -1, "wall_s": None, "run_dir": None}
    for path in sweep_dir.glob(f"{p.index:03d}_*/point.json"):
        written = json.loads(path.read_text())
        row.update(rc=written["rc"], wall_s=written["wall_s"], run_dir=written["run_dir"])
    return row


def run_sweep(file: str | Path, overrides: list[str], out: Path | None = None, parallel: int | None = None,
              analyze: bool = True, backend: str = "local", resume: Path | None = None) -> Path:
    """Run every point of ``file``'s sweep under a new directory in ``out`` (default: the file's
    ``outputs.dir``); returns it. ``backend`` "local": as processes here; "k8s": as the indexes
    of a Job on the cluster of the file's ``k8s`` section. ``resume``: an interrupted sweep's
    directory (local): the points that finished there are kept, the others run again."""
    base, todo = points(file, overrides, sim_only=backend == "k8s")
    out = out or Path(base.outputs.dir)
    sweep_id = resume.name if resume else f"{base.name}-sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    sweep_dir = resume or out / sweep_id
    workers = parallel or base.sweep.parallel or os.cpu_count() or 1
    console.print(f"sweep: {len(todo)} points, {workers} at a time ({backend}) -> {sweep_dir}")
    started = time.perf_counter()
    if backend == "k8s":
        from controller.backends.k8s import run_sweep_job

        run_sweep_job(base, sweep_id, len(todo), workers, out)
        rows = [point_row(sweep_dir, p) for p in todo]
    else:
        sweep_dir.mkdir(parents=True, exist_ok=resume is not None)
        done = {p.index: row for p in todo if (row := point_row(sweep_dir, p))["rc"] == 0
                and (sweep_dir / p.label).is_dir()} if resume else {}  # the same settings as the file's now
        for p in todo:
            if p.index not in done:
                for left in sweep_dir.glob(f"{p.index:03d}_*"):
                    shutil.rmtree(left)  # an interrupted point starts over
        if done:
            console.print(f"sweep: resuming, {len(done)} of {len(todo)} points already done")
        with ThreadPoolExecutor(workers) as pool:
            rows = list(pool.map(lambda p: done.get(p.index) or run_point(file, overrides, p, sweep_dir), todo))
    record = {"file": str(file), "overrides": list(overrides), "backend": backend, "grid": base.sweep.grid,
              "listed_points": base.sweep.points, "seeds": base.sweep.seeds or [base.seed], "parallel": workers,
              "wall_s": round(time.perf_counter() - started, 2), "points": rows}
    if analyze:
        record["rows"] = _analyse(sweep_dir, rows)
        record["protocol"] = _protocol_analysis(base.protocol.name, sweep_dir, record["rows"])
    (sweep_dir / "sweep.json").write_text(json.dumps(record, indent=2) + "\n")
    if analyze:
        _write_csv(sweep_dir / "sweep.csv", base.sweep.paths(), record["rows"])
        _print(base.sweep.paths(), record["rows"])
    failed = [r["point"] for r in rows if r["rc"] != 0]
    if failed:
        console.print(f"[red]sweep: {len(failed)} point(s) failed: {', '.join(failed)}[/]")
    return sweep_dir


def _run_dirs(sweep_dir: Path, row: dict) -> list[tuple[str, Path]]:
    """The analysable runs of a point: its run, or each variant it forked into."""
    run = sweep_dir / row["run_dir"]
    variants = run / "variants.json"
    if variants.exists():
        return [(v["run_dir"], run / v["run_dir"]) for v in json.loads(variants.read_text())]
    return [("", run)]


def _analyse(sweep_dir: Path, rows: list[dict]) -> list[dict]:
    from analysis.jobs.summarize import run as summarize
    from analysis.spark import get_spark

    spark = get_spark()
    table = []
    for row in rows:
        if row["rc"] != 0 or row["run_dir"] is None:
            table.append({"point": row["point"], **row["settings"], "seed": row["seed"], "variant": "",
                          "status": "failed"})
            continue
        for variant, run in _run_dirs(sweep_dir, row):
            summary = summarize(str(run), spark)
            table.append({"point": row["point"], **row["settings"], "seed": row["seed"], "variant": variant,
                          "status": "ok",
                          "run_dir": str(run.relative_to(sweep_dir)),
                          **{name: _get(summary, path) for name, path in COLUMNS}})
    return table


def _protocol_analysis(protocol: str, sweep_dir: Path, rows: list[dict]) -> dict:
    """The protocol's analysis across the sweep's runs (``ProtocolAnalysis.sweep``)."""
    from analysis.protocols import sweep_analysis

    runs = [(r, json.loads((sweep_dir / r["run_dir"] / "summary.json").read_text())) for r in rows if r["status"] == "ok"]
    return sweep_analysis(protocol, sweep_dir, runs)


def _get(summary: dict, path: tuple[str, ...]) -> Any:
    value: Any = summary
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _write_csv(path: Path, grid: list[str], rows: list[dict]) -> None:
    fields = ["point", *grid, "seed", "variant", "status", *(name for name, _ in COLUMNS), "run_dir"]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _print(grid: list[str], rows: list[dict]) -> None:
    from rich.table import Table

    variants = any(r["variant"] for r in rows)
    shown = [name for name, _ in COLUMNS if any(r.get(name) is not None for r in rows)] or [COLUMNS[0][0]]
    table = Table(title="sweep")
    for col in (*short_names(grid).values(), "seed", *(["variant"] if variants else []), *shown):
        table.add_column(col, overflow="fold")
    for r in rows:
        cells = ["failed"] * len(shown) if r["status"] != "ok" else [
            "n/a" if r.get(name) is None else r[name] if isinstance(r[name], str) else f"{r[name]:.4g}" for name in shown]
        table.add_row(*(_text(r[p]) if p in r else "" for p in grid), str(r["seed"]), *([r["variant"]] if variants else []), *cells)
    console.print(table)
