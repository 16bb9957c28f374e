"""The HTML report: summary tables and PNG plots (matplotlib), rendered with jinja2."""

from __future__ import annotations

from pathlib import Path

import jinja2
from pyspark.sql import DataFrame

from .plotting import plt, save

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("analysis", "templates"), autoescape=jinja2.select_autoescape(["html", "j2"]),
)


def write(rd: Path, summary: dict, cdf: list[float], hop_rows: list[dict], events: DataFrame,
          series: list[dict] = (), lag: list[dict] = (), rounds: list[dict] = ()) -> dict[str, str]:
    """Draw the plots into ``rd/plots``; returns {plot name: relative path}. ``lag`` and
    ``rounds``: the host readings and probe rounds (analysis/fidelity.py)."""
    plots = rd / "plots"
    plots.mkdir(exist_ok=True)
    out = {}
    unit = "virtual ms" if summary["backend"] == "sim" else "ms"

    fig, ax = plt.subplots(figsize=(6, 4))
    if cdf:
        ax.plot(cdf, [i / 100 for i in range(len(cdf))], drawstyle="steps-post")
    ax.set(xlabel=f"delivery latency ({unit})", ylabel="share of deliveries", title="Latency CDF", ylim=(0, 1.01))
    ax.grid(alpha=0.3)
    out["latency_cdf"] = save(fig, plots, "latency_cdf.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([r["hops"] for r in hop_rows], [r["count"] for r in hop_rows])
    ax.set(xlabel="hops of the first copy", ylabel="deliveries", title="Hop histogram")
    out["hops"] = save(fig, plots, "hops.png")

    ratios = [r["hit_ratio"] for r in events.select("hit_ratio").collect() if r["hit_ratio"] is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(ratios, bins=20, range=(0, 1))
    ax.set(xlabel="hit ratio of an event", ylabel="events", title="Hit ratio per event")
    out["hit_ratio_per_event"] = save(fig, plots, "hit_ratio_per_event.png")

    if series:
        t = [r["t_s"] for r in series]
        fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(7, 7), sharex=True)
        locust = summary.get("load", {}).get("locust")
        if locust and locust["history"]:
            t0 = summary["load"]["measure_start_unix_s"]
            ax1.plot([h["t_unix_s"] - t0 for h in locust["history"]], [h["requests_per_s"] for h in locust["history"]],
                     label="offered (Locust requests/s)")
        ax1.plot(t, [r["published"] for r in series], label="published events/s")
        ax1.plot(t, [r["deliveries"] for r in series], label="deliveries/s")
        ax1.set(ylabel="per second", title="Load over time (s after the warm-up)")
        ax1.legend(fontsize=8)
        ax2.plot(t, [r["hit_ratio"] for r in series])
        ax2.set(ylabel="hit ratio", ylim=(0, 1.05))
        ax3.plot(t, [r["latency_p50_ms"] for r in series], label="p50")
        ax3.plot(t, [r["latency_p99_ms"] for r in series], label="p99")
        ax3.set(ylabel=f"latency ({unit})", xlabel="time (s)")
        ax3.legend(fontsize=8)
        out["over_time"] = save(fig, plots, "over_time.png")
    if lag or rounds:
        out["fidelity_over_time"] = _fidelity_plot(plots, lag, rounds)
    return out


def _fidelity_plot(plots: Path, lag: list[dict], rounds: list[dict]) -> str:
    """Each peer process's mean loop lag, and the probes' delay against the delay drawn for
    them, over the run: whether the host kept up, beside the protocol's curves."""
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for node in sorted({r["node"] for r in lag}):
        rows = [r for r in lag if r["node"] == node and r["lag_mean_ms"] is not None]
        ax1.plot([r["t_s"] for r in rows], [r["lag_mean_ms"] for r in rows], label=f"process of node {node}")
    ax1.set(ylabel="loop lag, mean (ms)", title="The host during the run (s after the start)")
    if lag:
        ax1.legend(fontsize=7)
    arrived = [r for r in rounds if r["planned_ms"] is not None]
    t = [r["start_s"] for r in arrived]
    ax2.plot(t, [r["planned_ms"] for r in arrived], label="planned (drawn by the emulation)")
    ax2.plot(t, [r["planned_ms"] + r["excess_ms"] for r in arrived], label="measured")
    ax2.set(ylabel="probe delay, mean (ms)", xlabel="time (s)")
    ax2.legend(fontsize=7)
    return save(fig, plots, "fidelity_over_time.png")


def write_html(rd: Path, summary: dict, protocol_title: str = "", protocol_rows: list = ()) -> None:
    """``protocol_rows``: (label, value) rows of the protocol analysis's section."""
    html = _env.get_template("report.html.j2").render(s=summary, protocol_title=protocol_title,
                                                      protocol_rows=protocol_rows)
    tmp = rd / ".report.html.tmp"
    tmp.write_text(html)
    tmp.replace(rd / "report.html")
