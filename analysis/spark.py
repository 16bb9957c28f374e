"""The one SparkSession builder. Master: the argument, else $OVERLAYLAB_SPARK_MASTER, else local[*];
``conf``: any further Spark settings (a cluster's, s3a's: docs/spark.md).

Shuffle partitions: ``$OVERLAYLAB_SPARK_PARTITIONS`` or ``spark.sql.shuffle.partitions`` in
``conf`` if given, else sized to each run's traces (``size_partitions``): one per
``PARTITION_BYTES``, 1 to ``MAX_PARTITIONS`` (a run of a few thousand spans spent 12 s of its 60 s
of analysis here on 8 partitions). A run that fits one partition is also analysed without
adaptive query execution and whole-stage code generation (``SMALL_INPUT``): with nothing to
coalesce or skew, they cost planning and compilation on each of its ~50 jobs (bench/spark_small.py).
"""

from __future__ import annotations

import math
import os

from pyspark.sql import SparkSession

PARTITIONS = "spark.sql.shuffle.partitions"
AUTO_PARTITIONS = "overlaylab.partitions.auto"
PARTITION_BYTES = 64 << 20
MAX_PARTITIONS = 8
SMALL_INPUT = {"spark.sql.adaptive.enabled": "false", "spark.sql.codegen.wholeStage": "false"}
"""Settings for a run of one partition; Spark's defaults (both on) for larger runs."""


def get_spark(app: str = "overlaylab", master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = dict(conf or {})
    fixed = os.environ.get("OVERLAYLAB_SPARK_PARTITIONS") or conf.pop(PARTITIONS, None)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = (
        builder.appName(app)
        .master(master or os.environ.get("OVERLAYLAB_SPARK_MASTER", "local[*]"))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(PARTITIONS, fixed or str(MAX_PARTITIONS))
        .config(AUTO_PARTITIONS, "false" if fixed else "true")
        .config("spark.sql.session.timeZone", "UTC")
        # Spans are partitioned by event once (summarize): a join on (event, node) of two tables
        # partitioned by event needs no shuffle.
        .config("spark.sql.requireAllClusterKeysForCoPartition", "false")
        .config("spark.driver.memory", os.environ.get("OVERLAYLAB_SPARK_DRIVER_MEMORY", "2g"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def size_partitions(spark: SparkSession, input_bytes: int) -> None:
    """Shuffle partitions for an input of ``input_bytes``, unless the session was given a number."""
    if spark.conf.get(AUTO_PARTITIONS, "false") == "true":
        n = min(MAX_PARTITIONS, max(1, math.ceil(input_bytes / PARTITION_BYTES)))
        spark.conf.set(PARTITIONS, str(n))
        for key, small in SMALL_INPUT.items():
            spark.conf.set(key, small if n == 1 else "true")
