"""Prometheus metrics, OpenTelemetry traces and JSON logs of the gateway (see README "Observability").

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from gateway.observability.http import trace_requests
from gateway.observability.logs import configure_logging
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.recorder import BreakerState, Telemetry, reader_known
from gateway.observability.tracing import build_tracer_provider

__all__ = [
    "BreakerState",
    "GatewayMetrics",
    "Telemetry",
    "build_tracer_provider",
    "configure_logging",
    "reader_known",
    "trace_requests",
]
