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
          series: list[dict] = ()) -> dict[str, str]:
    """Draw the plots into ``rd/plots``; returns {plot name: relative path}."""
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
    return out


def write_html(rd: Path, summary: dict, protocol_title: str = "", protocol_rows: list = ()) -> None:
    """``protocol_rows``: (label, value) rows of the protocol analysis's section."""
    html = _env.get_template("report.html.j2").render(s=summary, protocol_title=protocol_title,
                                                      protocol_rows=protocol_rows)
    tmp = rd / ".report.html.tmp"
    tmp.write_text(html)
    tmp.replace(rd / "report.html")
