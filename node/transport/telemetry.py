"""OpenTelemetry for a peer: one TracerProvider per peer, exporting OTLP.

Each peer gets its own provider, so its resource carries ``overlaylab.node_id``. Spans go either
to its own file ``node-<id>.jsonl`` in the run directory (the Collector's file-exporter format:
one ``ExportTraceServiceRequest`` per line; local backend, containers) or over OTLP/gRPC to a
Collector (``otlp_endpoint``, the k8s backend, whose Collector writes the same file format).
The batch queue is sized so that a burst drops nothing. The exporter wrapper keeps a batch the
Collector did not take and sends it again (a Collector that starts late, restarts or is out of
reach for a while: a transient outage loses nothing), and counts what was exported, so
``spans_dropped = spans_ended - spans_exported`` after a flush is exact. A batch sent again may
reach the Collector twice (it took it but the answer was lost); the analysis keeps one copy of
each span id.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path

from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

MAX_QUEUE = 1 << 18
"""Spans buffered per peer before the batch processor drops any (the SDK default is 2048), and
the most spans the exporter holds for sending again."""
EXPORT_TIMEOUT_S = 5.0
"""One OTLP export, its own retries included (the SDK default is 10 s)."""
FLUSH_S = 15.0
"""How long a flush at ``Leave`` goes on sending held batches to a Collector that does not take
them; with one export's timeout on top it stays inside the controller's 30 s ``Leave`` call."""
RETRY_S = 1.0


class CountingExporter(SpanExporter):
    """Counts the spans exported; a batch that fails is held and sent again, oldest first,
    before the next batch and at every flush."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.held: deque[list] = deque()
        self.held_spans = 0
        self._lock = threading.Lock()

    def export(self, spans) -> SpanExportResult:
        with self._lock:
            self.held.append(list(spans))
            self.held_spans += len(spans)
            while self.held_spans > MAX_QUEUE:  # given up: counted as dropped
                self.held_spans -= len(self.held.popleft())
            return self._send_held()

    def _send_held(self) -> SpanExportResult:
        while self.held:
            batch = self.held[0]
            if self.inner.export(batch) is not SpanExportResult.SUCCESS:
                return SpanExportResult.FAILURE
            self.held.popleft()
            self.held_spans -= len(batch)
            self.exported += len(batch)
        return SpanExportResult.SUCCESS

    def send_held(self, deadline: float) -> None:
        """Send what is held until all is sent or ``deadline`` (``time.monotonic``) has passed."""
        while True:
            with self._lock:
                if self._send_held() is SpanExportResult.SUCCESS:
                    return
            if time.monotonic() + RETRY_S > deadline:
                return
            time.sleep(RETRY_S)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class PeerTelemetry:
    def __init__(self, run_id: str, node_id: int, protocol: str, trace_dir: Path | None,
                 otlp_endpoint: str | None = None) -> None:
        if otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            inner: SpanExporter = OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True, timeout=EXPORT_TIMEOUT_S)
        else:
            trace_dir.mkdir(parents=True, exist_ok=True)
            inner = FileSpanExporter(trace_dir / f"node-{node_id}.jsonl")
        self.exporter = CountingExporter(inner)
        self.provider = TracerProvider(resource=Resource.create({
            "service.name": "overlaylab-peer",
            "overlaylab.run_id": run_id,
            "overlaylab.node_id": node_id,
            "overlaylab.protocol": protocol,
        }))
        self.provider.add_span_processor(BatchSpanProcessor(
            self.exporter, max_queue_size=MAX_QUEUE, max_export_batch_size=4096, schedule_delay_millis=200,
        ))
        self.tracer = self.provider.get_tracer("overlaylab.node")
        self.ended = 0

    def span(self, name: str, parent: trace.SpanContext | None, attributes: dict,
             links: list[trace.SpanContext] = ()) -> trace.SpanContext:
        """Record an instantaneous span; returns its context for the copies it causes."""
        ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent else None
        span = self.tracer.start_span(name, context=ctx, attributes=attributes,
                                      links=[trace.Link(link) for link in links])
        span.end()
        self.ended += 1
        return span.get_span_context()

    def flush(self, deadline: float | None = None) -> int:
        """Export everything queued, sending held batches again until ``deadline``
        (``time.monotonic``; default: ``FLUSH_S`` from now); returns the spans dropped so far."""
        deadline = time.monotonic() + FLUSH_S if deadline is None else deadline
        self.provider.force_flush()
        self.exporter.send_held(deadline)
        return self.ended - self.exporter.exported

    def shutdown(self) -> None:
        self.provider.shutdown()


def remote_parent(trace_id: bytes, span_id: bytes) -> trace.SpanContext | None:
    if len(trace_id) != 16 or len(span_id) != 8:
        return None
    return trace.SpanContext(
        int.from_bytes(trace_id, "big"), int.from_bytes(span_id, "big"), is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )


def context_bytes(ctx: trace.SpanContext | None) -> tuple[bytes, bytes]:
    if ctx is None:
        return b"", b""
    return ctx.trace_id.to_bytes(16, "big"), ctx.span_id.to_bytes(8, "big")
