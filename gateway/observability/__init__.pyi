from .http import trace_requests
from .logs import configure_logging
from .metrics import GatewayMetrics
from .recorder import BreakerState, Telemetry, reader_known
from .tracing import build_tracer_provider

__all__ = [
    "BreakerState",
    "GatewayMetrics",
    "Telemetry",
    "build_tracer_provider",
    "configure_logging",
    "reader_known",
    "trace_requests",
]
