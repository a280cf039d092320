"""Through the HTTP API with the real Redis: a stampede computes once; Redis going away and coming back
mid-run never fails a request, and caching resumes without a restart."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest

from gateway.settings import Settings
from tests.redis_proxy import ThreadedProxy
from tests.scripted import answer_with_first_passage

pytestmark = pytest.mark.redis

REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
QUESTION = {"tenant": "acme", "query": "How many days of annual leave?", "route": "single_hop"}
LEAVE = {"tenant": "acme", "documents": [{"id": "leave", "title": "Leave", "text": "Acme employees get 25 days."}]}


def generations(model: Any) -> int:
    return sum("Context passages" in str(messages[-1].content) for messages, _ in model.calls)


def cache_settings(settings: Settings, redis_url: str) -> Settings:
    """A short backoff, and a generous per-call budget: an outage here is a refused connection, not a slow
    Redis, and a loaded machine can stall a first call, connection set-up included, past the production 50 ms."""
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    return settings.replace(redis={"url": redis_url, "backoff_s": 0.2, "timeout_s": 0.5}, cache={"prefix": prefix})


async def test_twenty_concurrent_identical_misses_compute_once(make_client: Any, settings: Settings) -> None:
    async with make_client(answer_with_first_passage, settings_override=cache_settings(settings, REDIS_TEST_URL)) as (
        client,
        model,
    ):
        assert (await client.post("/v1/documents", json=LEAVE)).status_code == 200
        responses = await asyncio.gather(*(client.post("/v1/query", json=QUESTION) for _ in range(20)))
    assert [r.status_code for r in responses] == [200] * 20
    bodies = [r.json() for r in responses]
    assert generations(model) == 1
    assert len({b["answer"] for b in bodies}) == 1
    assert sum(not b["cached"] for b in bodies) == 1  # one computed, nineteen served the shared result


async def test_redis_stopping_and_returning_mid_run(make_client: Any, settings: Settings, proxy: ThreadedProxy) -> None:
    overrides = cache_settings(settings, proxy.url_for(REDIS_TEST_URL))
    async with make_client(answer_with_first_passage, settings_override=overrides) as (client, model):
        assert (await client.post("/v1/documents", json=LEAVE)).status_code == 200
        first = (await client.post("/v1/query", json=QUESTION)).json()
        hit = (await client.post("/v1/query", json=QUESTION)).json()

        proxy.stop()  # Redis is gone
        while_down = [await client.post("/v1/query", json=QUESTION) for _ in range(3)]
        ready_while_down = await client.get("/readyz")

        proxy.start()  # same port: Redis is back
        await asyncio.sleep(0.3)  # past the cache's backoff
        recomputed = (await client.post("/v1/query", json=QUESTION)).json()
        resumed = (await client.post("/v1/query", json=QUESTION)).json()
        ready_after = await client.get("/readyz")

    assert (first["cached"], hit["cached"]) == (False, True)
    assert [r.status_code for r in while_down] == [200, 200, 200]
    assert all(r.json()["cached"] is False for r in while_down)  # answered without the cache
    assert all("25 days" in r.json()["answer"] for r in while_down)
    assert ready_while_down.status_code == 200
    assert ready_while_down.json()["status"] == "degraded"
    assert ready_while_down.json()["cache"]["errors"] >= 3  # the error counter records the outage
    assert resumed["cached"] is True  # caching resumed, no restart
    assert "25 days" in recomputed["answer"]
    assert ready_after.json()["status"] == "ready"
    assert generations(model) >= 4  # the first miss and the three uncached answers while Redis was down
