"""Run directories on a local disk or in any store Hadoop reads (``s3a://bucket/runs/RUN``, ``hdfs://``).

Spark reads the traces and writes ``metrics/*.parquet`` where the run is; the small files the
driver reads itself (run.json, the plan, snapshots, counters) are copied to a local staging
directory, and what the driver writes there (summary.json, report.html, plots/) is copied back
when the analysis ends. A local run directory is used in place.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

S3A_CONF = {
    # hadoop-aws for the Hadoop pyspark ships (3.5.0), with the AWS SDK modules it uses instead of
    # the SDK's 650 MB bundle; fetched from Maven Central on first use (~40 MB).
    "spark.jars.packages": ",".join([
        "org.apache.hadoop:hadoop-aws:3.5.0", "software.amazon.awssdk:s3:2.35.4",
        "software.amazon.awssdk:sts:2.35.4", "software.amazon.awssdk:s3-transfer-manager:2.35.4"]),
    "spark.jars.excludes": "software.amazon.awssdk:bundle",
}
"""Spark settings that let a stock pyspark read ``s3a://`` (added for such a run directory)."""

DRIVER_INPUTS = ("run.json", "experiment.yaml", "subscriptions.jsonl", "timeline.jsonl", "snapshots", "stats.parquet",
                 "snapshots.jsonl", "stats.jsonl", "fidelity.json", "locust")
DRIVER_OUTPUTS = ("summary.json", "report.html", "plots")


@dataclass(frozen=True)
class StagedRun:
    local: Path
    """The run's small files, and where the driver writes its outputs."""
    uri: str
    """Where Spark reads ``traces/`` and writes ``metrics/``."""
    traces: list[str]
    """The file names under ``traces/``."""
    trace_bytes: int
    """Their size."""


def is_remote(run_dir: str) -> bool:
    return "://" in run_dir and not run_dir.startswith("file://")


@contextmanager
def staged(run_dir: str, spark: SparkSession) -> Iterator[StagedRun]:
    if not is_remote(run_dir):
        local = Path(run_dir.removeprefix("file://"))
        traces = local / "traces"
        names = sorted(p.name for p in traces.iterdir()) if traces.is_dir() else []
        size = sum(f.stat().st_size for f in traces.rglob("*") if f.is_file()) if names else 0
        yield StagedRun(local, str(local), names, size)
        return
    HPath = spark.sparkContext._jvm.org.apache.hadoop.fs.Path
    root = HPath(run_dir.rstrip("/"))
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def at(*parts: str):  # a path under the run
        return HPath(root, "/".join(parts))

    if not fs.exists(at("run.json")):
        raise FileNotFoundError(f"{run_dir}: no run.json (not a run directory)")
    traces = [s.getPath().getName() for s in fs.listStatus(at("traces"))] if fs.exists(at("traces")) else []
    size = fs.getContentSummary(at("traces")).getLength() if traces else 0
    local = Path(tempfile.mkdtemp(prefix="overlaylab-run-"))
    try:
        for name in DRIVER_INPUTS:
            if fs.exists(at(name)):
                fs.copyToLocalFile(False, at(name), HPath(str(local / name)), True)
        yield StagedRun(local, run_dir.rstrip("/"), sorted(traces), size)
        for name in DRIVER_OUTPUTS:
            files = [local / name] if (local / name).is_file() else sorted((local / name).rglob("*"))
            for f in (f for f in files if f.is_file()):
                # a stream per file, as Spark writes (copyFromLocalFile's transfer manager fails
                # on some S3-compatible stores)
                out = fs.create(at(*f.relative_to(local).parts), True)
                out.write(bytearray(f.read_bytes()))
                out.close()
    finally:
        shutil.rmtree(local, ignore_errors=True)
