"""One Redis client per app, against the real Redis: one pool for the response cache, the semantic cache
and the rate limiter (counted in ``CLIENT LIST``), and one health for all three through an outage."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.cache.backend import RedisBackend
from gateway.cache.exact import ExactCache
from gateway.settings import Settings
from tests.chat_support import ACME_ADMIN_KEY, ACME_KEY, bearer, keyed
from tests.integration.conftest import REDIS_TEST_URL
from tests.redis_proxy import ThreadedProxy
from tests.scripted import answer_with_first_passage
from tests.unit.observability_support import scrape, value

pytestmark = pytest.mark.redis

LEAVE = {
    "documents": [{"id": "leave", "title": "Leave", "text": "In 2023 Acme employees got 25 days of annual leave."}]
}
QUESTION = {"query": "How many days of annual leave did employees get in 2023?", "route": "single_hop"}
PARAPHRASE = {"query": "In 2023, how many days of annual leave did employees get?", "route": "single_hop"}


def with_query(url: str, **params: str) -> str:
    return url + ("&" if "?" in url else "?") + "&".join(f"{k}={v}" for k, v in params.items())


async def stored_answers(cache: ExactCache[Any]) -> None:
    """Waits until the app has stored the answers it sent (it stores them after sending them). The app runs in
    the test client's own loop (another thread), so this polls rather than awaiting its tasks."""
    for _ in range(1000):
        if not cache.storing:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("answers still being stored after 5 s")


def shared_settings(settings: Settings, redis_url: str, prefix: str) -> Settings:
    """Every Redis user on: exact + embedding + semantic caches, and a rate-limited key."""
    return keyed(settings, requests_per_minute=100, daily_tokens=100_000).replace(
        # outages here are refused connections; no stall of a loaded machine counts
        redis={"url": redis_url, "backoff_s": 0.2, "timeout_s": 0.5},
        cache={"prefix": f"{prefix}:cache", "embedding_store": "shared"},
        semantic_cache={"enabled": True},
        access={"rate_limit_prefix": f"{prefix}:rl", "rate_limit_timeout_s": 0.5},
    )


async def named_connections(redis: Redis, name: str) -> int:
    clients = await redis.client_list()
    return sum(1 for c in clients if c.get("name") == name)


async def test_cache_semantic_cache_and_rate_limiter_share_one_pool(
    make_client: Any, settings: Settings, redis: Redis, prefix: str
) -> None:
    name = f"gw-{uuid.uuid4().hex[:10]}"  # the app names its connections (CLIENT SETNAME); the URL picks the name
    config = shared_settings(settings, with_query(REDIS_TEST_URL, client_name=name), prefix)
    async with make_client(answer_with_first_passage, settings_override=config) as (client, _):
        shared = client.app.state.access.limiter.redis
        assert shared is not None
        cache = client.app.state.readiness.cache
        assert cache is not None
        assert isinstance(cache.backend, RedisBackend)
        assert cache.backend.redis is shared
        assert client.app.state.access.limiter.redis is shared
        assert await named_connections(redis, name) == 0  # nothing dialled at start-up

        assert (await client.post("/v1/documents", json=LEAVE, headers=bearer(ACME_ADMIN_KEY))).status_code == 200
        asked = []
        for question in (QUESTION, PARAPHRASE):
            asked.append(await client.post("/v1/query", json=question, headers=bearer(ACME_KEY)))
            await stored_answers(client.app.state.readiness.answers)  # stored after it is sent: one at a time here
        ready = await client.get("/readyz")
        during = await named_connections(redis, name)
        pool_size = sum(count for count, _ in shared.client.connection_pool.get_connection_count())  # idle + in use
        stored = {key.decode().removeprefix(prefix) async for key in redis.scan_iter(match=f"{prefix}:*")}
    after = await named_connections(redis, name)

    assert [r.status_code for r in asked] == [200, 200]
    assert (asked[0].json()["cached"], asked[1].json()["cached"]) == (False, True)  # the paraphrase: semantic hit
    assert ready.json()["checks"]["redis"] == "ok"
    # Each user of Redis wrote through the app's client...
    assert any(key.startswith(":rl:rpm:acme-chatbot:") for key in stored)  # rate limiter
    assert any(key.startswith(":rl:tok:acme-chatbot:") for key in stored)  # token budget
    assert any(":sem:acme:" in key for key in stored)  # semantic cache
    assert any(":q:acme:" in key for key in stored)  # exact response cache
    assert ":cache:ver:acme" in stored  # knowledge versions
    assert any(key.startswith(":cache:emb:") for key in stored)  # query embeddings
    # ...and Redis saw exactly the connections of that one pool. Sequential requests reuse its connections: one, or
    # two when an answer's store (sent after the answer) overlaps the request's charge of its token budget.
    assert during == pool_size
    assert pool_size in (1, 2)
    assert after == 0  # the lifespan closed the pool


async def test_the_local_models_query_vectors_stay_in_the_process(
    make_client: Any, settings: Settings, redis: Redis, prefix: str
) -> None:
    """The default (``GATEWAY_EMBEDDING_CACHE_STORE=auto``) with the local model: answers and versions in Redis,
    query vectors not (two round trips per unique question would cost more than the model saves)."""
    config = keyed(settings, requests_per_minute=100, daily_tokens=100_000).replace(
        redis={"url": REDIS_TEST_URL, "timeout_s": 0.5}, cache={"prefix": f"{prefix}:cache"}
    )
    assert config.embeddings.provider == "use"
    async with make_client(answer_with_first_passage, settings_override=config) as (client, _):
        assert (await client.post("/v1/documents", json=LEAVE, headers=bearer(ACME_ADMIN_KEY))).status_code == 200
        # The same question with another top_k: another response key, so a response-cache miss that embeds again.
        bodies = (QUESTION, QUESTION, {**QUESTION, "top_k": 2})
        asked = [(await client.post("/v1/query", json=b, headers=bearer(ACME_KEY))).json() for b in bodies]
        samples, _ = await scrape(client)
        stored = {key.decode().removeprefix(prefix) async for key in redis.scan_iter(match=f"{prefix}:*")}
    assert [answer["cached"] for answer in asked] == [False, True, False]
    assert any(":q:acme:" in key for key in stored)
    assert ":cache:ver:acme" in stored
    assert not any(key.startswith(":cache:emb:") for key in stored)
    # The question's vector was computed once and found in the process by the third request (the second, an answer
    # found cached, read no vector).
    assert value(samples, "gateway_cache_requests_total", layer="embedding", result="miss") == 1
    assert value(samples, "gateway_cache_requests_total", layer="embedding", result="hit") == 1


async def test_an_outage_is_one_transition_for_every_redis_user_and_each_keeps_its_policy(
    make_client: Any, settings: Settings, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = ThreadedProxy(REDIS_TEST_URL)
    proxy.start()
    caplog.set_level(logging.INFO, logger="gateway.providers.redis")
    config = shared_settings(settings, proxy.url_for(REDIS_TEST_URL), prefix)
    try:
        async with make_client(answer_with_first_passage, settings_override=config) as (client, _):
            metrics = client.app.state.telemetry.metrics
            assert metrics is not None
            assert (await client.post("/v1/documents", json=LEAVE, headers=bearer(ACME_ADMIN_KEY))).status_code == 200
            before = await client.post("/v1/query", json=QUESTION, headers=bearer(ACME_KEY))
            answers = client.app.state.readiness.answers
            assert answers is not None
            await stored_answers(answers)  # its answer is stored after it is sent: before Redis goes

            proxy.stop()
            down = [await client.post("/v1/query", json=QUESTION, headers=bearer(ACME_KEY)) for _ in range(3)]
            ready_down = await client.get("/readyz")

            proxy.start()
            await asyncio.sleep(0.3)  # past the shared backoff
            back = [await client.post("/v1/query", json=QUESTION, headers=bearer(ACME_KEY)) for _ in range(2)]

            def transitions(state: str) -> float | None:
                labels = {"dependency": "redis", "state": state}
                return metrics.registry.get_sample_value("gateway_dependency_transitions_total", labels)

            counted = (transitions("down"), transitions("up"))
            gauge = metrics.registry.get_sample_value("gateway_dependency_up", {"dependency": "redis"})
    finally:
        proxy.close()

    assert before.status_code == 200
    assert [r.status_code for r in down] == [200, 200, 200]  # limiter fails open, caches miss
    assert all(r.json()["cached"] is False for r in down)
    assert ready_down.json()["status"] == "degraded"
    assert [r.status_code for r in back] == [200, 200]
    assert back[-1].json()["cached"] is True  # caching resumed without a restart
    assert counted == (1.0, 1.0)  # cache, semantic cache and limiter all failed: still one outage
    assert gauge == 1.0
    messages = [r.getMessage() for r in caplog.records if r.name == "gateway.providers.redis"]
    assert sum("Redis degraded" in m for m in messages) == 1
    assert sum("Redis recovered" in m for m in messages) == 1
