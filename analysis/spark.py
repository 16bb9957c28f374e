"""The one SparkSession builder. Master: $OVERLAYLAB_SPARK_MASTER, else local[*]."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession


def get_spark(app: str = "overlaylab", master: str | None = None) -> SparkSession:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.appName(app)
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
