"""A peer's spans over real OTLP/gRPC to a receiver on loopback: a Collector that is not there
yet, or that loses its answer to an export it took, costs no span; one that never comes is
counted as dropped."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from node.transport import telemetry as telemetry_module
from node.transport.telemetry import PeerTelemetry
from tests.helpers import free_port


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP trace receiver that records every span id it is sent; ``lose_answers`` first
    exports are taken and then answered UNAVAILABLE."""

    def __init__(self, lose_answers: int = 0) -> None:
        self.span_ids: list[bytes] = []
        self.lose_answers = lose_answers
        self.lock = threading.Lock()

    def Export(self, request, context):
        with self.lock:
            self.span_ids += [s.span_id for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
            if self.lose_answers:
                self.lose_answers -= 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "answer lost")
        return trace_service_pb2.ExportTraceServiceResponse()


def serve(receiver: Receiver, port: int) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


def spans(telemetry: PeerTelemetry, n: int) -> None:
    for k in range(n):
        telemetry.span("receive", None, {"pubsub.event_id": f"1-{k}"})


def test_spans_ended_before_the_collector_starts_reach_it(monkeypatch):
    monkeypatch.setattr(telemetry_module, "EXPORT_TIMEOUT_S", 1.0)
    port = free_port()
    telemetry = PeerTelemetry("otlp", 1, "gossip", None, otlp_endpoint=f"127.0.0.1:{port}")
    spans(telemetry, 30)
    time.sleep(2.5)  # nothing listens: the first export and its own retries fail within 1 s
    assert telemetry.exporter.exported == 0 and telemetry.exporter.held_spans == 30
    receiver = Receiver()
    server = serve(receiver, port)
    try:
        spans(telemetry, 20)
        assert telemetry.flush() == 0
        assert len(receiver.span_ids) == len(set(receiver.span_ids)) == 50
        assert telemetry.exporter.exported == 50 and telemetry.exporter.held_spans == 0
    finally:
        telemetry.shutdown()
        server.stop(None)


def test_a_batch_whose_answer_is_lost_is_sent_again_and_arrives_twice():
    port = free_port()
    receiver = Receiver(lose_answers=1)
    server = serve(receiver, port)
    telemetry = PeerTelemetry("otlp", 2, "gossip", None, otlp_endpoint=f"127.0.0.1:{port}")
    try:
        spans(telemetry, 10)
        assert telemetry.flush() == 0
        assert len(set(receiver.span_ids)) == 10 and len(receiver.span_ids) > 10  # the analysis keeps one of each
    finally:
        telemetry.shutdown()
        server.stop(None)


def test_a_collector_that_never_comes_leaves_the_spans_counted_as_dropped():
    telemetry = PeerTelemetry("otlp", 3, "gossip", None, otlp_endpoint=f"127.0.0.1:{free_port()}")
    try:
        spans(telemetry, 5)
        started = time.monotonic()
        assert telemetry.flush(deadline=time.monotonic() + 2.0) == 5
        assert time.monotonic() - started < 2.0 + 5.0 + 1.0  # the deadline, one export's timeout, slack
    finally:
        telemetry.shutdown()
