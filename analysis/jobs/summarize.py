"""The run analysis: traces + plans of one run directory -> metrics, summary.json, report.html.

Run it with ``overlaylab analyze RUN_DIR`` (local[*] Spark; ``--master URL`` and ``--conf K=V``
for a cluster, docs/spark.md); RUN_DIR may be a Hadoop URI (``s3a://bucket/runs/RUN``).

``analysis.spark.get_spark`` builds the session (``run()`` takes one); ``run()`` reads, ``analysis.metrics`` and
``analysis.overlay`` compute, and the writers at the end write ``metrics/*.parquet``,
``summary.json`` (METRICS.md's contract) and ``report.html``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis import fidelity
from analysis.protocols import analysis_for
from controller.cli.progress import phase

from .. import content, overlay, report, schemas
from .. import metrics as m
from ..load import read_locust
from ..runfiles import read_jsonl, read_stats, run_end_ns
from ..spark import PARTITIONS, get_spark, size_partitions
from ..storage import StagedRun, staged

QUANTILES = [0.5, 0.9, 0.99]


def load_spans(spark: SparkSession, traces: str, names: list[str]) -> DataFrame:
    """Every trace form in ``traces`` (OTLP JSON lines, simulator Parquet) as one flat table;
    ``names``: the files there."""
    parts = []
    if any(n.endswith(".jsonl") for n in names):
        raw = spark.read.schema(schemas.OTLP_TRACES).json(f"{traces}/*.jsonl")
        parts.append(m.normalize_otlp(raw))
    if "spans.parquet" in names:
        parts.append(spark.read.schema(schemas.SPANS).parquet(f"{traces}/spans.parquet"))
    if not parts:
        raise FileNotFoundError(f"no traces in {traces}")
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out.select(*schemas.SPANS.fieldNames())


def run(run_dir: str | Path, spark: SparkSession | None = None) -> dict:
    """Analyse the run at ``run_dir``: a local directory or a Hadoop URI (``s3a://...``)."""
    spark = spark or get_spark()
    with staged(str(run_dir), spark) as staged_run:
        size_partitions(spark, staged_run.trace_bytes)
        try:
            return _analyse(spark, staged_run)
        finally:
            spark.catalog.clearCache()  # a sweep analyses its points one after another in one session


def _analyse(spark: SparkSession, staged_run: StagedRun) -> dict:
    rd, uri = staged_run.local, staged_run.uri
    meta = json.loads((rd / "run.json").read_text())
    settings = (yaml.safe_load((rd / "experiment.yaml").read_text()) or {}).get("analysis", {})
    window_s = settings.get("delivery_window_s")
    join_warmup_ns = round(settings.get("join_warmup_s", 0.0) * 1e9)

    snapshots = overlay.snapshot_count(rd)
    with phase(f"analysis of {meta['run_id']}", 4 + snapshots) as advance:
        # The small inputs go from the driver (a cluster's executors cannot read its staging dir).
        sub_rows, timeline_rows = read_jsonl(rd / "subscriptions.jsonl"), read_jsonl(rd / "timeline.jsonl")
        # Spans partitioned by event, once: every later aggregation is by event (or event and node)
        # and every join of span-sized tables is on the event, so none shuffles them again.
        partitions = int(spark.conf.get(PARTITIONS))
        raw_spans = (load_spans(spark, f"{uri}/traces", staged_run.traces).select(*m.SPAN_COLUMNS)
                     .repartition(partitions, "event_id").cache())
        advance(1, f"spans read and partitioned by event ({raw_spans.count():,} rows)")
        raw_receipts = m.receipts(raw_spans).cache()
        if "ended_ns" not in meta:
            meta["ended_ns"] = run_end_ns(meta, timeline_rows, raw_spans.agg(F.max("time_ns")).first()[0] or 0)
        end_ns = meta["ended_ns"]
        refused = m.refused_events(raw_spans, raw_receipts).cache()
        refused_ids = F.broadcast(refused.select("event_id").distinct())
        spans = raw_spans.join(refused_ids, "event_id", "left_anti")
        received = raw_receipts.join(refused_ids, "event_id", "left_anti")
        timeline = spark.createDataFrame(timeline_rows, schemas.TIMELINE)
        pubs = m.publications(spans, round(window_s * 1e9) if window_s else None, end_ns).cache()
        if content.is_content(sub_rows):  # filters and events: who matches what, as a topic table
            subs = content.matching_subscriptions(spark, sub_rows, pubs).cache()
        else:
            subs = spark.createDataFrame(sub_rows, schemas.SUBSCRIPTIONS)
        expected = m.expected_receivers(pubs, subs, m.alive_intervals(timeline, end_ns), join_warmup_ns)
        dels = m.deliveries(expected, pubs, m.first_copies(received)).cache()
        events = m.per_event(dels, pubs).join(m.reach(received, pubs), "event_id").cache()

        dels.write.mode("overwrite").parquet(f"{uri}/metrics/deliveries.parquet")
        events.write.mode("overwrite").parquet(f"{uri}/metrics/events.parquet")
        advance(2, f"deliveries ({dels.count():,} expected) and events written; snapshots next")
        subscriptions = {r["node"]: r["topics"] for r in sub_rows}
        plugin = analysis_for(meta, subscriptions)
        if plugin.wants_events:
            plugin.add_events(_rows(events))
        plugin.add_timeline(timeline_rows)
        last: overlay.Snapshot | None = None
        for k, last in enumerate(overlay.snapshots(rd), 1):
            plugin.add_snapshot(last)
            advance(2 + k, f"snapshot {k} of {snapshots} ({last.table.num_rows:,} rows)")
        final = last.rows if last is not None else []
        stats = read_stats(rd)
        plugin.add_stats(stats)
        raw_publishes = raw_spans.where(F.col("name") == "publish").count()
        summary, cdf = summarize(meta, raw_receipts, raw_publishes, received, dels, events, final, stats, subscriptions, subs)
        summary["refused_events"] = refused_summary(refused)
        summary["window_clipped_events"] = pubs.where(F.col("clipped")).count()
        summary["spans"]["lost_at_least"] = m.missing_parents(raw_spans)
        summary["spans"]["without_parent"] = m.without_parent(raw_receipts)
        summary["partial"] = partial(meta, timeline_rows)
        if (rd / "fidelity.json").exists():
            summary["fidelity"] = json.loads((rd / "fidelity.json").read_text())
        summary["fidelity"].update(fidelity.verdict(meta, timeline_rows, summary["fidelity"] or None))
        summary["churn"] = churn_counts(timeline_rows)
        summary["protocol_metrics"] = plugin.metrics(final)
        summary["skipped_publications"] = meta.get("skipped_publications", 0)
        advance(3 + snapshots, "summary computed; time series and report next")
        series = m.timeseries(dels, pubs, meta["measure_start_ns"]).cache()
        series.write.mode("overwrite").parquet(f"{uri}/metrics/timeseries.parquet")
        series_rows = _rows(series)
        summary["load"] = load_summary(rd, meta, settings_publications(rd), series_rows)
        hop_rows = _rows(m.hop_histogram(dels))
        summary["hop_histogram"] = {str(r["hops"]): r["count"] for r in hop_rows}
        summary["plots"] = report.write(rd, summary, cdf, hop_rows, events, series_rows,
                                        fidelity.host_series(timeline_rows, meta["started_ns"]),
                                        fidelity.probe_rounds(timeline_rows, meta["started_ns"], meta["ended_ns"]))
        summary["plots"].update(plugin.plots(rd / "plots", summary["protocol_metrics"]))
        (rd / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
        report.write_html(rd, summary, plugin.title, plugin.report_rows(summary["protocol_metrics"]))
        advance(4 + snapshots, "done")
        return summary


def settings_publications(rd: Path) -> dict:
    return (yaml.safe_load((rd / "experiment.yaml").read_text()) or {}).get("publications", {})


def load_summary(rd: Path, meta: dict, pubs: dict, series: list[dict]) -> dict:
    """Offered against delivered: the target rate, what Locust offered (if it ran), the rate at
    which events were published (publish spans) and delivered, over the buckets with traffic."""
    active = [r for r in series if r["published"] > 0]
    out = {
        "driver": pubs.get("driver", "schedule"),
        "target_rate_per_s": pubs.get("rate_per_s"),
        "published_per_s": sum(r["published"] for r in active) / len(active) if active else None,
        "deliveries_per_s": sum(r["deliveries"] for r in series) / len(active) if active else None,
        "timeseries": series,
        "measure_start_unix_s": meta["measure_start_ns"] / 1e9,
    }
    locust = read_locust(rd)
    if locust is not None:
        out["locust"] = locust
        out["offered_per_s"] = locust["requests_per_s"]
        target = pubs.get("rate_per_s")
        out["offered_share_of_target"] = locust["requests_per_s"] / target if target else None
    return out


def churn_counts(timeline: list[dict]) -> dict:
    """Joins, leaves and planned crashes during the run (the initial joins and end-of-run leaves
    aside), the crashes nobody planned, and the faults."""
    kinds = {"join": 0, "leave": 0, "crash": 0, "unplanned": 0, "fault_on": 0}
    for e in timeline:
        if e["kind"] in kinds and not e.get("initial") and not e.get("end_of_run"):
            kinds["unplanned" if e.get("unplanned") else e["kind"]] += 1
    return {"joins": kinds["join"], "leaves": kinds["leave"], "crashes": kinds["crash"],
            "unplanned_crashes": kinds["unplanned"], "faults": kinds["fault_on"]}


def _rows(df: DataFrame) -> list[dict]:
    return [r.asDict() for r in df.collect()]


def gossip_duration_s(meta: dict) -> float:
    """How long the overlay gossiped: counters run until they are read (local: after the fidelity
    probes), not until ended_ns; the simulator's frozen dissemination rounds hold every timer, so
    they are no gossip time."""
    return (meta.get("counters_ns", meta["ended_ns"]) - meta["started_ns"] - meta.get("frozen_ns", 0)) / 1e9


STREAM_LOSSES = ("stream_queue_full", "stream_deadline", "stream_broken")
"""Why streamed links failed to send (each also counted in ``send_failed``)."""


def partial(meta: dict, timeline: list[dict]) -> dict | None:
    """None for a run that completed with every peer up to the end and nothing from outside; else
    how it fell short: the run's status, when it ended against its plan (seconds after the
    start), each unplanned crash (node, time, why), each node that did not answer the
    controller while its host ran (``unresponsive``: busy, not dead), and the Control calls each
    node took from outside the run (``unplanned_control``). Metrics cover what was recorded; crashed nodes stop
    being expected receivers when they crash, like any crash."""
    status = meta.get("status", "complete")
    crashes = [{"node": e["node"], "at_s": (e["t_ns"] - meta["started_ns"]) / 1e9, "why": e.get("why")}
               for e in timeline if e["kind"] == "crash" and e.get("unplanned")]
    outside = [{"node": e["node"], "calls": e["calls"]} for e in timeline if e["kind"] == "unplanned_control"]
    missed: dict[int, dict] = {}  # node -> its first missed call, and how many it missed
    for e in timeline:
        if e["kind"] == "unresponsive":
            first = missed.setdefault(e["node"], {"node": e["node"], "at_s": (e["t_ns"] - meta["started_ns"]) / 1e9,
                                                  "why": e.get("why"), "missed": 0})
            first["missed"] += 1
    unresponsive = list(missed.values())
    if status == "complete" and not crashes and not outside and not unresponsive:
        return None
    planned = meta.get("planned_end_ns")
    return {
        "status": status, "error": meta.get("error"),
        "ended_at_s": (meta["ended_ns"] - meta["started_ns"]) / 1e9,
        "planned_end_s": (planned - meta["started_ns"]) / 1e9 if planned else None,
        "unplanned_crashes": crashes,
        "unplanned_control": outside,
        "unresponsive": unresponsive,
        "nodes_affected": "all" if status != "complete" else sorted({c["node"] for c in crashes + outside + unresponsive}),
    }


def refused_summary(refused: DataFrame, examples: int = 10) -> dict:
    """How many events were refused, by reason, with a few of their ids."""
    rows = refused.collect()
    out: dict = {"count": len({r["event_id"] for r in rows}), "published_twice": 0, "received_before_publish": 0}
    for r in rows:
        out[r["reason"]] += 1
    out["examples"] = sorted({r["event_id"] for r in rows})[:examples]
    return out


CDF = [i / 100 for i in range(101)]
"""The latency CDF's points (the report's plot)."""


def summarize(meta: dict, raw_receipts: DataFrame, raw_publishes: int, received: DataFrame, dels: DataFrame,
              events: DataFrame, snapshots: list[dict], stats: list[dict], subscriptions: dict,
              subs: DataFrame) -> tuple[dict, list[float]]:
    """The common metrics, and the latency CDF for the report: one pass over the deliveries gives
    the latency quantiles, the CDF and the hop quantiles."""
    tot = dels.agg(F.count("*").alias("x"), F.sum(F.col("delivered").cast("long")).alias("d")).first()
    ev = events.agg(
        F.count("*").alias("events"),
        F.count("hit_ratio").alias("with_receivers"),
        F.mean("hit_ratio").alias("mean"),
        F.sum((F.col("hit_ratio") == 1.0).cast("long")).alias("complete"),
    ).first()
    both = dels.where("delivered").agg(
        F.percentile("latency_ms", QUANTILES + CDF).alias("lat"), F.max("latency_ms").alias("lat_max"),
        F.percentile("hops", QUANTILES).alias("hops"), F.max("hops").alias("hops_max"), F.mean("hops").alias("hops_mean"),
    ).first()
    lat = {"q": both["lat"][:len(QUANTILES)] if both["lat"] else None, "max": both["lat_max"]}
    hops = {"q": both["hops"], "max": both["hops_max"], "mean": both["hops_mean"]}
    cp = m.copies(received, subs).first()
    by_name = {"publish": raw_publishes, "receive": raw_receipts.agg(F.sum("copies")).first()[0] or 0}
    totals = overlay.counter_totals(stats, ["spans_dropped", "malformed", "unauthorized", "send_failed",
                                            "dropped_by_link", "lost_to_dead_peer", *STREAM_LOSSES])

    def q(row, i):
        return float(row["q"][i]) if row and row["q"] else None

    return {
        "run_id": meta["run_id"], "backend": meta["backend"], "protocol": meta["protocol"],
        "seed": meta["seed"], "nodes": meta["nodes"],
        "topics": len({t for ts in subscriptions.values() for t in ts}),
        "events": ev["events"],
        "expected_receivers": tot["x"], "deliveries": tot["d"] or 0,
        "hit_ratio": (tot["d"] / tot["x"]) if tot["x"] else None,
        "hit_ratio_mean_per_event": ev["mean"],
        "complete_event_ratio": (ev["complete"] / ev["with_receivers"]) if ev["with_receivers"] else None,
        "latency_ms": {"p50": q(lat, 0), "p90": q(lat, 1), "p99": q(lat, 2),
                       "max": float(lat["max"]) if lat and lat["max"] is not None else None},
        "hops": {"mean": float(hops["mean"]) if hops and hops["mean"] is not None else None,
                 "p50": q(hops, 0), "p99": q(hops, 2),
                 "max": int(hops["max"]) if hops and hops["max"] is not None else None},
        "duplication_factor": (cp["copies"] / cp["receipts"]) if cp["receipts"] else None,
        "relay_ratio": (cp["relay_copies"] / cp["copies"]) if cp["copies"] else None,
        "degree": overlay.degrees(snapshots),
        "topic_connectivity": overlay.topic_connectivity(snapshots, subscriptions),
        "overhead": overlay.overhead(stats, gossip_duration_s(meta), meta["cycle_s"]),
        "spans": {"publish": by_name.get("publish", 0), "receive": by_name.get("receive", 0),
                  "dropped": totals.pop("spans_dropped")},
        "errors": totals,
        "protocol_metrics": {},
        "fidelity": {},
    }, list(both["lat"][len(QUANTILES):]) if both["lat"] else []


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: summarize.py RUN_DIR")
    print(json.dumps(run(args[0]), indent=2))


if __name__ == "__main__":
    main()
