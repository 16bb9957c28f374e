"""``overlaylab model FILE``: Ferretti's analytic model against simulation over a sweep's grid.

Every point of the file's ``sweep:`` (or the file alone) is rendered as a run would render it:
each network's graph (``topology``) and subscriptions from the same seeds, so the model is
evaluated on the realised degree histogram and the realised σ of every network and topic
(:mod:`analysis.gossip_model`; eq. 17 below Γc, N x the outbreak estimator above it), then
averaged over them. With ``--results SWEEP_DIR`` (an ``overlaylab sweep`` of the same file) each
point's simulated mean receivers and their spread across networks stand beside it. The table
goes to the terminal, and ``model.json``, ``model.csv`` and ``model.png`` to the output folder.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import Counter
from pathlib import Path

from analysis import gossip_model

from . import plans, topology, workloads
from .config import Experiment, ExperimentError, load_experiment
from .progress import console
from .sweep import Point, points, short_names

NEAR = 0.85
"""Γ/Γc above which a finite network is expected to fall short of eq. 17 (ferretti-gossip.md §10)."""


def predict(exp: Experiment) -> dict:
    """The model for ``exp``: each network's graph and each topic's realised σ, averaged."""
    gamma = getattr(exp.protocol.params, "gamma", None)
    if gamma is None or exp.topology.model == "none":
        raise ExperimentError("overlaylab model: the experiment needs a protocol with gamma and a topology: graph")
    n, preds = exp.nodes.count, []
    for k in range(exp.sim.networks):
        ek = plans.network_experiment(exp, k)
        graph = topology.render(ek)
        assert graph is not None
        degrees = gossip_model.Degrees.from_histogram(graph[1]["degree_histogram"])
        counts = Counter(t for ts in workloads.render(ek) for t in ts)
        preds += [gossip_model.predict(degrees, c / n, gamma, n) for c in counts.values()]
    if not preds:
        raise ExperimentError("overlaylab model: no node subscribes to anything")
    regimes = {p["regime"] for p in preds}
    return {
        "Gamma": statistics.fmean(p["Gamma"] for p in preds),
        "Gamma_c": statistics.fmean(p["Gamma_c"] for p in preds),
        "Gamma_over_Gamma_c": statistics.fmean(p["Gamma_over_Gamma_c"] for p in preds),
        "regime": regimes.pop() if len(regimes) == 1 else "mixed",
        "model_receivers": statistics.fmean(p["receivers"] for p in preds),
    }


def simulated(results: Path) -> dict[str, dict]:
    """Point label -> the protocol metrics of its run, from a sweep directory."""
    out = {}
    for row in json.loads((results / "sweep.json").read_text())["points"]:
        summary = results / row["run_dir"] / "summary.json" if row.get("run_dir") else None
        if row["rc"] == 0 and summary and summary.exists():
            out[row["point"]] = json.loads(summary.read_text()).get("protocol_metrics", {})
    return out


def note(row: dict) -> str:
    if row["regime"] == "above":
        return "above Γc: estimator"
    if row["regime"] == "below" and row["Gamma_over_Gamma_c"] > NEAR:
        return "near Γc: finite size pulls the simulation below eq. 17"
    return "below Γc: eq. 17"


def model_table(file: str | Path, overrides: list[str], results: Path | None) -> tuple[list[str], list[dict]]:
    base = load_experiment(file, overrides)
    todo = points(file, overrides)[1] if base.sweep.grid else [Point(0, {}, base.seed)]
    sims = simulated(results) if results else {}
    rows = []
    for p in todo:
        exp = load_experiment(file, [*overrides, *p.overrides()])
        row: dict = {"point": p.label, **p.settings, "seed": p.seed, **predict(exp)}
        sim = sims.get(p.label)
        if sim and sim.get("receivers_mean") is not None:
            row.update(sim_receivers=sim["receivers_mean"], sim_sd=sim.get("receivers_sd_across_networks"),
                       sim_over_model=sim["receivers_mean"] / row["model_receivers"])
        row["note"] = note(row)
        rows.append(row)
    return list(base.sweep.grid), rows


def write(out: Path, grid: list[str], rows: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.json").write_text(json.dumps({"grid": grid, "rows": rows}, indent=2) + "\n")
    fields = ["point", *grid, "seed", "Gamma", "Gamma_c", "Gamma_over_Gamma_c", "regime", "model_receivers",
              "sim_receivers", "sim_sd", "sim_over_model", "note"]
    with open(out / "model.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    plot(out / "model.png", grid, rows)


def plot(path: Path, grid: list[str], rows: list[dict]) -> None:
    """Receivers against the grid's first path, one series per value of the others: the model as
    a line, the simulation as points with its spread across networks."""
    from analysis.plotting import plt

    if not grid:
        return
    x_key, rest = grid[0], grid[1:]
    series: dict[tuple, list[dict]] = {}
    for r in rows:
        series.setdefault(tuple(r[k] for k in rest), []).append(r)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = short_names(grid)
    for key, rs in series.items():
        rs = sorted(rs, key=lambda r: r[x_key])
        label = ", ".join(f"{names[k]}={v}" for k, v in zip(rest, key)) or "model"
        line = ax.plot([r[x_key] for r in rs], [r["model_receivers"] for r in rs], "-", label=f"model {label}")[0]
        sims = [r for r in rs if "sim_receivers" in r]
        if sims:
            ax.errorbar([r[x_key] for r in sims], [r["sim_receivers"] for r in sims],
                        yerr=[r["sim_sd"] or 0 for r in sims], fmt="o", color=line.get_color(), label=f"sim {label}")
    ax.set(xlabel=names[x_key], ylabel="mean receivers per event", yscale="log",
           title="model (eq. 17 below Γc, N·estimator above) and simulation")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def print_table(grid: list[str], rows: list[dict]) -> None:
    from rich.table import Table

    table = Table(title="model against simulation")
    for col in (*short_names(grid).values(), "seed", "Γ", "Γ/Γc", "model ⟨r⟩", "sim ⟨r⟩", "sd (networks)",
                "sim/model", "note"):
        table.add_column(col, overflow="fold")

    def f(v, spec=".4g"):
        return "n/a" if v is None else format(v, spec)

    for r in rows:
        table.add_row(*(json.dumps(r[k]) for k in grid), str(r["seed"]), f(r["Gamma"]), f(r["Gamma_over_Gamma_c"], ".3f"),
                      f(r["model_receivers"]), f(r.get("sim_receivers")), f(r.get("sim_sd")),
                      f(r.get("sim_over_model"), ".4f"), r["note"])
    console.print(table)
