"""OTLP export follows the standard OTEL_* variables: spans reach a collector over OTLP/HTTP, or nothing is sent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.observability.tracing import UnsupportedProtocolError, build_tracer_provider, otlp_protocol, otlp_requested
from tests.otlp_receiver import PROTOBUF, TRACES_PATH, OTLPReceiver, otlp_receiver


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    with otlp_receiver() as running:
        yield running


def test_spans_reach_an_otlp_http_collector(receiver: OTLPReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gateway-under-test")
    provider = build_tracer_provider()
    with provider.get_tracer("test").start_as_current_span("gateway.answer"):
        pass
    provider.shutdown()  # what the lifespan's finally does: flushes the batch
    assert [(e.path, e.content_type) for e in receiver.exports] == [(TRACES_PATH, PROTOBUF)]
    assert [(s.service_name, s.span.name) for s in receiver.spans()] == [("gateway-under-test", "gateway.answer")]


def test_no_endpoint_means_no_exporter() -> None:
    assert not otlp_requested({})
    assert otlp_requested({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert not otlp_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"})
    assert otlp_requested({}, force=True)
    provider = build_tracer_provider(environ={})
    processors = provider._active_span_processor._span_processors  # the SDK keeps no public list
    assert not any(isinstance(p, BatchSpanProcessor) for p in processors)
    provider.shutdown()


def test_spans_nobody_exports_are_not_recorded_yet_carry_ids() -> None:
    """No exporter: spans are sampled out (no attributes kept for nobody), but still give a trace id for the
    response and the logs, and children share it; with an exporter they are recorded and exported."""
    provider = build_tracer_provider(environ={})
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("gateway.answer") as parent, tracer.start_as_current_span("child") as child:
        assert not parent.is_recording()
        assert parent.get_span_context().is_valid
        assert child.get_span_context().trace_id == parent.get_span_context().trace_id
    provider.shutdown()
    exporter = InMemorySpanExporter()
    provider = build_tracer_provider(environ={}, extra_exporter=exporter)
    with provider.get_tracer("test").start_as_current_span("gateway.answer") as span:
        assert span.is_recording()
    provider.shutdown()
    assert [s.name for s in exporter.get_finished_spans()] == ["gateway.answer"]


def test_the_protocol_is_http_protobuf_unless_set() -> None:
    assert otlp_protocol({}) == "http/protobuf"
    assert otlp_protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": " HTTP/Protobuf "}) == "http/protobuf"
    # The traces-specific variable wins over the general one, as the OTLP specification says.
    traces_wins = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
    assert otlp_protocol(traces_wins) == "http/protobuf"


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
    ],
    ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()),
)
def test_a_transport_the_gateway_lacks_stops_the_start_up(environ: dict[str, str]) -> None:
    """No gRPC exporter is installed: exporting over OTLP/HTTP to a gRPC port would lose every span in silence."""
    exporting = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", **environ}
    with pytest.raises(UnsupportedProtocolError, match="OTLP/HTTP only"):
        build_tracer_provider(environ=exporting)


async def test_the_app_does_not_start_on_grpc(make_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ExceptionGroup) as failed:  # the test client's task group wraps the lifespan's error
        async with make_client():
            pass
    assert failed.group_contains(UnsupportedProtocolError, match="OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported")
