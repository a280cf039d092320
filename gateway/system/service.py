"""What the readiness probe reports: the pod's own dependencies, and those it can answer without."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from gateway.cache import CacheLayer, ExactCache
from gateway.observability import Telemetry
from gateway.providers import LLMClient

Check = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Readiness:
    """``required``: dependencies every answer needs (the vector store): one down makes the pod unready.

    ``degradable``: dependencies the gateway answers without, reported but never failing readiness. Redis: uncached
    answers, per-process limits (or the rate limiter's own 503 when it fails closed). The LLM: cached answers,
    document writes and search still work, and questions fail fast (503 + Retry-After, from the breaker) or go to
    the fallback. The LLM is shared by every replica, so its outage would make them all unready at once: Kubernetes
    would then route nothing anywhere, cached answers included, and clients would get connection errors instead of
    a Retry-After. The curation store: its records are counted and dropped while it is down. The identity provider
    (when configured): requests naming no user, or named by trusted headers, never need its keys; user tokens verify
    with the keys already known, and only without any are they a 503.
    """

    required: dict[str, Check]
    degradable: dict[str, Check]
    llm: LLMClient
    telemetry: Telemetry
    timeout_s: float
    cache: CacheLayer | None = None
    answers: ExactCache[Any] | None = None  # the answer cache, whose statistics the body reports

    async def report(self) -> tuple[bool, dict[str, Any]]:
        """Whether the pod is ready, and the body that says why: each check's outcome, the LLM upstreams' breaker
        states and the answer cache's statistics."""
        # Both groups at once, so a slow probe costs one readiness timeout, not two.
        required, optional = await asyncio.gather(
            run_checks(self.required, self.timeout_s), run_checks(self.degradable, self.timeout_s)
        )
        for name, outcome in {**required, **optional}.items():
            self.telemetry.dependency(name, outcome == "ok")
        ready = all(status == "ok" for status in required.values())
        degraded = {name: f"degraded: {status}" for name, status in optional.items() if status != "ok"}
        checks = {**required, **{name: degraded.get(name, "ok") for name in optional}}
        status = "unavailable" if not ready else "degraded" if degraded else "ready"
        body: dict[str, Any] = {"status": status, "checks": checks, "llm": self.llm.upstreams}
        if self.cache is not None and self.answers is not None:
            body["cache"] = {"backend": self.cache.backend.name, **asdict(self.answers.stats)}
        return ready, body


async def run_checks(checks: dict[str, Check], limit_s: float) -> dict[str, str]:
    """Every check's outcome, ``ok`` or what went wrong: a probe reports every failure, it never raises."""

    async def one(check: Check) -> str:
        try:
            await asyncio.wait_for(check(), timeout=limit_s)
        except TimeoutError:
            return f"timeout after {limit_s}s"
        except Exception as exc:  # reported in the probe's body, never raised
            return f"error: {getattr(exc, 'detail', None) or repr(exc)}"  # the detail itself, not its repr
        return "ok"

    names = list(checks)
    results = await asyncio.gather(*(one(checks[name]) for name in names))
    return dict(zip(names, results, strict=True))
