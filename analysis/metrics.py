"""Pure DataFrame -> DataFrame transforms, one per metric of METRICS.md.

Inputs are the normalised span table (``schemas.SPANS``), subscriptions and the timeline. Times
are nanoseconds on the run's clock (wall clock for local peers, virtual for sim).

The received copies are read once, into ``receipts`` (one row per event and receiver); first
copies, reach, copies and relays, refused events and copies without a parent all come from it.
Every aggregation is by event (or event and node), and every join of span-sized tables is on the
event, so spans partitioned by event once (``summarize``) need no further shuffle.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def normalize_otlp(raw: DataFrame) -> DataFrame:
    """OTLP JSON lines (``schemas.OTLP_TRACES``) -> the flat span table (``schemas.SPANS``), one
    row per span: a batch a peer sent again after a lost answer reaches the Collector twice."""
    spans = (
        raw.select(F.explode("resourceSpans").alias("rs"))
        .select(F.explode("rs.scopeSpans").alias("ss"))
        .select(F.explode("ss.spans").alias("s"))
    )
    value = lambda a: F.coalesce(
        a["value"]["stringValue"], a["value"]["intValue"],
        a["value"]["boolValue"].cast("string"), a["value"]["doubleValue"].cast("string"),
    )
    attrs = F.map_from_entries(F.transform("s.attributes", lambda a: F.struct(a["key"], value(a))))
    with_attrs = spans.select("s.traceId", "s.spanId", "s.parentSpanId", "s.name", "s.startTimeUnixNano",
                              attrs.alias("a"))
    a = F.col("a")
    return with_attrs.where(F.col("name").isin("publish", "receive")).select(
        F.col("traceId").alias("trace_id"),
        F.col("spanId").alias("span_id"),
        F.when(F.col("parentSpanId") != "", F.col("parentSpanId")).alias("parent_span_id"),
        F.col("name"),
        F.col("startTimeUnixNano").cast("long").alias("time_ns"),
        a["pubsub.node"].cast("long").alias("node"),
        a["pubsub.from"].cast("long").alias("from_node"),
        a["pubsub.event_id"].alias("event_id"),
        a["pubsub.topic"].alias("topic"),
        a["pubsub.hops"].cast("int").alias("hops"),
        (a["pubsub.first_copy"] == "true").alias("first_copy"),
        (a["pubsub.subscriber"] == "true").alias("subscriber"),
    ).dropDuplicates(["trace_id", "span_id"])


def alive_intervals(timeline: DataFrame, end_ns: int) -> DataFrame:
    """(node, join_ns, leave_ns): each join paired with the node's next leave or crash."""
    joins = timeline.where(F.col("kind") == "join").select("node", F.col("t_ns").alias("join_ns"))
    exits = timeline.where(F.col("kind").isin("leave", "crash")).select("node", F.col("t_ns").alias("exit_ns"))
    return (
        joins.join(exits, (joins.node == exits.node) & (exits.exit_ns >= joins.join_ns), "left")
        .groupBy(joins.node, "join_ns")
        .agg(F.min("exit_ns").alias("leave_ns"))
        .select("node", "join_ns", F.coalesce("leave_ns", F.lit(end_ns)).alias("leave_ns"))
    )


SPAN_COLUMNS = ("span_id", "parent_span_id", "name", "time_ns", "node", "event_id", "topic", "hops", "first_copy")
"""The span table's columns the metrics read."""


def first_copy_order() -> Column:
    """The order of a node's copies of an event whose least is its first copy: flagged first,
    then earliest, then fewest hops."""
    return F.struct((~F.col("first_copy")).alias("unflagged"), "time_ns", "hops")


def receipts(spans: DataFrame) -> DataFrame:
    """(event_id, node, topic, first, copies, max_hops, earliest_ns, without_parent) per event and
    receiving node: ``first`` (time_ns, hops) of the first copy, the copy the node itself flagged
    ``first_copy`` (copies often tie on time: links of 0 ms, one virtual instant), the earliest if
    it flagged several (a fresh rejoin forgets what it saw), then the fewest hops, else its
    earliest copy; how many copies, their most hops, the earliest, and how many name no parent."""
    return (
        spans.where(F.col("name") == "receive")
        .groupBy("event_id", "node")
        .agg(F.first("topic").alias("topic"), F.min_by(F.struct("time_ns", "hops"), first_copy_order()).alias("first"),
             F.count("*").alias("copies"), F.max("hops").alias("max_hops"), F.min("time_ns").alias("earliest_ns"),
             F.sum(F.col("parent_span_id").isNull().cast("long")).alias("without_parent"))
    )


def refused_events(spans: DataFrame, received: DataFrame) -> DataFrame:
    """(event_id, reason) of the events the analysis refuses to score: an id published more than
    once (two events share it: ``published_twice``), or with a copy received before it was
    published (a copy of some other event, or clocks apart: ``received_before_publish``). An
    event may have both reasons. ``received``: the spans' ``receipts``."""
    pubs = (spans.where(F.col("name") == "publish").groupBy("event_id")
            .agg(F.count("*").alias("n"), F.min("time_ns").alias("t0_ns")))
    twice = pubs.where(F.col("n") > 1).select("event_id", F.lit("published_twice").alias("reason"))
    early = (received.groupBy("event_id").agg(F.min("earliest_ns").alias("earliest_ns")).join(pubs, "event_id")
             .where(F.col("earliest_ns") < F.col("t0_ns"))
             .select("event_id", F.lit("received_before_publish").alias("reason")))
    return twice.unionByName(early)


def missing_parents(spans: DataFrame) -> int:
    """Distinct parent spans that copies point to but no trace holds: spans lost (a peer killed
    before its exporter flushed). A lower bound: a lost span no copy points to goes unseen. A
    copy's parent is a span of the same event (its sender's), so parents are looked up within
    the event."""
    parents = (spans.where(F.col("parent_span_id").isNotNull())
               .select("event_id", F.col("parent_span_id").alias("span_id")).distinct())
    return parents.join(spans.select("event_id", "span_id"), ["event_id", "span_id"], "left_anti").count()


def publications(spans: DataFrame, window_ns: int | None, end_ns: int) -> DataFrame:
    """(event_id, topic, publisher, t0_ns, window_end_ns, clipped) of every publish span. The
    window ends ``window_ns`` after the publication or at the end of the run, whichever comes
    first (``clipped``: the run's end cut it short; the event is scored on the part before)."""
    full: Column = F.col("time_ns") + F.lit(window_ns) if window_ns is not None else F.lit(end_ns)
    return spans.where(F.col("name") == "publish").select(
        "event_id", "topic", F.col("node").alias("publisher"), F.col("time_ns").alias("t0_ns"),
        F.least(full, F.lit(end_ns)).alias("window_end_ns"), (full > F.lit(end_ns)).alias("clipped"),
    )


def expected_receivers(pubs: DataFrame, subscriptions: DataFrame, intervals: DataFrame,
                       join_warmup_ns: int = 0) -> DataFrame:
    """X(e): subscribers of the topic alive (and warmed up) for the whole window, minus the publisher.
    The subscriptions and the alive intervals are small (a row per node and topic, per join):
    each is sent whole to every task, so the publications keep their partitioning by event."""
    subs = subscriptions.select("node", F.explode("topics").alias("topic"))
    return (
        pubs.join(F.broadcast(subs), "topic")
        .where(F.col("node") != F.col("publisher"))
        .join(F.broadcast(intervals), "node")
        .where((F.col("join_ns") + F.lit(join_warmup_ns) <= F.col("t0_ns"))
               & (F.col("leave_ns") >= F.col("window_end_ns")))
        .select("event_id", "node")
        .distinct()
    )


def first_copies(received: DataFrame) -> DataFrame:
    """(event_id, node, time_ns, hops) of the first copy each node received of each event
    (``receipts``)."""
    return received.select("event_id", "node", "first.time_ns", "first.hops")


def deliveries(expected: DataFrame, pubs: DataFrame, firsts: DataFrame) -> DataFrame:
    """(event_id, node, delivered, latency_ms, hops) for every expected receiver."""
    d = (
        expected.join(pubs.select("event_id", "t0_ns", "window_end_ns"), "event_id")
        .join(firsts, ["event_id", "node"], "left")
    )
    delivered = F.col("time_ns").isNotNull() & (F.col("time_ns") <= F.col("window_end_ns"))
    return d.select(
        "event_id", "node", delivered.alias("delivered"),
        F.when(delivered, (F.col("time_ns") - F.col("t0_ns")) / 1e6).alias("latency_ms"),
        F.when(delivered, F.col("hops")).alias("hops"),
    )


def per_event(dels: DataFrame, pubs: DataFrame) -> DataFrame:
    """Per event: expected, delivered, hit ratio and the time to reach 50/90/99/100% of X(e).
    Events with no expected receiver have a null hit ratio."""
    agg = dels.groupBy("event_id").agg(
        F.count("*").alias("expected"),
        F.sum(F.col("delivered").cast("long")).alias("delivered"),
        F.sort_array(F.collect_list("latency_ms")).alias("lat"),
    )
    out = pubs.select("event_id", "topic", "publisher", "t0_ns").join(agg, "event_id", "left").fillna(0, ["expected", "delivered"])
    cols = [F.when(F.col("expected") > 0, F.col("delivered") / F.col("expected")).alias("hit_ratio")]
    for q in (50, 90, 99, 100):
        k = F.ceil(F.col("expected") * q / 100).cast("int")
        cols.append(F.when((F.col("expected") > 0) & (F.size("lat") >= k), F.element_at("lat", k)).alias(f"t{q}_ms"))
    return out.select("event_id", "topic", "publisher", "t0_ns", "expected", "delivered", *cols)


def reach(received: DataFrame, pubs: DataFrame) -> DataFrame:
    """Per event: ``receivers`` (distinct nodes that got a copy, the publisher included: relays
    and subscribers alike, ferretti-gossip.md §9.1), ``copies`` (every copy received: the event's
    messages) and ``max_hops`` (of any copy; 0 when none). ``received``: ``receipts``."""
    got = (received.join(pubs.select("event_id", "publisher"), "event_id")
           .groupBy("event_id")
           .agg(F.sum((F.col("node") != F.col("publisher")).cast("long")).alias("others"),
                F.sum("copies").alias("copies"), F.max("max_hops").alias("max_hops")))
    return pubs.select("event_id").join(got, "event_id", "left").select(
        "event_id", (F.coalesce("others", F.lit(0)) + 1).alias("receivers"),
        F.coalesce("copies", F.lit(0)).alias("copies"), F.coalesce("max_hops", F.lit(0)).alias("max_hops"))


def copies(received: DataFrame, subscriptions: DataFrame) -> DataFrame:
    """One row: total copies received, distinct (event, node) receipts, and copies at nodes not
    subscribed to the event's topic (per the subscriptions file, not the copy's own flag).
    ``received``: ``receipts``."""
    subscribed = (subscriptions.select("node", F.explode("topics").alias("topic")).distinct()
                  .withColumn("subscribed", F.lit(True)))
    r = received.join(F.broadcast(subscribed), ["node", "topic"], "left")
    return r.agg(
        F.coalesce(F.sum("copies"), F.lit(0)).alias("copies"),
        F.count("*").alias("receipts"),
        F.coalesce(F.sum(F.when(F.col("subscribed").isNull(), F.col("copies"))), F.lit(0)).alias("relay_copies"),
    )


def without_parent(received: DataFrame) -> int:
    """Received copies whose span names no parent: a send the trace lost track of (every copy
    is sent under the sender's span of the event). ``received``: ``receipts``."""
    return received.agg(F.sum("without_parent")).first()[0] or 0


def hop_histogram(dels: DataFrame) -> DataFrame:
    return dels.where("delivered").groupBy("hops").count().orderBy("hops")


def quantiles(dels: DataFrame, column: str, qs: list[float]) -> DataFrame:
    """One row, one array column ``q``: exact quantiles of ``column`` over delivered copies."""
    return dels.where("delivered").agg(F.percentile(column, qs).alias("q"), F.max(column).alias("max"),
                                       F.mean(column).alias("mean"))


def timeseries(dels: DataFrame, pubs: DataFrame, start_ns: int, bucket_s: float = 1.0) -> DataFrame:
    """Per time bucket (seconds since ``start_ns``): events published, expected receivers,
    deliveries to them and hit ratio of the events published in that bucket, their latency p50
    and p99, and deliveries made in the bucket (by arrival time)."""
    width = F.lit(int(bucket_s * 1e9))
    bucket = lambda col: F.floor((col - F.lit(start_ns)) / width).cast("long")
    published = pubs.groupBy(bucket(F.col("t0_ns")).alias("bucket")).agg(F.count("*").alias("published"))
    d = dels.join(pubs.select("event_id", "t0_ns"), "event_id")
    by_pub = d.groupBy(bucket(F.col("t0_ns")).alias("bucket")).agg(
        F.count("*").alias("expected"),
        F.sum(F.col("delivered").cast("long")).alias("delivered"),
        F.percentile(F.col("latency_ms"), [0.5, 0.99]).alias("lat"),
    )
    arrivals = (
        d.where("delivered")
        .groupBy(bucket(F.col("t0_ns") + (F.col("latency_ms") * 1e6).cast("long")).alias("bucket"))
        .agg(F.count("*").alias("deliveries"))
    )
    return (
        published.join(by_pub, "bucket", "full").join(arrivals, "bucket", "full")
        .fillna(0, ["published", "expected", "delivered", "deliveries"])
        .select(
            (F.col("bucket") * bucket_s).alias("t_s"), "published", "expected", "delivered", "deliveries",
            F.when(F.col("expected") > 0, F.col("delivered") / F.col("expected")).alias("hit_ratio"),
            F.col("lat")[0].alias("latency_p50_ms"), F.col("lat")[1].alias("latency_p99_ms"),
        )
        .orderBy("t_s")
    )
