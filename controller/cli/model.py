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
from collections import Counter
from pathlib import Path

from analysis import gossip_model
from controller.cli.progress import console
from controller.cli.sweep import Point, points, short_names
from controller.experiment import plans, topology, workloads
from controller.experiment.schema import Experiment, ExperimentError, load_experiment


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
    avg = gossip_model.average(preds)
    return {k: avg[k] for k in ("Gamma", "Gamma_c", "Gamma_over_Gamma_c", "regime")} | {"model_receivers": avg["receivers"]}


def simulated(results: Path) -> dict[str, dict]:
    """Point label -> the protocol metrics of its run, from a sweep directory."""
    out = {}
    for row in json.loads((results / "sweep.json").read_text())["points"]:
        summary = results / row["run_dir"] / "summary.json" if row.get("run_dir") else None
        if row["rc"] == 0 and summary and summary.exists():
            out[row["point"]] = json.loads(summary.read_text()).get("protocol_metrics", {})
    return out


def note(row: dict) -> str:
    if row["regime"] != "below":
        return "above Γc: N x estimator"
    if gossip_model.near_threshold(row):
        return "eq. 17, near Γc: finite size"
    return "eq. 17"


def model_table(file: str | Path, overrides: list[str], results: Path | None) -> tuple[list[str], list[dict]]:
    base = load_experiment(file, overrides)
    todo = points(file, overrides)[1] if base.sweep.settings() else [Point(0, {}, base.seed)]
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
    return base.sweep.paths(), rows


def write(out: Path, grid: list[str], rows: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.json").write_text(json.dumps({"grid": grid, "rows": rows}, indent=2) + "\n")
    fields = ["point", *grid, "seed", "Gamma", "Gamma_c", "Gamma_over_Gamma_c", "regime", "model_receivers",
              "sim_receivers", "sim_sd", "sim_over_model", "note"]
    with open(out / "model.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    plot(out / "model.png", rows)


def plot(path: Path, rows: list[dict]) -> None:
    """Mean receivers against Γ (the chance a link carries the event): the model at each point
    (eq. 17 below Γc, N x the estimator above) and the simulation with its spread across networks."""
    from analysis.plotting import plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([r["Gamma"] for r in rows], [r["model_receivers"] for r in rows], "x", color="k", label="model")
    sims = [r for r in rows if "sim_receivers" in r]
    if sims:
        ax.errorbar([r["Gamma"] for r in sims], [r["sim_receivers"] for r in sims], yerr=[r["sim_sd"] or 0 for r in sims],
                    fmt="o", mfc="none", color="tab:blue", label="simulation (sd across networks)")
    for crit in sorted({round(r["Gamma_c"], 3) for r in rows}):
        ax.axvline(crit, ls=":", color="tab:red", label=f"Γc = {crit:g}")
    ax.set(xlabel="Γ = σ + (1 − σ)γ", ylabel="mean receivers per event", yscale="log")
    ax.legend(fontsize=8)
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
        table.add_row(*(json.dumps(r[k]) if k in r else "" for k in grid), str(r["seed"]), f(r["Gamma"]), f(r["Gamma_over_Gamma_c"], ".3f"),
                      f(r["model_receivers"]), f(r.get("sim_receivers")), f(r.get("sim_sd")),
                      f(r.get("sim_over_model"), ".4f"), r["note"])
    console.print(table)
