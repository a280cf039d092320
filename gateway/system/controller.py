"""Liveness and readiness probes, and the Prometheus exposition: what Kubernetes and Prometheus ask of a pod."""

from __future__ import annotations

from typing import Any

from litestar import Controller, MediaType, Response, get
from litestar.di import NamedDependency
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.errors import NotFoundError
from gateway.observability import Telemetry
from gateway.system.service import Readiness

# Litestar appends "; charset=utf-8" to text types itself: without this, the header would carry it twice.
EXPOSITION_TYPE = CONTENT_TYPE_LATEST.replace("; charset=utf-8", "")


class HealthController(Controller):
    tags = ["health"]

    @get("/healthz", summary="The process is alive")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @get("/readyz", summary="Vector store reachable; LLM upstreams and Redis reported, degraded when down")
    async def readyz(self, readiness: NamedDependency[Readiness]) -> Response[dict[str, Any]]:
        """503 only when a dependency every answer needs is down; the others mark the pod degraded instead of
        pulling it, and every other replica sharing them, from service (:class:`Readiness`)."""
        ready, body = await readiness.report()
        return Response(body, status_code=200 if ready else 503)


class MetricsController(Controller):
    tags = ["observability"]

    @get(
        "/metrics",
        summary="Prometheus metrics",
        media_type=MediaType.TEXT,
        include_in_schema=True,
        sync_to_thread=False,
    )
    def metrics(self, telemetry: NamedDependency[Telemetry]) -> Response[bytes]:
        """All workers' samples in multiprocess mode."""
        registry = telemetry.metrics
        if registry is None:
            raise NotFoundError("metrics are disabled (GATEWAY_METRICS_ENABLED=false)")
        return Response(registry.exposition(), media_type=EXPOSITION_TYPE)
