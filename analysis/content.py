"""Content-based runs (``workload.model: content``): which events each node's filters match.

A content run's subscriptions are filters and its events attribute maps, both as topic strings
(node/protocols/dps/content.py: ``?price>=10&symbol*='a'``, ``?price=42&symbol='acgtacg'``), so the topic
join that finds an event's expected receivers does not apply. ``matching_subscriptions`` turns
them into the table that join expects: per node, the event strings its filters match. The
match is a Spark join of predicate rows with attribute rows on (attribute, type), each predicate
tested by its kind (an interval with open or closed ends, or a string test), and a filter
matches an event when all its predicates do (spec dps.md §2.3).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

from .filters import attributes, predicates, value_type

PREDICATES = StructType([
    StructField("node", LongType(), False), StructField("sub", StringType(), False),
    StructField("npreds", LongType(), False), StructField("name", StringType(), False),
    StructField("type", StringType(), False), StructField("kind", StringType(), False),
    StructField("lo", DoubleType(), True), StructField("hi", DoubleType(), True),
    StructField("lo_open", BooleanType(), True), StructField("hi_open", BooleanType(), True),
    StructField("s", StringType(), True),
])
VALUES = StructType([
    StructField("topic", StringType(), False), StructField("name", StringType(), False),
    StructField("type", StringType(), False), StructField("num", DoubleType(), True),
    StructField("str", StringType(), True),
])


def is_content(sub_rows: list[dict]) -> bool:
    return any(t.startswith("?") for r in sub_rows for t in r["topics"])


def predicate_rows(sub_rows: list[dict]) -> list[tuple]:
    out = []
    for r in sub_rows:
        for text in r["topics"]:
            preds = predicates(text)
            out += [(r["node"], text, len(preds), *p) for p in preds]
    return out


def value_rows(topics: list[str]) -> list[tuple]:
    out = []
    for text in topics:
        for name, v in attributes(text).items():
            kind = value_type(v)
            out.append((text, name, kind, None if kind == "string" else float(v), v if kind == "string" else None))
    return out


def matching_subscriptions(spark: SparkSession, sub_rows: list[dict], pubs: DataFrame) -> DataFrame:
    """(node, topics): per node, the event strings (of ``pubs``) one of its filters matches."""
    topics = sorted({r["topic"] for r in pubs.select("topic").distinct().collect()})
    preds = spark.createDataFrame(predicate_rows(sub_rows), PREDICATES)
    values = spark.createDataFrame(value_rows(topics), VALUES)
    num, s = F.col("num"), F.col("s")
    above = (num > F.col("lo")) | ((num == F.col("lo")) & ~F.col("lo_open"))
    below = (num < F.col("hi")) | ((num == F.col("hi")) & ~F.col("hi_open"))
    ok = (F.when(F.col("kind") == "top", F.lit(True))
          .when(F.col("kind") == "interval", above & below)
          .when(F.col("kind") == "eq", F.col("str") == s)
          .when(F.col("kind") == "prefix", F.col("str").startswith(s))
          .when(F.col("kind") == "suffix", F.col("str").endswith(s))
          .otherwise(F.col("str").contains(s)))
    matched = (preds.join(values, ["name", "type"]).where(ok)
               .groupBy("topic", "node", "sub", "npreds").count()
               .where(F.col("count") == F.col("npreds")))
    got = matched.groupBy("node").agg(F.collect_set("topic").alias("topics"))
    nodes = spark.createDataFrame([(r["node"],) for r in sub_rows], "node long")
    return nodes.join(got, "node", "left").select("node", F.coalesce("topics", F.array().cast("array<string>")).alias("topics"))


