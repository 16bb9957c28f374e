"""The HTML report: summary tables and PNG plots (matplotlib), rendered with jinja2."""

from __future__ import annotations

from pathlib import Path

import jinja2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("analysis", "templates"), autoescape=jinja2.select_autoescape(["html", "j2"]),
)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
    _save(fig, plots / "latency_cdf.png")
    out["latency_cdf"] = "plots/latency_cdf.png"

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([r["hops"] for r in hop_rows], [r["count"] for r in hop_rows])
    ax.set(xlabel="hops of the first copy", ylabel="deliveries", title="Hop histogram")
    _save(fig, plots / "hops.png")
    out["hops"] = "plots/hops.png"

    ratios = [r["hit_ratio"] for r in events.select("hit_ratio").collect() if r["hit_ratio"] is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(ratios, bins=20, range=(0, 1))
    ax.set(xlabel="hit ratio of an event", ylabel="events", title="Hit ratio per event")
    _save(fig, plots / "hit_ratio_per_event.png")
    out["hit_ratio_per_event"] = "plots/hit_ratio_per_event.png"

    conv = summary.get("protocol_metrics", {}).get("ring_convergence")
    if conv and len(conv) > 1:
        fig, ax = plt.subplots(figsize=(6, 4))
        cycles = [c["cycle"] for c in conv]
        ax.plot(cycles, [c["missing_links_pct"] for c in conv], label="missing ring links (%)")
        ax.plot(cycles, [c["incomplete_rings_pct"] for c in conv], label="incomplete rings (%)")
        ax.set(xlabel="cycle", ylabel="%", title="Ring convergence", ylim=(0, 101))
        ax.legend()
        ax.grid(alpha=0.3)
        _save(fig, plots / "ring_convergence.png")
        out["ring_convergence"] = "plots/ring_convergence.png"
    by_size = summary.get("protocol_metrics", {}).get("convergence_by_size")
    if by_size and by_size["nodes"]:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
        for ax, rows, key, label in ((axes[0], by_size["nodes"], "subscriptions_from", "subscriptions (bin start)"),
                                     (axes[1], by_size["rings"], "ring_size_from", "ring size (bin start)")):
            done = [r for r in rows if r["mean_cycle"] is not None]
            ax.plot([r[key] or 1 for r in done], [r["mean_cycle"] for r in done], marker="o", label="mean")
            ax.plot([r[key] or 1 for r in done], [r["max_cycle"] for r in done], marker=".", ls=":", label="max")
            ax.set(xscale="log", xlabel=label)
            ax.grid(alpha=0.3)
        axes[0].set(ylabel="cycle from which complete", title="Nodes")
        axes[1].set(title="Rings")
        axes[0].legend()
        _save(fig, plots / "convergence_by_size.png")
        out["convergence_by_size"] = "plots/convergence_by_size.png"
    degree = summary.get("protocol_metrics", {}).get("rings_degree_by_subscriptions")
    if degree:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([d["subscriptions_from"] or 1 for d in degree], [d["mean_rings_degree"] for d in degree], marker="o")
        ax.set(xscale="log", yscale="log", xlabel="subscriptions (bin start)", ylabel="mean RINGS degree",
               title="RINGS degree against subscription size")
        ax.grid(alpha=0.3)
        _save(fig, plots / "rings_degree.png")
        out["rings_degree"] = "plots/rings_degree.png"

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
        _save(fig, plots / "over_time.png")
        out["over_time"] = "plots/over_time.png"
    return out


def write_html(rd: Path, summary: dict) -> None:
    html = _env.get_template("report.html.j2").render(s=summary)
    tmp = rd / ".report.html.tmp"
    tmp.write_text(html)
    tmp.replace(rd / "report.html")
