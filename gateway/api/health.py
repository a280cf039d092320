"""Liveness and readiness probes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from litestar import Controller, Response, get
from litestar.di import NamedDependency

from gateway.state import Services


class HealthController(Controller):
    tags = ["health"]

    @get("/healthz", summary="The process is alive")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @get("/readyz", summary="Vector store reachable; LLM upstreams and Redis reported, degraded when down")
    async def readyz(self, services: NamedDependency[Services]) -> Response[dict[str, Any]]:
        """503 only when a dependency of this pod that every answer needs is down. Without Redis the gateway
        still answers (uncached), and without the LLM it still serves cached answers and fails the rest fast
        with a Retry-After (see ``Services.degradable_checks``): both mark the pod degraded instead of pulling
        it, and every other replica sharing them, from service. ``llm`` gives each upstream's breaker state."""
        limit = services.settings.server.readiness_timeout_s
        # Both groups at once, so a slow probe costs one readiness timeout, not two.
        required, optional = await asyncio.gather(
            _run_checks(services.readiness_checks(), limit), _run_checks(services.degradable_checks(), limit)
        )
        for name, outcome in {**required, **optional}.items():
            services.telemetry.dependency(name, outcome == "ok")
        ready = all(status == "ok" for status in required.values())
        degraded = {name: f"degraded: {status}" for name, status in optional.items() if status != "ok"}
        checks = {**required, **{name: degraded.get(name, "ok") for name in optional}}
        status = "unavailable" if not ready else "degraded" if degraded else "ready"
        body: dict[str, Any] = {"status": status, "checks": checks, "llm": services.llm.upstreams}
        if services.cache is not None:
            body["cache"] = {"backend": services.cache.backend.name, **asdict(services.cache.responses.stats)}
        return Response(body, status_code=200 if ready else 503)


async def _run_checks(checks: dict[str, Callable[[], Awaitable[None]]], limit_s: float) -> dict[str, str]:
    async def one(check: Callable[[], Awaitable[None]]) -> str:
        try:
            await asyncio.wait_for(check(), timeout=limit_s)
        except TimeoutError:
            return f"timeout after {limit_s}s"
        except Exception as exc:  # a probe reports every failure, it never raises
            return f"error: {getattr(exc, 'detail', None) or repr(exc)}"  # the detail itself, not its repr
        return "ok"

    names = list(checks)
    results = await asyncio.gather(*(one(checks[name]) for name in names))
    return dict(zip(names, results, strict=True))
