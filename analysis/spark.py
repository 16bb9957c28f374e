"""The one SparkSession builder. Master: the argument, else $OVERLAYLAB_SPARK_MASTER, else local[*];
``conf``: any further Spark settings (a cluster's, s3a's: docs/spark.md)."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession


def get_spark(app: str = "overlaylab", master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = (
        builder.appName(app)
        .master(master or os.environ.get("OVERLAYLAB_SPARK_MASTER", "local[*]"))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", os.environ.get("OVERLAYLAB_SPARK_PARTITIONS", "8"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("OVERLAYLAB_SPARK_DRIVER_MEMORY", "2g"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
