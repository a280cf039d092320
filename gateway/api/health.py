"""Liveness and readiness probes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from litestar import Controller, Response, get
from litestar.di import NamedDependency

from gateway.state import Services


class HealthController(Controller):
    tags = ["health"]

    @get("/healthz", summary="The process is alive")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @get("/readyz", summary="LLM endpoint, vector store and (when configured) Redis are reachable")
    async def readyz(self, services: NamedDependency[Services]) -> Response[dict[str, Any]]:
        checks = await _run_checks(services.readiness_checks(), services.settings.readiness_timeout_s)
        ready = all(status == "ok" for status in checks.values())
        body = {"status": "ready" if ready else "unavailable", "checks": checks}
        return Response(body, status_code=200 if ready else 503)


async def _run_checks(checks: dict[str, Callable[[], Awaitable[None]]], limit_s: float) -> dict[str, str]:
    async def one(check: Callable[[], Awaitable[None]]) -> str:
        try:
            await asyncio.wait_for(check(), timeout=limit_s)
        except TimeoutError:
            return f"timeout after {limit_s}s"
        except Exception as exc:  # a probe reports every failure, it never raises
            return f"error: {getattr(exc, 'detail', None) or exc!r}"
        return "ok"

    names = list(checks)
    results = await asyncio.gather(*(one(checks[name]) for name in names))
    return dict(zip(names, results, strict=True))
