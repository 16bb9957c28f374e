"""The report directory: ``reproduce.json`` with every value, an HTML page per paper (each
claim: the paper's statement, our number beside the paper's, the verdict, a plot) and an index."""

from __future__ import annotations

import json
import platform
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import jinja2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from controller.reproduce.claims import PAPERS

VERDICTS = ("reproduced", "within tolerance", "shape only", "not reproduced", "not testable")
_TEMPLATES = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                                autoescape=True, undefined=jinja2.StrictUndefined)


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent)
    return done.stdout.strip() or "unknown"


def text(v: Any) -> str:
    """A value as the page shows it."""
    if isinstance(v, dict) and "mean" in v:
        return f"{v['mean']:.3g} ± {v['sd']:.2g} (n = {v['n']})"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(text(x) for x in v)
    return str(v)


def _series(v: Any) -> list[float] | None:
    items = v if isinstance(v, (list, tuple)) else [v]
    out = []
    for x in items:
        x = x["mean"] if isinstance(x, dict) else x
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            return None
        out.append(float(x))
    return out


def plot(row: dict, path: Path) -> bool:
    """Our number(s) on the paper's axes, with the paper's where it gives them; False where there
    is nothing to plot (a yes/no claim)."""
    ours = _series(row.get("ours"))
    if not ours:
        return False
    paper = _series(row.get("paper")) if row.get("paper") is not None else None
    fig, ax = plt.subplots(figsize=(4, 2.6))
    xs = row.get("x") or list(range(1, len(ours) + 1))
    if any(isinstance(x, str) for x in xs):  # named quantities side by side: grouped bars
        at = list(range(len(ours)))
        ax.bar([i - 0.2 for i in at], ours, 0.4, label="overlaylab")
        if paper and len(paper) == len(ours):
            ax.bar([i + 0.2 for i in at], paper, 0.4, label="paper")
        ax.set_xticks(at, xs, fontsize=7)
        ax.set_ylabel(row.get("x_label") or "")
    elif len(ours) > 1:
        ax.plot(xs, ours, "o-", label="overlaylab")
        if paper and len(paper) == len(ours):
            ax.plot(xs, paper, "s--", label="paper")
        ax.set_xlabel(row.get("x_label") or "run")
    else:
        ax.bar(["overlaylab"], ours)
        if paper and len(paper) == 1:
            ax.axhline(paper[0], color="C1", ls="--", label=f"paper: {row['rule']}")
    ax.set_title(row["id"])
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def _kept(out: Path, scale: str, fresh: dict[str, list[dict]]) -> dict[str, dict]:
    """The papers an earlier report in ``out`` at the same scale holds and this one does not
    judge again: kept as they are, each with the commit, machine and date it ran on."""
    try:
        old = json.loads((out / "reproduce.json").read_text())
    except (OSError, ValueError):
        return {}
    if old.get("scale") != scale:
        return {}
    ran = {k: old[k] for k in ("commit", "machine", "date") if k in old}
    return {name: {**ran, **paper} for name, paper in old.get("papers", {}).items()
            if name in PAPERS and name not in fresh and (out / f"{name}.html").exists()}


def write(out: Path, scale: str, rows_by_paper: dict[str, list[dict]]) -> dict:
    """Write the report into ``out``; returns the record ``reproduce.json`` holds. Papers an
    earlier report there judged at the same scale, and this one does not, stay (with the commit
    they ran on): one paper can be re-run without re-running the others."""
    meta = {"scale": scale, "commit": _commit(), "machine": f"{platform.node()} ({platform.machine()}, "
            f"{__import__('os').cpu_count()} cpus)", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    ran = {k: meta[k] for k in ("commit", "machine", "date")}
    papers = _kept(out, scale, rows_by_paper)
    for name, rows in rows_by_paper.items():
        for row in rows:
            row["ours_text"] = text(row["ours"]) if "ours" in row else ""
            for other in row.get("beside", {}).values():
                other["ours_text"] = text(other["ours"]) if other["ours"] is not None else "a run failed"
            png = out / name / f"{row['id']}.png"
            png.parent.mkdir(parents=True, exist_ok=True)
            row["plot"] = f"{name}/{png.name}" if "ours" in row and plot(row, png) else None
        counts = dict(Counter(r["verdict"] for r in rows))
        papers[name] = {**ran, "title": PAPERS[name], "counts": counts, "claims": rows}
        (out / f"{name}.html").write_text(_TEMPLATES.get_template("paper.html.j2").render(
            title=PAPERS[name], claims=rows, counts=counts, **meta))
    papers = {name: papers[name] for name in PAPERS if name in papers}
    (out / "index.html").write_text(_TEMPLATES.get_template("index.html.j2").render(
        papers=papers, verdicts=VERDICTS, **meta))
    record = {**meta, "papers": papers}
    (out / "reproduce.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    return record
