"""The analysis transforms on tiny inline DataFrames with hand-computed answers (Spark local[1])."""

import json

import pytest
from chispa import assert_approx_df_equality, assert_df_equality

from analysis import metrics as m
from analysis import overlay, schemas

MS = 1_000_000
END = 5000 * MS


def span(name, node, event, topic, t_ms, hops=0, first=True, sub=True, src=None):
    return (None, None, None, name, t_ms * MS, node, src, event, topic, hops, first, sub)


SPANS = [
    span("publish", 0, "e1", "a", 100),
    span("receive", 3, "e1", "a", 200, 1, True, False, 0),    # relay: node 3 is not on topic a
    span("receive", 1, "e1", "a", 300, 2, True, True, 3),
    span("receive", 1, "e1", "a", 400, 2, False, True, 0),    # duplicate
    span("publish", 3, "e2", "b", 50),
    span("receive", 2, "e2", "b", 1200, 1, True, True, 3),    # after e2's window closes at 1050
    span("publish", 1, "e3", "a", 1000),
    span("receive", 0, "e3", "a", 1010, 1, True, True, 1),
    span("receive", 2, "e3", "a", 1030, 2, True, True, 0),
]
SUBS = [(0, ["a"]), (1, ["a"]), (2, ["a", "b"]), (3, ["b"])]
TIMELINE = [(0, "join", 0), (0, "join", 1), (0, "join", 2), (0, "join", 3),
            (150 * MS, "crash", 3), (2000 * MS, "leave", 2)]


@pytest.fixture
def frames(spark):
    spans = spark.createDataFrame(SPANS, schemas.SPANS)
    subs = spark.createDataFrame(SUBS, schemas.SUBSCRIPTIONS)
    timeline = spark.createDataFrame(TIMELINE, schemas.TIMELINE)
    pubs = m.publications(spans, window_ns=1000 * MS, end_ns=END)
    expected = m.expected_receivers(pubs, subs, m.alive_intervals(timeline, END))
    dels = m.deliveries(expected, pubs, m.first_copies(m.receipts(spans)))
    return spans, subs, timeline, pubs, expected, dels


def test_expected_receivers_exclude_publisher_and_nodes_gone_before_the_window_ends(spark, frames):
    *_, expected, _ = frames
    # e1: a-subscribers {0,1,2} minus publisher 0; node 2 leaves at 2000 > 1100: stays.
    # e2: b-subscribers {2,3} minus publisher 3. e3: {0,1,2} minus 1; node 2 leaves at 2000 = end.
    want = spark.createDataFrame([("e1", 1), ("e1", 2), ("e2", 2), ("e3", 0), ("e3", 2)], "event_id string, node long")
    assert_df_equality(expected, want, ignore_row_order=True, ignore_nullable=True)


def test_join_warmup_excludes_fresh_nodes(spark, frames):
    spans, subs, timeline, pubs, *_ = frames
    expected = m.expected_receivers(pubs, subs, m.alive_intervals(timeline, END), join_warmup_ns=1050 * MS)
    assert expected.count() == 0


def test_deliveries_latency_and_hops(spark, frames):
    *_, dels = frames
    want = spark.createDataFrame(
        [("e1", 1, True, 200.0, 2), ("e1", 2, False, None, None), ("e2", 2, False, None, None),
         ("e3", 0, True, 10.0, 1), ("e3", 2, True, 30.0, 2)],
        "event_id string, node long, delivered boolean, latency_ms double, hops int",
    )
    assert_df_equality(dels, want, ignore_row_order=True, ignore_nullable=True)


def test_first_copy_is_the_flagged_one_when_copies_tie_on_time(spark):
    """With 0 ms links every copy of an event arrives at one virtual instant: the first copy is
    the one the node flagged, in whichever order the file lists the copies."""
    rows = [
        span("receive", 5, "e1", "a", 100, 4, False), span("receive", 5, "e1", "a", 100, 1, True),
        span("receive", 6, "e1", "a", 100, 2, True), span("receive", 6, "e1", "a", 100, 5, False),
        span("receive", 7, "e1", "a", 100, 3, False), span("receive", 7, "e1", "a", 100, 2, False),  # none flagged
        span("receive", 8, "e1", "a", 90, 6, True), span("receive", 8, "e1", "a", 120, 1, True),  # a fresh rejoin
    ]
    got = m.first_copies(m.receipts(spark.createDataFrame(rows, schemas.SPANS)))
    want = spark.createDataFrame([("e1", 5, 100 * MS, 1), ("e1", 6, 100 * MS, 2), ("e1", 7, 100 * MS, 2), ("e1", 8, 90 * MS, 6)],
                                 "event_id string, node long, time_ns long, hops int")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


# Ties, churn, a late joiner and duplicates in one small run (links of 0 ms for e1, so its copies
# tie on time; window 1,000 ms). Node 3 crashes at 500 and rejoins at 700; node 4 joins at 300.
TIE_SPANS = [
    span("publish", 0, "e1", "a", 100),
    span("receive", 1, "e1", "a", 100, 1, True, True, 0),
    span("receive", 1, "e1", "a", 100, 3, False, True, 2),   # tied duplicate, listed last
    span("receive", 2, "e1", "a", 100, 4, True, True, 1),    # flagged, though a tied copy has fewer hops
    span("receive", 2, "e1", "a", 100, 2, False, True, 3),
    span("receive", 3, "e1", "a", 100, 2, True, True, 1),    # not expected: crashed inside the window
    span("receive", 4, "e1", "a", 100, 1, True, True, 0),    # not expected: joined after the publication
    span("publish", 1, "e2", "a", 2000),
    span("receive", 5, "e2", "a", 2005, 1, True, False, 1),  # relay: node 5 is on topic b
    span("receive", 0, "e2", "a", 2010, 1, True, True, 1),
    span("receive", 2, "e2", "a", 2010, 1, True, True, 1),
    span("receive", 2, "e2", "a", 2010, 2, False, True, 0),
    span("receive", 3, "e2", "a", 2020, 2, True, True, 0),
    span("receive", 4, "e2", "a", 3500, 3, True, True, 3),   # after the window: missed
]
TIE_SUBS = [(0, ["a"]), (1, ["a"]), (2, ["a"]), (3, ["a"]), (4, ["a"]), (5, ["b"])]
TIE_TIMELINE = [(0, "join", n) for n in (0, 1, 2, 3, 5)] + [
    (300 * MS, "join", 4), (500 * MS, "crash", 3), (700 * MS, "join", 3)]


@pytest.fixture
def ties(spark):
    spans = spark.createDataFrame(TIE_SPANS, schemas.SPANS)
    subs = spark.createDataFrame(TIE_SUBS, schemas.SUBSCRIPTIONS)
    intervals = m.alive_intervals(spark.createDataFrame(TIE_TIMELINE, schemas.TIMELINE), END)
    pubs = m.publications(spans, window_ns=1000 * MS, end_ns=END)
    dels = m.deliveries(m.expected_receivers(pubs, subs, intervals), pubs, m.first_copies(m.receipts(spans)))
    return spans, subs, intervals, pubs, dels


def test_deliveries_take_the_flagged_copy_and_skip_crashed_and_late_nodes(spark, ties):
    *_, dels = ties
    want = spark.createDataFrame(
        [("e1", 1, True, 0.0, 1), ("e1", 2, True, 0.0, 4),
         ("e2", 0, True, 10.0, 1), ("e2", 2, True, 10.0, 1), ("e2", 3, True, 20.0, 2), ("e2", 4, False, None, None)],
        "event_id string, node long, delivered boolean, latency_ms double, hops int")
    assert_df_equality(dels, want, ignore_row_order=True, ignore_nullable=True)


def test_join_warmup_leaves_out_a_rejoined_node_until_it_has_warmed_up(spark, ties):
    spans, subs, intervals, pubs, _ = ties
    got = m.expected_receivers(pubs, subs, intervals, join_warmup_ns=1500 * MS)
    # e1 at 100: nobody has warmed up. e2 at 2000: node 3, rejoined at 700 (+1500 > 2000), is
    # out; node 4, joined at 300, is in.
    want = spark.createDataFrame([("e2", 0), ("e2", 2), ("e2", 4)], "event_id string, node long")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_hop_and_latency_quantiles_over_first_copies(spark, ties):
    *_, dels = ties
    schema = "q array<double>, max double, mean double"
    # hops of delivered first copies: 1, 4, 1, 1, 2; latencies 0, 0, 10, 10, 20 (exact percentiles).
    assert_approx_df_equality(m.quantiles(dels, "hops", [0.5, 0.9, 0.99]).selectExpr(
        "q", "cast(max as double) max", "mean"), spark.createDataFrame([([1.0, 3.2, 3.92], 4.0, 1.8)], schema),
        1e-9, ignore_nullable=True)
    assert_approx_df_equality(m.quantiles(dels, "latency_ms", [0.5, 0.9, 0.99]),
                              spark.createDataFrame([([10.0, 16.0, 19.6], 20.0, 8.0)], schema), 1e-9,
                              ignore_nullable=True)
    assert_df_equality(m.hop_histogram(dels), spark.createDataFrame([(1, 3), (2, 1), (4, 1)], "hops int, count long"),
                       ignore_nullable=True)


def test_per_event_and_copies_with_duplicates_and_a_miss(spark, ties):
    spans, subs, _, pubs, dels = ties
    got = m.per_event(dels, pubs).select("event_id", "expected", "delivered", "hit_ratio", "t50_ms", "t90_ms", "t100_ms")
    want = spark.createDataFrame([("e1", 2, 2, 1.0, 0.0, 0.0, 0.0), ("e2", 4, 3, 0.75, 10.0, None, None)],
                                 "event_id string, expected long, delivered long, hit_ratio double, "
                                 "t50_ms double, t90_ms double, t100_ms double")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    # 12 copies, 9 distinct (event, node) receipts (duplication 4/3), 1 copy at a non-subscriber.
    assert_df_equality(m.copies(m.receipts(spans), subs),
                       spark.createDataFrame([(12, 9, 1)], "copies long, receipts long, relay_copies long"), ignore_nullable=True)


def test_timeseries_buckets_by_publication_and_by_arrival(spark, ties):
    *_, pubs, dels = ties
    want = spark.createDataFrame(
        [(0.0, 1, 2, 2, 2, 1.0, 0.0, 0.0), (2.0, 1, 4, 3, 3, 0.75, 10.0, 19.8)],
        "t_s double, published long, expected long, delivered long, deliveries long, hit_ratio double, "
        "latency_p50_ms double, latency_p99_ms double")
    assert_approx_df_equality(m.timeseries(dels, pubs, start_ns=0), want, 1e-9, ignore_nullable=True)


def test_per_event_hit_ratio_and_time_to_coverage(spark, frames):
    *_, pubs, _, dels = frames
    ev = {r["event_id"]: r.asDict() for r in m.per_event(dels, pubs).collect()}
    assert (ev["e1"]["hit_ratio"], ev["e2"]["hit_ratio"], ev["e3"]["hit_ratio"]) == (0.5, 0.0, 1.0)
    assert (ev["e1"]["t50_ms"], ev["e1"]["t100_ms"]) == (200.0, None)
    assert ev["e2"]["t50_ms"] is None
    assert (ev["e3"]["t50_ms"], ev["e3"]["t90_ms"], ev["e3"]["t100_ms"]) == (10.0, 30.0, 30.0)


def test_copies_duplication_and_relays(spark, frames):
    spans, subs, *_ = frames
    row = m.copies(m.receipts(spans), subs).first()
    assert (row["copies"], row["receipts"], row["relay_copies"]) == (6, 5, 1)


def test_a_relay_is_a_copy_at_a_node_not_subscribed_whatever_the_copy_says(spark):
    """The subscriptions file decides, not the receiver's flag (a peer's own account)."""
    spans = spark.createDataFrame([span("receive", 3, "e1", "a", 10, 1, True, True, 0),   # node 3: on b only
                                   span("receive", 1, "e1", "a", 20, 1, True, False, 0)],  # node 1: on a
                                  schemas.SPANS)
    row = m.copies(m.receipts(spans), spark.createDataFrame(SUBS, schemas.SUBSCRIPTIONS)).first()
    assert (row["copies"], row["relay_copies"]) == (2, 1)


def test_received_copies_without_a_parent_span_are_counted(spark):
    rows = [("t", "s0", None, *span("publish", 0, "e1", "a", 0)[3:]),
            ("t", "s1", "s0", *span("receive", 1, "e1", "a", 5, 1, True, True, 0)[3:]),
            ("t", "s2", None, *span("receive", 2, "e1", "a", 6, 2, True, True, 1)[3:])]  # its sender's span lost
    assert m.without_parent(m.receipts(spark.createDataFrame(rows, schemas.SPANS))) == 1


def test_window_defaults_to_the_end_of_the_run(spark, frames):
    spans, subs, timeline, *_ = frames
    pubs = m.publications(spans, window_ns=None, end_ns=END)
    expected = m.expected_receivers(pubs, subs, m.alive_intervals(timeline, END))
    dels = m.deliveries(expected, pubs, m.first_copies(m.receipts(spans)))
    # node 2 leaves at 2000 < END: excluded everywhere; e2's late copy has nobody to count for.
    got = {(r["event_id"], r["node"], r["delivered"]) for r in dels.collect()}
    assert got == {("e1", 1, True), ("e3", 0, True)}


def test_an_event_whose_window_passes_the_end_is_scored_on_the_part_before_the_end(spark):
    """Survivors' intervals close at their end-of-run leaves, recorded after the run's end: an
    event published less than a window before the end still has its expected receivers."""
    spans = spark.createDataFrame([span("publish", 0, "e9", "a", 4500), span("receive", 1, "e9", "a", 4900, 1, True, True, 0),
                                   span("receive", 2, "e9", "a", 5200, 1, True, True, 0)], schemas.SPANS)
    subs = spark.createDataFrame(SUBS, schemas.SUBSCRIPTIONS)
    timeline = spark.createDataFrame([(0, "join", 0), (0, "join", 1), (0, "join", 2), (END + 300 * MS, "leave", 0),
                                      (END + 300 * MS, "leave", 1), (END + 300 * MS, "leave", 2)], schemas.TIMELINE)
    pubs = m.publications(spans, window_ns=1000 * MS, end_ns=END)
    assert [(r["window_end_ns"], r["clipped"]) for r in pubs.collect()] == [(END, True)]
    dels = m.deliveries(m.expected_receivers(pubs, subs, m.alive_intervals(timeline, END)), pubs, m.first_copies(m.receipts(spans)))
    # node 1's copy came before the end, node 2's after it: outside the window that is left
    assert {(r["node"], r["delivered"]) for r in dels.collect()} == {(1, True), (2, False)}


def test_alive_intervals_pair_each_join_with_the_next_exit(spark):
    tl = spark.createDataFrame([(0, "join", 1), (100, "leave", 1), (200, "join", 1), (50, "join", 2), (70, "crash", 2)],
                               schemas.TIMELINE)
    want = spark.createDataFrame([(1, 0, 100), (1, 200, 999), (2, 50, 70)], "node long, join_ns long, leave_ns long")
    assert_df_equality(m.alive_intervals(tl, 999), want, ignore_row_order=True, ignore_nullable=True)


def test_otlp_json_lines_normalise_to_the_span_table_one_row_per_span(spark, tmp_path):
    def attrs(**kv):
        def val(v):
            if isinstance(v, bool):
                return {"boolValue": v}
            if isinstance(v, int):
                return {"intValue": str(v)}
            return {"stringValue": v}
        return [{"key": f"pubsub.{k.replace('frm', 'from')}", "value": val(v)} for k, v in kv.items()]

    line = {"resourceSpans": [{"resource": {"attributes": [{"key": "overlaylab.node_id", "value": {"intValue": "4"}}]},
            "scopeSpans": [{"scope": {"name": "x"}, "spans": [
                {"traceId": "aa", "spanId": "01", "parentSpanId": "", "name": "publish", "kind": 1,
                 "startTimeUnixNano": "1000", "endTimeUnixNano": "1000",
                 "attributes": attrs(event_id="4-1", topic="a", node=4, hops=0, first_copy=True, subscriber=True)},
                {"traceId": "aa", "spanId": "02", "parentSpanId": "09", "name": "receive", "kind": 1,
                 "startTimeUnixNano": "2500", "endTimeUnixNano": "2500",
                 "attributes": attrs(event_id="4-1", topic="a", node=4, hops=3, first_copy=False, subscriber=False, frm=7)},
            ]}]}]}
    # The same request twice: a peer sent a batch again when the Collector's answer was lost.
    (tmp_path / "node-4.jsonl").write_text((json.dumps(line) + "\n") * 2)
    raw = spark.read.schema(schemas.OTLP_TRACES).json(str(tmp_path / "*.jsonl"))
    want = spark.createDataFrame([
        ("aa", "01", None, "publish", 1000, 4, None, "4-1", "a", 0, True, True),
        ("aa", "02", "09", "receive", 2500, 4, 7, "4-1", "a", 3, False, False),
    ], schemas.SPANS)
    assert_df_equality(m.normalize_otlp(raw), want, ignore_row_order=True, ignore_nullable=True)


def test_overlay_degree_connectivity_and_overhead():
    rows = [{"node": 0, "neighbours": [1, 2]}, {"node": 1, "neighbours": [0]}, {"node": 2, "neighbours": [3]},
            {"node": 3, "neighbours": [2]}]
    d = overlay.degrees(rows)
    assert (d["mean"], d["max"], d["out_mean"]) == (1.5, 2, 1.25)
    # topic a = {0, 1}: linked. topic b = {1, 3}: no 1-3 link. topic c = {2, 3}: linked.
    assert overlay.topic_connectivity(rows, {0: ["a"], 1: ["a", "b"], 2: ["c"], 3: ["b", "c"]}) == pytest.approx(2 / 3)
    stats = [{"counters": {"msgs_sent.cyclon": 20, "bytes_sent.cyclon": 2000, "events_sent": 99}},
             {"counters": {"msgs_sent.cyclon": 20, "bytes_sent.cyclon": 1000}}]
    o = overlay.overhead(stats, duration_s=10.0, cycle_s=1.0)
    assert (o["msgs_per_node_per_cycle"], o["bytes_per_node_per_cycle"]) == (2.0, 150.0)


def test_compare_runs(tmp_path):
    from analysis.compare import compare, hop_tvd

    assert hop_tvd({"1": 5, "2": 5}, {"1": 5, "2": 5}) == 0
    assert hop_tvd({"1": 10}, {"2": 3}) == 1
    assert hop_tvd({"1": 6, "2": 4}, {"1": 4, "2": 6}) == pytest.approx(0.2)
    for name, hit, hist in (("a", 1.0, {"1": 3, "2": 1}), ("b", 0.5, {"1": 1, "2": 3})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(
            {"run_id": name, "backend": name, "hit_ratio": hit, "hops": {"mean": 1.0}, "hop_histogram": hist}))
    result = compare([tmp_path / "a", tmp_path / "b"])
    row = next(r for r in result["metrics"] if r["metric"] == "hit_ratio")
    assert row["values"] == [1.0, 0.5] and row["diff"] == [-0.5]
    assert result["hop_tvd"] == [pytest.approx(0.5)]


def test_events_published_twice_or_received_before_publish_are_refused(spark):
    """Two events that share an id (the old ``node-seq`` ids after a fresh rejoin) and a copy
    that predates its publish are refused, by reason, and never scored."""
    rows = SPANS + [
        span("publish", 2, "e9", "a", 100), span("publish", 2, "e9", "a", 900),  # published twice
        span("receive", 0, "e9", "a", 950, 1, True, True, 2),
        span("publish", 0, "e8", "a", 500), span("receive", 1, "e8", "a", 450, 1, True, True, 0),  # 50 ms early
    ]
    spans = spark.createDataFrame(rows, schemas.SPANS)
    refused = m.refused_events(spans, m.receipts(spans))
    want = spark.createDataFrame([("e9", "published_twice"), ("e8", "received_before_publish")],
                                 "event_id string, reason string")
    assert_df_equality(refused, want, ignore_row_order=True, ignore_nullable=True)


def test_shuffle_partitions_follow_the_traces_size_unless_set(spark):
    from analysis.spark import AUTO_PARTITIONS, PARTITION_BYTES, PARTITIONS, SMALL_INPUT, size_partitions

    try:
        for size, want in ((0, "1"), (PARTITION_BYTES, "1"), (PARTITION_BYTES + 1, "2"), (100 * PARTITION_BYTES, "8")):
            size_partitions(spark, size)
            assert spark.conf.get(PARTITIONS) == want, size
            # one partition: no adaptive execution, no whole-stage codegen; Spark's defaults above it
            assert {k: spark.conf.get(k) for k in SMALL_INPUT} == (SMALL_INPUT if want == "1" else dict.fromkeys(SMALL_INPUT, "true"))
        spark.conf.set(AUTO_PARTITIONS, "false")  # a session given its number keeps it
        spark.conf.set(PARTITIONS, "5")
        size_partitions(spark, 0)
        assert spark.conf.get(PARTITIONS) == "5"
    finally:
        spark.conf.set(AUTO_PARTITIONS, "true")
