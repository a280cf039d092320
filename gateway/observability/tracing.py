"""The app's OpenTelemetry tracer provider, built in the lifespan and shut down in its finally.

Export follows the standard variables: ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (plus ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``...) switch on an OTLP/HTTP exporter behind a
batch processor; ``OTEL_TRACES_EXPORTER=none`` switches it off. The transport is OTLP/HTTP with protobuf
bodies only (``http/protobuf``, the spec's default): grpcio is deliberately not a dependency, so
``OTEL_EXPORTER_OTLP_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` set to ``grpc`` (or ``http/json``)
stop the start-up with :class:`UnsupportedProtocolError` instead of sending to a port that never answers
and losing every trace in silence. With no endpoint set, spans are still made
(the response and the logs carry a trace id) but not recorded (sampled out), and nothing is queued or
sent, so tracing costs a few microseconds per span. The provider is never installed as the global one:
each app (and each test) owns its own, passed to the code that makes spans.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

logger = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
# The signal-specific variable wins over the general one, as the OTLP exporter specification says.
PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
SUPPORTED_PROTOCOL = "http/protobuf"
SERVICE_NAME = "rag-gateway"
TRACER_NAME = "gateway"


class UnsupportedProtocolError(ValueError):
    """The environment asks for an OTLP transport this gateway does not ship (gRPC or HTTP/JSON)."""


def otlp_protocol(environ: Mapping[str, str]) -> str:
    """The OTLP transport the environment asks for, refused unless it is the one exporter installed."""
    for name in PROTOCOL_VARIABLES:
        value = environ.get(name, "").strip().lower()
        if not value:
            continue
        if value != SUPPORTED_PROTOCOL:
            raise UnsupportedProtocolError(
                f"{name}={value} is not supported: the gateway exports traces over OTLP/HTTP only. Set {name}="
                f"{SUPPORTED_PROTOCOL} (or unset it) and point the endpoint at the collector's OTLP/HTTP port, "
                "usually 4318."
            )
        return value
    return SUPPORTED_PROTOCOL


def otlp_requested(environ: Mapping[str, str], force: bool = False) -> bool:
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return force or any(environ.get(name) for name in ENDPOINT_VARIABLES)


def build_tracer_provider(
    *, otlp: bool = False, extra_exporter: SpanExporter | None = None, environ: Mapping[str, str] | None = None
) -> TracerProvider:
    """``otlp`` forces the OTLP exporter on (its endpoint then defaults to localhost:4318).

    ``environ`` decides whether to export and over which transport; the exporter itself reads its
    endpoint, headers and timeout from the process environment, as every OTel SDK does.

    ``extra_exporter`` is exported to synchronously: tests pass the SDK's in-memory exporter.
    """
    env = os.environ if environ is None else environ
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or SERVICE_NAME})
    processors: list[SpanProcessor] = []
    if otlp_requested(env, otlp):
        protocol = otlp_protocol(env)  # a transport this gateway cannot speak stops the start-up here
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processors.append(BatchSpanProcessor(OTLPSpanExporter()))
        logger.info("exporting traces over OTLP (%s)", protocol)
    if extra_exporter is not None:
        processors.append(SimpleSpanProcessor(extra_exporter))
    # Nothing to export to: spans are not recorded (no attributes, events or timings are kept for nobody), yet
    # each still gets its trace and span ids, so responses, X-Trace-Id and log lines carry them as before. A
    # recorded span costs some 10-20 µs more, several per request. With an exporter the environment's sampler
    # (OTEL_TRACES_SAMPLER, default parent-based always-on) decides, as before.
    provider = TracerProvider(resource=resource, sampler=None if processors else ALWAYS_OFF)
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def records_nothing(provider: trace.TracerProvider | None) -> bool:
    """Whether ``provider`` is the sampled-out one ``build_tracer_provider`` makes when nothing exports."""
    return isinstance(provider, TracerProvider) and provider.sampler is ALWAYS_OFF


def tracer_of(provider: trace.TracerProvider | None) -> trace.Tracer:
    """A no-op tracer when tracing is off: spans cost a function call and carry no trace id."""
    if provider is None:
        return trace.NoOpTracer()
    return provider.get_tracer(TRACER_NAME)


def trace_id_of(span: trace.Span) -> str | None:
    context = span.get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None
