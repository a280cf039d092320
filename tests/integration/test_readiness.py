"""/readyz against the real Redis, and 503s that name the dependency that is down."""

from __future__ import annotations

import os
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.settings import Settings

REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")


@pytest.mark.redis  # the other tests point at ports where nothing listens: no Redis needed
async def test_ready_when_redis_answers(make_client: Any, settings: Settings) -> None:
    async with make_client(settings_override=settings.replace(redis={"url": REDIS_TEST_URL})) as (client, _):
        response = await client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"llm": "ok", "vector_store": "ok", "redis": "ok", "curation_store": "ok"}


async def test_redis_down_is_reported_degraded_and_queries_still_answer(make_client: Any, settings: Settings) -> None:
    down = settings.replace(redis={"url": "redis://127.0.0.1:1/0"})
    async with make_client(settings_override=down) as (client, _):
        response = await client.get("/readyz")
        alive = await client.get("/healthz")
        answered = await client.post("/v1/query", json={"query": "hello", "route": "direct"})
    assert response.status_code == 200  # still serving: answers are computed without the cache
    body = response.json()
    assert body["status"] == "degraded"
    assert body["checks"]["redis"].startswith("degraded: error")
    assert body["checks"]["llm"] == "ok"
    assert alive.status_code == 200
    assert answered.status_code == 200
    assert answered.json()["cached"] is False


async def test_llm_down_is_reported_degraded_not_unready(settings: Settings, embeddings: Any) -> None:
    """No scripted model here: the real ChatOpenAI wiring, pointed at a port where nothing listens.

    The LLM is shared by every replica: were its outage to fail readiness, every pod would leave the
    Service at once and even cached answers would stop. So the pod stays ready, says what is degraded,
    and questions fail fast with problem details naming the provider."""
    app = create_app(settings, ProviderOverrides(embeddings=embeddings))
    async with AsyncTestClient(app) as client:
        response = await client.get("/readyz")
        query = await client.post("/v1/query", json={"query": "hello", "route": "direct"})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    assert body["checks"]["llm"].startswith("degraded: error")
    assert "127.0.0.1:9" in body["checks"]["llm"]
    assert body["checks"]["vector_store"] == "ok"
    assert body["llm"] == {"primary": "closed"}
    assert query.status_code == 503
    assert query.headers["content-type"].startswith("application/problem+json")
    assert query.json()["provider"] == "llm"
