"""The peers' spans: written byte for byte as the upstream OTLP JSON file exporter writes the
same spans, split between the peers of a process by its one span thread, and counted as
dropped (never blocking a peer) past the queue's bound."""

from __future__ import annotations

import time

from opentelemetry.exporter.otlp.json.file import FileSpanExporter

from node.transport import telemetry as telemetry_module
from node.transport.telemetry import PeerTelemetry, SpanFileExporter, SpanPipeline, readable, remote_parent

ATTRS = {"pubsub.event_id": "7-ab-1", "pubsub.topic": "t/ä", "pubsub.node": 7, "pubsub.hops": 0,
         "pubsub.first_copy": True, "pubsub.subscriber": False}


def _rows(tmp_path):
    """A peer's spans: a publish linked to a request, a copy under it, a copy under a remote parent."""
    rows = []
    t = PeerTelemetry("run-1", 7, "gossip", tmp_path / "t")
    t.pipeline.record = rows.append  # what the span thread would take
    root = t.span("publish", None, ATTRS, (remote_parent(b"\x03" * 16, b"\x04" * 8),))
    t.span("receive", root, {**ATTRS, "pubsub.hops": 1, "pubsub.from": 3})
    t.span("receive", remote_parent(b"\x05" * 16, b"\x06" * 8), {**ATTRS, "pubsub.hops": 2, "pubsub.from": 2**40})
    return rows


def test_peer_spans_are_written_as_the_upstream_exporter_writes_them(tmp_path):
    rows = _rows(tmp_path)
    odd = rows[0]._replace(attributes={**ATTRS, "x": 1.5, "y": [1, 2]})  # types the peers do not make
    # each line's rows, in the pieces they were staged in (encoded a chunk at a time)
    lines = [[rows], [rows[:1]], [rows[1:]], [[odd, *rows]], [rows[:1], rows[1:]], [[odd], rows]]
    ours, theirs = SpanFileExporter(tmp_path / "ours.jsonl"), FileSpanExporter(tmp_path / "theirs.jsonl")
    for pieces in lines:
        assert ours.export([ours.stage(piece) for piece in pieces])
        theirs.export([readable(r) for piece in pieces for r in piece])
    ours.shutdown()
    theirs.shutdown()
    assert len((tmp_path / "ours.jsonl").read_text().splitlines()) == len(lines)
    assert (tmp_path / "ours.jsonl").read_bytes() == (tmp_path / "theirs.jsonl").read_bytes()


def test_the_peers_of_a_process_share_one_span_thread_and_each_writes_its_own_file(tmp_path):
    pipeline = SpanPipeline()
    peers = [PeerTelemetry("run-1", n, "gossip", tmp_path, pipeline=pipeline) for n in (1, 2)]
    for k in range(30):
        peers[k % 2].span("receive", None, {**ATTRS, "pubsub.node": 1 + k % 2})
    assert [t.flush() for t in peers] == [0, 0]
    for t in peers:
        t.shutdown()
    for n in (1, 2):
        text = (tmp_path / f"node-{n}.jsonl").read_text()
        assert text.count('"name":"receive"') == 15
        assert f'"pubsub.node","value":{{"intValue":"{n}"' in text
        assert f'"overlaylab.node_id","value":{{"intValue":"{n}"' in text
    assert pipeline._thread is None  # stopped with its last peer


def test_spans_past_the_queue_bound_are_dropped_and_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(telemetry_module, "MAX_QUEUE", 10)
    t = PeerTelemetry("run-1", 1, "gossip", tmp_path)
    with t.pipeline._lock:  # the span thread cannot take rows meanwhile
        for _ in range(25):
            t.span("receive", None, ATTRS)
    assert t.flush() == 15
    t.shutdown()
    assert (tmp_path / "node-1.jsonl").read_text().count('"name":"receive"') == 10


def test_the_span_thread_encodes_while_the_peers_are_quiet_or_too_far_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(telemetry_module, "QUIET_S", 0.2)
    monkeypatch.setattr(telemetry_module, "EXPORT_EVERY_S", 0.0)
    monkeypatch.setattr(telemetry_module, "CHUNK_ROWS", 10)
    monkeypatch.setattr(telemetry_module, "BACKLOG_ROWS", 1000)
    t = PeerTelemetry("run-1", 1, "gossip", tmp_path)

    def busy(seconds: float, per_tick: int) -> None:  # a span every 20 ms: never 0.2 s quiet
        for _ in range(int(seconds / 0.02)):
            for _ in range(per_tick):
                t.span("receive", None, ATTRS)
            time.sleep(0.02)

    busy(1.0, 1)
    assert t.exporter.exported == 0 and len(t.pipeline.rows) == 50  # all waiting while busy
    time.sleep(2.5)  # quiet: taken a chunk at a time (5 chunks, one a wake)
    assert t.exporter.exported == 50 and not t.pipeline.rows
    busy(1.0, 40)  # 2,000 rows: past the backlog bound the thread takes chunks anyway
    assert t.exporter.exported > 50
    assert t.flush() == 0 and t.exporter.exported == 2050
    t.shutdown()
