"""A real OTLP/HTTP trace receiver for tests: an HTTP server on a loopback port that decodes what it gets.

It speaks the collector's side of OTLP/HTTP (``POST /v1/traces``, a protobuf
``ExportTraceServiceRequest`` body, optionally gzip- or deflate-compressed), so the SDK's exporter runs unchanged
down to the socket: a test that reads spans here proves they would reach a collector, which an
in-memory or mocked exporter cannot.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class Export:
    """One POST as received: where it went, how its body was typed, and the decoded request."""

    path: str
    content_type: str
    request: ExportTraceServiceRequest


@dataclass(frozen=True)
class ReceivedSpan:
    service_name: str
    span: Span


class OTLPReceiver:
    """Collects every export; ``url`` is the base URL an exporter's ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes."""

    def __init__(self, host: str, port: int) -> None:
        self.url = f"http://{host}:{port}"
        self.netloc = f"{host}:{port}"
        self._exports: list[Export] = []
        self._lock = threading.Lock()

    def record(self, export: Export) -> None:
        with self._lock:
            self._exports.append(export)

    @property
    def exports(self) -> list[Export]:
        with self._lock:
            return list(self._exports)

    def spans(self) -> list[ReceivedSpan]:
        """Every span of every export, with the ``service.name`` of the resource that sent it."""
        found: list[ReceivedSpan] = []
        for export in self.exports:
            for resource_spans in export.request.resource_spans:
                attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                service = attributes.get("service.name", "")
                for scope_spans in resource_spans.scope_spans:
                    found.extend(ReceivedSpan(service, span) for span in scope_spans.spans)
        return found


class _Server(ThreadingHTTPServer):
    receiver: OTLPReceiver


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        if self.path != TRACES_PATH:
            self.send_error(404, "only the traces signal is received here")
            return
        body = self.rfile.read(int(self.headers["Content-Length"]))
        encoding = self.headers.get("Content-Encoding")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        # A body that is not an ExportTraceServiceRequest raises here, and the exporter then sees an error.
        request = ExportTraceServiceRequest.FromString(body)
        self.server.receiver.record(Export(self.path, self.headers.get("Content-Type", ""), request))
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", PROTOBUF)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        return None


@contextmanager
def otlp_receiver() -> Iterator[OTLPReceiver]:
    """Serve on a free loopback port (the kernel picks it: no race with other tests) until the block ends."""
    server = _Server(("127.0.0.1", 0), _Handler)
    host, port = server.server_address[:2]
    server.receiver = OTLPReceiver(str(host), int(port))
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield server.receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
