"""OpenTelemetry for a peer: one TracerProvider per peer, exporting OTLP.

Each peer gets its own provider, so its resource carries ``overlaylab.node_id``. The peers of
one process share one batch processor and its thread (:class:`SpanPipeline`), which hands each
batch to each peer's exporter by resource: a process of 125 peers runs one export thread, not
125 that wake five times a second each and contend for the interpreter. Spans go either
to its own file ``node-<id>.jsonl`` in the run directory (the Collector's file-exporter format:
one ``ExportTraceServiceRequest`` per line; local backend, containers) or over OTLP/gRPC to a
Collector (``otlp_endpoint``, the k8s backend, whose Collector writes the same file format).
The file is written by :class:`SpanFileExporter`: the lines of
``opentelemetry-exporter-otlp-json-file``'s ``FileSpanExporter``, byte for byte (a test checks
it), at a fraction of its cost per span (bench/spans.py).
The batch queue is sized so that a burst drops nothing. The exporter wrapper keeps a batch the
Collector did not take and sends it again (a Collector that starts late, restarts or is out of
reach for a while: a transient outage loses nothing), and counts what was exported, so
``spans_dropped = spans_ended - spans_exported`` after a flush is exact. A batch sent again may
reach the Collector twice (it took it but the answer was lost); the analysis keeps one copy of
each span id.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from pathlib import Path

from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file.trace_exporter import _encode_spans_to_dict
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

MAX_QUEUE = 1 << 18
"""Spans buffered per process before the batch processor drops any (the SDK default is 2048),
and the most spans a peer's exporter holds for sending again."""
EXPORT_TIMEOUT_S = 5.0
"""One OTLP export, its own retries included (the SDK default is 10 s)."""
FLUSH_S = 15.0
"""How long a flush at ``Leave`` goes on sending held batches to a Collector that does not take
them; with one export's timeout on top it stays inside the controller's 30 s ``Leave`` call."""
RETRY_S = 1.0
SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)


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


class Unusual(Exception):
    """A span outside the shape ``SpanFileExporter`` encodes itself."""


_quote = json.encoder.encode_basestring_ascii  # a str as json.dumps writes it (C)


_KEYS: dict[str, str] = {}  # attribute key -> its encoded start (a peer uses a handful)
# Trace ids and parent span ids -> their hex: the copies of an event share a trace, and a copy's
# parent is the copy that forwarded it (a few children each).
_TRACE_HEX: dict[int, str] = {}
_PARENT_HEX: dict[int, str] = {}
_HEX_SIZE = 1 << 14


def _attribute(key: str, v) -> str:
    head = _KEYS.get(key)
    if head is None:
        head = _KEYS[key] = '{"key":' + _quote(key) + ',"value":'
    kind = type(v)
    if kind is str:
        return head + '{"stringValue":' + _quote(v) + "}}"
    if kind is bool:
        return head + ('{"boolValue":true}}' if v else '{"boolValue":false}}')
    if kind is int:
        return head + '{"intValue":"' + str(v) + '"}}'
    raise Unusual


def _hex(cache: dict[int, str], value: int, digits: str) -> str:
    out = cache.get(value)
    if out is None:
        if len(cache) >= _HEX_SIZE:
            cache.clear()
        out = cache[value] = format(value, digits)
    return out


def _flags(ctx: trace.SpanContext | None) -> int:
    """OTLP span flags: the parent's (or link's) remoteness is known (0x100), and remote (0x200)."""
    return 0x300 if ctx is not None and ctx.is_remote else 0x100


def encode_span(s: ReadableSpan) -> str:
    """One span, as the OTLP JSON encoder and ``json.dumps(separators=(",", ":"))`` write it,
    for the spans a peer makes (internal, status unset, no events, attributes of str, bool and
    int, links without attributes); Unusual else. Written as text directly: a dict per span and
    the generic encoder cost most of a span's export."""
    if s.events or s.kind is not trace.SpanKind.INTERNAL or s.status.status_code is not trace.StatusCode.UNSET:
        raise Unusual
    ctx, parent = s.context, s.parent
    out = f'{{"traceId":"{_hex(_TRACE_HEX, ctx.trace_id, "032x")}","spanId":"{ctx.span_id:016x}",'
    if parent is not None:
        out += f'"parentSpanId":"{_hex(_PARENT_HEX, parent.span_id, "016x")}",'
    out += (f'"flags":{_flags(parent)},"name":{_quote(s.name)},"kind":1,"startTimeUnixNano":"{s.start_time}",'
            f'"endTimeUnixNano":"{s.end_time}","attributes":[' + ",".join(_attribute(k, v) for k, v in s.attributes.items()) + "]")
    if s.links:
        if any(link.attributes for link in s.links):
            raise Unusual
        out += ',"links":[' + ",".join(
            f'{{"traceId":"{link.context.trace_id:032x}","spanId":"{link.context.span_id:016x}","flags":{_flags(link.context)}}}'
            for link in s.links) + "]"
    return out + ',"status":{}}'


_SPANS = "\x00spans\x00"  # stands for the spans in an encoded head


class SpanFileExporter(SpanExporter):
    """Appends each batch as one line of OTLP JSON (an ``ExportTraceServiceRequest``), as
    ``FileSpanExporter`` does. The resource and scope (a peer's spans share one of each) are
    encoded once by the upstream encoder and kept as the text around the spans; each span by
    ``encode_span``; a batch with
    spans of several resources or scopes, or of another shape, goes through the upstream encoder
    whole."""

    def __init__(self, path: Path) -> None:
        self._stream = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._head: tuple = (None, None, "", "")  # resource, scope, and the line's text around the spans

    def _encode(self, spans) -> str:
        resource, scope = spans[0].resource, spans[0].instrumentation_scope
        if any(s.resource is not resource or s.instrumentation_scope is not scope for s in spans):
            raise Unusual
        if self._head[0] is not resource or self._head[1] is not scope:
            resource_spans = _encode_spans_to_dict(spans[:1])["resourceSpans"][0]
            scope_spans = resource_spans.pop("scopeSpans")[0]
            scope_spans["spans"] = _SPANS
            head = json.dumps({"resourceSpans": [{**resource_spans, "scopeSpans": [scope_spans]}]}, separators=(",", ":"))
            before, after = head.split(json.dumps(_SPANS))
            self._head = (resource, scope, before + "[", "]" + after)
        _, _, before, after = self._head
        return before + ",".join(encode_span(s) for s in spans) + after

    def export(self, spans) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = self._encode(spans)
        except Unusual:
            line = json.dumps(_encode_spans_to_dict(spans), separators=(",", ":"))
        with self._lock:
            if self._stream.closed:
                return SpanExportResult.FAILURE
            self._stream.write(line + "\n")
            self._stream.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            self._stream.close()


class SpanPipeline(SpanExporter):
    """One batch processor for the peers of a process; it exports a batch by splitting it by
    resource (one per peer) between the peers' exporters."""

    def __init__(self) -> None:
        self.exporters: dict[int, SpanExporter] = {}  # id(resource) -> that peer's exporter
        self.processor = BatchSpanProcessor(self, max_queue_size=MAX_QUEUE, max_export_batch_size=4096,
                                            schedule_delay_millis=200)

    def add(self, resource: Resource, exporter: SpanExporter) -> None:
        self.exporters[id(resource)] = exporter

    def remove(self, resource: Resource) -> None:
        """After the peer's last span: flush, stop its exporter, and the processor with the last."""
        self.processor.force_flush()
        self.exporters.pop(id(resource)).shutdown()
        if not self.exporters:
            self.processor.shutdown()

    def export(self, spans) -> SpanExportResult:
        by_peer: dict[int, list] = {}
        for s in spans:
            by_peer.setdefault(id(s.resource), []).append(s)
        ok = True
        for key, batch in by_peer.items():
            exporter = self.exporters.get(key)
            ok = exporter is not None and exporter.export(batch) is SpanExportResult.SUCCESS and ok
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass  # the peers' exporters are stopped by ``remove``


class PeerTelemetry:
    def __init__(self, run_id: str, node_id: int, protocol: str, trace_dir: Path | None,
                 otlp_endpoint: str | None = None, pipeline: SpanPipeline | None = None) -> None:
        if otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            inner: SpanExporter = OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True, timeout=EXPORT_TIMEOUT_S)
        else:
            trace_dir.mkdir(parents=True, exist_ok=True)
            inner = SpanFileExporter(trace_dir / f"node-{node_id}.jsonl")
        self.exporter = CountingExporter(inner)
        self.provider = TracerProvider(resource=Resource.create({
            "service.name": "overlaylab-peer",
            "overlaylab.run_id": run_id,
            "overlaylab.node_id": node_id,
            "overlaylab.protocol": protocol,
        }))
        self.pipeline = pipeline or SpanPipeline()
        self.pipeline.add(self.provider.resource, self.exporter)
        self.processor = self.pipeline.processor
        self.scope = InstrumentationScope("overlaylab.node")
        self.ended = 0

    def span(self, name: str, parent: trace.SpanContext | None, attributes: dict,
             links: list[trace.SpanContext] = ()) -> trace.SpanContext:
        """Record an instantaneous span; returns its context for the copies it causes.

        The finished span is built directly (the SDK's ``ReadableSpan``, what ``start_span`` and
        ``end`` would hand the batch processor): our spans are always sampled, start and end at
        once and carry attributes of plain types, so the tracer's sampler, context handling and
        attribute checks are skipped, about a third of the cost per received copy
        (bench/spans.py). Ids come from the SDK's own generator."""
        ids = self.provider.id_generator
        ctx = trace.SpanContext(parent.trace_id if parent else ids.generate_trace_id(), ids.generate_span_id(),
                                is_remote=False, trace_flags=SAMPLED)
        now = time.time_ns()
        self.processor.on_end(ReadableSpan(
            name, ctx, parent, self.provider.resource, attributes, (), [trace.Link(link) for link in links],
            instrumentation_scope=self.scope, start_time=now, end_time=now))
        self.ended += 1
        return ctx

    def flush(self, deadline: float | None = None) -> int:
        """Export everything queued, sending held batches again until ``deadline``
        (``time.monotonic``; default: ``FLUSH_S`` from now); returns the spans dropped so far."""
        deadline = time.monotonic() + FLUSH_S if deadline is None else deadline
        self.processor.force_flush()
        self.exporter.send_held(deadline)
        return self.ended - self.exporter.exported

    def shutdown(self) -> None:
        self.pipeline.remove(self.provider.resource)


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
