"""The peers' span file writer: byte for byte the lines of the upstream OTLP JSON file exporter,
for the spans a peer makes and, through the upstream encoder, for any other."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from node.transport.telemetry import PeerTelemetry, SpanFileExporter, remote_parent


def _spans(tmp_path):
    """A peer's spans: a publish linked to a request, a copy under it, a copy under a remote parent."""
    collected = []
    t = PeerTelemetry("run-1", 7, "gossip", tmp_path / "t")
    t.processor.on_end = collected.append  # what the batch processor would be handed
    attrs = {"pubsub.event_id": "7-ab-1", "pubsub.topic": "t/ä", "pubsub.node": 7, "pubsub.hops": 0,
             "pubsub.first_copy": True, "pubsub.subscriber": False}
    root = t.span("publish", None, attrs, [remote_parent(b"\x03" * 16, b"\x04" * 8)])
    t.span("receive", root, {**attrs, "pubsub.hops": 1, "pubsub.from": 3})
    t.span("receive", remote_parent(b"\x05" * 16, b"\x06" * 8), {**attrs, "pubsub.hops": 2, "pubsub.from": 2**40})
    return collected


def _sdk_span(name: str):
    """A span of another shape (an event, a float attribute, an error status) from the SDK."""
    provider, spans = TracerProvider(), []
    provider.add_span_processor(SimpleSpanProcessor(type("Grab", (), {
        "export": lambda self, s: spans.extend(s), "shutdown": lambda self: None,
        "force_flush": lambda self, timeout_millis=0: True})()))
    span = provider.get_tracer("other").start_span(name, attributes={"x": 1.5}, kind=trace.SpanKind.SERVER)
    span.add_event("e")
    span.set_status(trace.StatusCode.ERROR)
    span.end()
    return spans


def test_peer_spans_are_written_as_the_upstream_exporter_writes_them(tmp_path):
    spans = _spans(tmp_path)
    batches = [spans, spans[:1], spans + _sdk_span("odd"), _sdk_span("odd")]
    ours, theirs = SpanFileExporter(tmp_path / "ours.jsonl"), FileSpanExporter(tmp_path / "theirs.jsonl")
    for batch in batches:
        ours.export(batch)
        theirs.export(batch)
    ours.shutdown()
    theirs.shutdown()
    lines = (tmp_path / "ours.jsonl").read_text().splitlines()
    assert len(lines) == len(batches)
    assert (tmp_path / "ours.jsonl").read_bytes() == (tmp_path / "theirs.jsonl").read_bytes()
