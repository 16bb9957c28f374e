"""The peers' spans: written byte for byte as the upstream OTLP JSON file exporter writes the
same spans, split between the peers of a process by its one span thread, and counted as
dropped (never blocking a peer) past the queue's bound."""

from __future__ import annotations

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
    batches = [rows, rows[:1], rows[1:], [odd, *rows]]
    ours, theirs = SpanFileExporter(tmp_path / "ours.jsonl"), FileSpanExporter(tmp_path / "theirs.jsonl")
    for batch in batches:
        assert ours.export(batch)
        theirs.export([readable(r) for r in batch])
    ours.shutdown()
    theirs.shutdown()
    lines = (tmp_path / "ours.jsonl").read_text().splitlines()
    assert len(lines) == len(batches)
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
