"""Declared schemas of everything the analysis reads; nothing is inferred."""

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

# The one flat span table every backend's traces are normalised into (ARCHITECTURE.md, "Traces").
SPANS = StructType([
    StructField("trace_id", StringType()),
    StructField("span_id", StringType()),
    StructField("parent_span_id", StringType()),
    StructField("name", StringType(), False),          # publish | receive
    StructField("time_ns", LongType(), False),
    StructField("node", LongType(), False),
    StructField("from_node", LongType()),
    StructField("event_id", StringType(), False),
    StructField("topic", StringType(), False),
    StructField("hops", IntegerType(), False),
    StructField("first_copy", BooleanType(), False),
    StructField("subscriber", BooleanType(), False),
])

_ANY_VALUE = StructType([
    StructField("stringValue", StringType()),
    StructField("intValue", StringType()),   # int64 is a JSON string in OTLP/JSON
    StructField("boolValue", BooleanType()),
    StructField("doubleValue", DoubleType()),
])
_ATTRIBUTES = ArrayType(StructType([StructField("key", StringType()), StructField("value", _ANY_VALUE)]))

# One line of the OTLP JSON file exporter (an ExportTraceServiceRequest), as far as we read it.
OTLP_TRACES = StructType([
    StructField("resourceSpans", ArrayType(StructType([
        StructField("resource", StructType([StructField("attributes", _ATTRIBUTES)])),
        StructField("scopeSpans", ArrayType(StructType([
            StructField("spans", ArrayType(StructType([
                StructField("traceId", StringType()),
                StructField("spanId", StringType()),
                StructField("parentSpanId", StringType()),
                StructField("name", StringType()),
                StructField("startTimeUnixNano", StringType()),
                StructField("attributes", _ATTRIBUTES),
            ]))),
        ]))),
    ]))),
])

SUBSCRIPTIONS = StructType([
    StructField("node", LongType(), False),
    StructField("topics", ArrayType(StringType()), False),
])

TIMELINE = StructType([
    StructField("t_ns", LongType(), False),
    StructField("kind", StringType(), False),
    StructField("node", LongType()),
])


# A run's snapshots (``snapshots/*.parquet``, docs/metrics.md), one row per (node, layer), as the
# driver reads them (Arrow, not Spark: one snapshot at a time).
SNAPSHOTS = pa.schema([
    ("t_ns", pa.int64()), ("gossip_ns", pa.int64()), ("node", pa.int32()), ("layer", pa.string()),
    ("neighbours", pa.list_(pa.int32())), ("per_topic", pa.map_(pa.string(), pa.list_(pa.int32()))),
    ("topics", pa.list_(pa.string())),
])
