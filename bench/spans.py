"""`make bench-spans`: CPU per received-copy span, as a peer would make and write it through the
OpenTelemetry SDK (``sdk``: the tracer's ``start_span``/``end``, the SDK's batch processor and
the upstream ``FileSpanExporter``) against what the peers do (``rows``: ``PeerTelemetry.span``
records a row, the process's span thread writes it with ``SpanFileExporter``), side by side in
one run, written to bench/results/spans.json.

Both record the same span (a ``receive`` with the shell's attributes, a remote parent); the
figure is the process's CPU (every thread: both export on a thread of their own) from the first
span to the end of the flush, per span. Each side runs ``REPEAT`` times, alternating; the best
of each is kept. The two paths write the same OTLP JSON but for span ids and times (checked
here too).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from node.kit.interpret import SpanRecord
from node.kit.types import EventMsg
from node.transport.shell import span_attributes
from node.transport.telemetry import PeerTelemetry, remote_parent

RESULTS = Path(__file__).resolve().parent / "results"
N, REPEAT = 20_000, 3


def measure(path: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        t = PeerTelemetry("bench", 1, "gossip", Path(d))
        if path == "sdk":
            provider = TracerProvider(resource=t.resource)
            processor = BatchSpanProcessor(FileSpanExporter(Path(d) / "sdk.jsonl"), max_queue_size=N,
                                           max_export_batch_size=4096, schedule_delay_millis=200)
            provider.add_span_processor(processor)
            tracer = provider.get_tracer(t.scope.name)
        event = EventMsg("1-abcd-1", "t1", b"x" * 64, 1, 3)
        parent = remote_parent(b"\x01" * 16, b"\x02" * 8)
        sdk_parent = trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(
            parent[0], parent[1], is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))))
        c0 = time.process_time()
        for _ in range(N):
            attrs = span_attributes(SpanRecord("receive", event, 2, 1, True, True))
            if path == "sdk":
                tracer.start_span("receive", context=sdk_parent, attributes=attrs).end()
            else:
                t.span("receive", parent, attrs)
        if path == "sdk":
            processor.force_flush()
            dropped = N - sum(line.count('"name":"receive"') for line in (Path(d) / "sdk.jsonl").open())
        else:
            dropped = t.flush()
        c1 = time.process_time()
        file = Path(d) / ("sdk.jsonl" if path == "sdk" else "node-1.jsonl")
        size, lines = file.stat().st_size, file.read_text().splitlines()
        t.shutdown()
        if path == "sdk":
            provider.shutdown()
    first = json.loads(lines[0])["resourceSpans"][0]
    span = first["scopeSpans"][0]["spans"][0]
    shape = {"resource": first["resource"], "scope": first["scopeSpans"][0]["scope"],
             "span": {k: v for k, v in span.items() if k not in ("spanId", "startTimeUnixNano", "endTimeUnixNano")}}
    return {"cpu_us": 1e6 * (c1 - c0) / N, "bytes_per_span": size / N, "dropped": dropped, "shape": shape}


def main() -> None:
    runs: dict[str, list[dict]] = {"sdk": [], "rows": []}
    for _ in range(REPEAT):
        for path in runs:
            runs[path].append(measure(path))
    best = {p: min(rs, key=lambda r: r["cpu_us"]) for p, rs in runs.items()}
    same = best["sdk"]["shape"] == best["rows"]["shape"]
    result = {p: {k: round(v, 2) if isinstance(v, float) else v for k, v in r.items() if k != "shape"}
              for p, r in best.items()}
    record = {
        "benchmark": "spans",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "spans": N, "repeat": REPEAT,
        "per_span": result,
        "cpu_sdk_over_rows": round(best["sdk"]["cpu_us"] / best["rows"]["cpu_us"], 2),
        "same_otlp_output_but_ids_and_times": same,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "spans.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    if not same:
        raise SystemExit("the two paths wrote different spans")


if __name__ == "__main__":
    main()
