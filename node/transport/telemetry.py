"""OpenTelemetry for a peer: its spans, exported as OTLP.

Each peer has its own resource, carrying ``overlaylab.node_id``. A span is recorded on the
peer's hot path as a row (:class:`SpanRow`: no SDK object, no lock; one per received copy) and
exported in batches by one thread per process (:class:`SpanPipeline`), which hands each peer's
rows to its exporter: a process of 125 peers runs one export thread, not 125. Spans go either
to the peer's own file ``node-<id>.jsonl`` in the run directory (the Collector's file-exporter
format: one ``ExportTraceServiceRequest`` per line; local backend, containers) or over OTLP/gRPC
to a Collector (``otlp_endpoint``, the k8s backend, whose Collector writes the same file format)
through the SDK's exporter. The file is written by :class:`SpanFileExporter`: the lines of
``opentelemetry-exporter-otlp-json-file``'s ``FileSpanExporter`` for the same spans, byte for
byte (a test checks it), at a fraction of the SDK's cost per span (bench/spans.py).
The queue is sized so that a burst drops nothing. The exporter wrapper keeps a batch the
Collector did not take and sends it again (a Collector that starts late, restarts or is out of
reach for a while: a transient outage loses nothing), and counts what was exported, so
``spans_dropped = spans_ended - spans_exported`` after a flush is exact. A batch sent again may
reach the Collector twice (it took it but the answer was lost); the analysis keeps one copy of
each span id.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import deque
from pathlib import Path
from typing import NamedTuple

from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file.trace_exporter import _encode_spans_to_dict
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
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
EXPORT_EVERY_S = 0.2
"""How often the span thread exports what the peers recorded (the SDK batch processor's default
schedule delay is 5 s; 0.2 s keeps a peer's file close behind it)."""
SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)


_quote = json.encoder.encode_basestring_ascii  # a str as json.dumps writes it (C)


SpanRef = tuple[int, int, bool]
"""A span's context as the copies it causes and the links to it need it: trace id, span id, and
whether it came from another process (a plain tuple: one is made per received copy)."""


class SpanRow(NamedTuple):
    """A finished span as a peer records it on its hot path; encoded and exported later, in
    batches, by the process's span thread (:class:`SpanPipeline`)."""

    telemetry: PeerTelemetry
    name: str
    trace_id: int
    span_id: int
    parent: SpanRef | None
    attributes: dict
    links: tuple[SpanRef, ...]
    time_ns: int


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
    raise TypeError(f"span attribute {key!r}: {kind.__name__} (str, bool or int)")


def _hex(cache: dict[int, str], value: int, digits: str) -> str:
    out = cache.get(value)
    if out is None:
        if len(cache) >= _HEX_SIZE:
            cache.clear()
        out = cache[value] = format(value, digits)
    return out


def _flags(ref: SpanRef | None) -> int:
    """OTLP span flags: the parent's (or link's) remoteness is known (0x100), and remote (0x200)."""
    return 0x300 if ref is not None and ref[2] else 0x100


def encode_span(r: SpanRow) -> str:
    """One span, as the OTLP JSON encoder and ``json.dumps(separators=(",", ":"))`` write the
    equivalent SDK span (:func:`readable`): internal, status unset, no events, links without
    attributes. Written as text directly: a dict per span and the generic encoder cost most of a
    span's export."""
    parent = r.parent
    out = f'{{"traceId":"{_hex(_TRACE_HEX, r.trace_id, "032x")}","spanId":"{r.span_id:016x}",'
    if parent is not None:
        out += f'"parentSpanId":"{_hex(_PARENT_HEX, parent[1], "016x")}",'
    out += (f'"flags":{_flags(parent)},"name":{_quote(r.name)},"kind":1,"startTimeUnixNano":"{r.time_ns}",'
            f'"endTimeUnixNano":"{r.time_ns}","attributes":[' + ",".join(_attribute(k, v) for k, v in r.attributes.items()) + "]")
    if r.links:
        out += ',"links":[' + ",".join(f'{{"traceId":"{link[0]:032x}","spanId":"{link[1]:016x}","flags":{_flags(link)}}}'
                                       for link in r.links) + "]"
    return out + ',"status":{}}'


def _context(ref: SpanRef) -> trace.SpanContext:
    return trace.SpanContext(ref[0], ref[1], is_remote=ref[2], trace_flags=SAMPLED)


def readable(r: SpanRow) -> ReadableSpan:
    """``r`` as the SDK's finished span (what ``start_span`` and ``end`` would have made), for
    the exporters of the SDK."""
    t = r.telemetry
    return ReadableSpan(r.name, trace.SpanContext(r.trace_id, r.span_id, is_remote=False, trace_flags=SAMPLED),
                        _context(r.parent) if r.parent else None, t.resource, r.attributes, (),
                        [trace.Link(_context(link)) for link in r.links], instrumentation_scope=t.scope,
                        start_time=r.time_ns, end_time=r.time_ns)


_SPANS = "\x00spans\x00"  # stands for the spans in an encoded head


class SpanFileExporter:
    """Appends each batch of a peer's span rows as one line of OTLP JSON (an
    ``ExportTraceServiceRequest``), byte for byte the line ``FileSpanExporter`` writes for the
    same spans: the resource and scope are encoded once by the upstream encoder and kept as the
    text around the spans, each span by :func:`encode_span` (a batch with an attribute that is
    not a str, bool or int through the upstream encoder)."""

    def __init__(self, path: Path) -> None:
        self._stream = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._around: tuple[str, str] | None = None

    def _encode(self, rows: list[SpanRow]) -> str:
        if self._around is None:
            resource_spans = _encode_spans_to_dict([readable(rows[0])])["resourceSpans"][0]
            scope_spans = resource_spans.pop("scopeSpans")[0]
            scope_spans["spans"] = _SPANS
            head = json.dumps({"resourceSpans": [{**resource_spans, "scopeSpans": [scope_spans]}]}, separators=(",", ":"))
            before, after = head.split(json.dumps(_SPANS))
            self._around = (before + "[", "]" + after)
        before, after = self._around
        return before + ",".join(map(encode_span, rows)) + after

    def export(self, rows: list[SpanRow]) -> bool:
        if not rows:
            return True
        try:
            line = self._encode(rows)
        except TypeError:  # an attribute of another type: the upstream encoder writes the batch
            line = json.dumps(_encode_spans_to_dict([readable(r) for r in rows]), separators=(",", ":"))
        with self._lock:
            if self._stream.closed:
                return False
            self._stream.write(line + "\n")
            self._stream.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            self._stream.close()


class SdkExporter:
    """A span exporter of the SDK (OTLP/gRPC to a Collector) fed span rows."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, rows: list[SpanRow]) -> bool:
        return self.inner.export([readable(r) for r in rows]) is SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.inner.shutdown()


class CountingExporter:
    """Counts the spans exported; a batch that fails is held and sent again, oldest first,
    before the next batch and at every flush."""

    def __init__(self, inner: SpanFileExporter | SdkExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.held: deque[list[SpanRow]] = deque()
        self.held_spans = 0
        self._lock = threading.Lock()

    def export(self, rows: list[SpanRow]) -> bool:
        with self._lock:
            self.held.append(rows)
            self.held_spans += len(rows)
            while self.held_spans > MAX_QUEUE:  # given up: counted as dropped
                self.held_spans -= len(self.held.popleft())
            return self._send_held()

    def _send_held(self) -> bool:
        while self.held:
            batch = self.held[0]
            if not self.inner.export(batch):
                return False
            self.held.popleft()
            self.held_spans -= len(batch)
            self.exported += len(batch)
        return True

    def send_held(self, deadline: float) -> None:
        """Send what is held until all is sent or ``deadline`` (``time.monotonic``) has passed."""
        while True:
            with self._lock:
                if self._send_held():
                    return
            if time.monotonic() + RETRY_S > deadline:
                return
            time.sleep(RETRY_S)

    def shutdown(self) -> None:
        self.inner.shutdown()


class SpanPipeline:
    """The spans of a process's peers. A peer's span is a row appended to one list (no lock, no
    object of the SDK: the hot path of every received copy); one thread, every ``EXPORT_EVERY_S``
    and at each flush, takes the rows, splits them by peer and hands each peer's to its
    exporter. Beyond ``MAX_QUEUE`` rows waiting, a span is dropped (and counted: a peer's
    ``ended`` less its ``exported``)."""

    def __init__(self) -> None:
        self.rows: deque[SpanRow] = deque()  # appended by the peers' loop, taken by the flushing thread
        self.peers = 0
        self._lock = threading.Lock()  # one export at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self) -> None:
        self.peers += 1
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="overlaylab-spans", daemon=True)
            self._thread.start()

    def remove(self) -> None:
        """After a peer's last span: flush; the last peer stops the thread."""
        self.flush()
        self.peers -= 1
        if not self.peers and self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def record(self, row: SpanRow) -> None:
        if len(self.rows) < MAX_QUEUE:
            self.rows.append(row)

    def _run(self) -> None:
        while not self._stop.wait(EXPORT_EVERY_S):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            by_peer: dict[PeerTelemetry, list[SpanRow]] = {}
            take = self.rows.popleft
            for _ in range(len(self.rows)):
                r = take()
                by_peer.setdefault(r.telemetry, []).append(r)
            for telemetry, batch in by_peer.items():
                telemetry.exporter.export(batch)


class PeerTelemetry:
    def __init__(self, run_id: str, node_id: int, protocol: str, trace_dir: Path | None,
                 otlp_endpoint: str | None = None, pipeline: SpanPipeline | None = None) -> None:
        self.resource = Resource.create({
            "service.name": "overlaylab-peer",
            "overlaylab.run_id": run_id,
            "overlaylab.node_id": node_id,
            "overlaylab.protocol": protocol,
        })
        self.scope = InstrumentationScope("overlaylab.node")
        if otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            inner: SpanFileExporter | SdkExporter = SdkExporter(
                OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True, timeout=EXPORT_TIMEOUT_S))
        else:
            trace_dir.mkdir(parents=True, exist_ok=True)
            inner = SpanFileExporter(trace_dir / f"node-{node_id}.jsonl")
        self.exporter = CountingExporter(inner)
        self.pipeline = pipeline or SpanPipeline()
        self.pipeline.add()
        self.ended = 0

    def span(self, name: str, parent: SpanRef | None, attributes: dict, links: tuple[SpanRef, ...] = ()) -> SpanRef:
        """Record an instantaneous span; returns its context for the copies it causes. Ids as the
        SDK's ``RandomIdGenerator`` draws them."""
        trace_id = parent[0] if parent else _new_id(128)
        span_id = _new_id(64)
        self.ended += 1
        self.pipeline.record(SpanRow(self, name, trace_id, span_id, parent, attributes, links, time.time_ns()))
        return trace_id, span_id, False

    def flush(self, deadline: float | None = None) -> int:
        """Export everything recorded, sending held batches again until ``deadline``
        (``time.monotonic``; default: ``FLUSH_S`` from now); returns the spans dropped so far."""
        deadline = time.monotonic() + FLUSH_S if deadline is None else deadline
        self.pipeline.flush()
        self.exporter.send_held(deadline)
        return self.ended - self.exporter.exported

    def shutdown(self) -> None:
        self.pipeline.remove()
        self.exporter.shutdown()


def _new_id(bits: int) -> int:
    while True:
        value = random.getrandbits(bits)
        if value:
            return value


def remote_parent(trace_id: bytes, span_id: bytes) -> SpanRef | None:
    if len(trace_id) != 16 or len(span_id) != 8:
        return None
    return int.from_bytes(trace_id, "big"), int.from_bytes(span_id, "big"), True


def context_bytes(ref: SpanRef | None) -> tuple[bytes, bytes]:
    if ref is None:
        return b"", b""
    return ref[0].to_bytes(16, "big"), ref[1].to_bytes(8, "big")
