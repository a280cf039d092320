"""``GET /metrics``: the Prometheus text exposition (all workers' samples in multiprocess mode)."""

from __future__ import annotations

from litestar import Controller, MediaType, Response, get
from litestar.di import NamedDependency
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.errors import NotFoundError
from gateway.state import Services

# Litestar appends "; charset=utf-8" to text types itself: without this, the header would carry it twice.
EXPOSITION_TYPE = CONTENT_TYPE_LATEST.replace("; charset=utf-8", "")


class MetricsController(Controller):
    tags = ["observability"]

    @get(
        "/metrics",
        summary="Prometheus metrics",
        media_type=MediaType.TEXT,
        include_in_schema=True,
        sync_to_thread=False,
    )
    def metrics(self, services: NamedDependency[Services]) -> Response[bytes]:
        registry = services.telemetry.metrics
        if registry is None:
            raise NotFoundError("metrics are disabled (GATEWAY_METRICS_ENABLED=false)")
        return Response(registry.exposition(), media_type=EXPOSITION_TYPE)
