"""OTLP export follows the standard OTEL_* variables: spans reach a collector over OTLP/HTTP, or nothing is sent."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from gateway.observability.tracing import build_tracer_provider, otlp_requested


class Collector(BaseHTTPRequestHandler):
    """A minimal OTLP/HTTP trace receiver: keeps the span names of every export request."""

    received: list[tuple[str, list[str]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        names = [s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        self.received.append((self.path, names))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[str]:
    Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_spans_reach_an_otlp_http_collector(collector: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gateway-under-test")
    provider = build_tracer_provider()
    with provider.get_tracer("test").start_as_current_span("gateway.answer"):
        pass
    provider.shutdown()  # what the lifespan's finally does: flushes the batch
    assert Collector.received == [("/v1/traces", ["gateway.answer"])]
    assert provider.resource.attributes["service.name"] == "gateway-under-test"


def test_no_endpoint_means_no_exporter() -> None:
    assert not otlp_requested({})
    assert otlp_requested({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert not otlp_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"})
    assert otlp_requested({}, force=True)
    provider = build_tracer_provider(environ={})
    processors = provider._active_span_processor._span_processors  # the SDK keeps no public list
    assert not any(isinstance(p, BatchSpanProcessor) for p in processors)
    provider.shutdown()
