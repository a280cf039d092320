"""Redis going away, coming back, and turning slow, without touching the shared Redis server.

The cache talks to Redis through a TCP proxy started by the test: stopping the proxy drops every
connection and refuses new ones (Redis down), starting it again on the same port brings Redis
back, and a delay on forwarded bytes makes Redis slower than the cache's 50 ms budget.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit
from uuid import uuid4

import pytest
from langchain_core.embeddings import Embeddings
from redis.asyncio import Redis

from gateway.cache.backend import CacheUnavailableError, RedisBackend
from gateway.cache.embeddings import CachedEmbeddings
from gateway.cache.exact import ExactCache
from gateway.cache.versions import KnowledgeVersions
from gateway.providers.redis import RedisUnavailableError, ResilientRedis
from gateway.query.schemas import QueryResponse
from gateway.settings import CacheSettings
from pipelines.shared.visibility import Visibility
from tests.redis_proxy import TcpProxy
from tests.scripted import CountedCompute, query_response

pytestmark = pytest.mark.redis

REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
BACKOFF_S = 0.2


class CountingEmbeddings(Embeddings):
    def __init__(self) -> None:
        self.query_calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return [0.5, float(len(text))]


@pytest.fixture
async def proxy() -> AsyncIterator[TcpProxy]:
    target = urlsplit(REDIS_TEST_URL)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 6379)
    await proxy.start()
    yield proxy
    if proxy._server is not None:
        await proxy.stop()


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    value = f"test-cache-{uuid4().hex}"
    yield value
    redis = Redis.from_url(REDIS_TEST_URL)
    keys = [key async for key in redis.scan_iter(match=f"{value}:*", count=500)]
    if keys:
        await redis.delete(*keys)
    await redis.aclose()


@pytest.fixture
async def backend(proxy: TcpProxy) -> AsyncIterator[RedisBackend]:
    """The production configuration (the shared client, 50 ms per call) with a short backoff, through the proxy."""
    redis = ResilientRedis.from_url(proxy.url_for(REDIS_TEST_URL), backoff_s=BACKOFF_S)
    yield RedisBackend(redis)
    await redis.aclose()


async def test_redis_stopping_mid_run_degrades_to_misses_and_caching_resumes_when_it_is_back(
    proxy: TcpProxy, backend: RedisBackend, prefix: str
) -> None:
    versions = KnowledgeVersions(backend, prefix=prefix)
    cache = ExactCache(CacheSettings(prefix=prefix), backend, versions, QueryResponse)
    compute = CountedCompute()
    assert (
        await cache.get_or_compute(
            tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
        )
    ).source == "computed"
    await cache.drain()  # the answer went before its store
    key = await cache.key_for("acme", "auto", "q", visibility=Visibility.everything())
    assert key is not None
    assert (
        await cache.get_or_compute(
            tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
        )
    ).source == "hit"

    await proxy.stop()
    assert await cache.get(key) is None  # a miss, not an exception
    assert cache.errors == 1
    assert backend.redis.failures == 1
    down = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    assert (down.source, down.value.answer) == ("bypass", "computed #2")
    assert not await cache.set(key, query_response("lost"))
    assert await versions.bump("acme") is None  # a document changed while Redis was down
    assert cache.errors == 3
    assert backend.redis.skipped >= 1  # inside the backoff Redis is not even tried
    with pytest.raises(CacheUnavailableError) as raised:
        await backend.ping()
    assert raised.value.provider == "cache"

    await proxy.start()
    await asyncio.sleep(BACKOFF_S + 0.05)
    after = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    assert (after.source, after.value.answer) == ("computed", "computed #3")  # the deferred bump landed first
    assert not versions.pending
    await cache.drain()
    again = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    assert (again.source, again.value.answer) == ("hit", "computed #3")
    await backend.ping()


async def test_a_slow_redis_costs_a_request_the_timeout_not_the_delay(
    proxy: TcpProxy, backend: RedisBackend, prefix: str
) -> None:
    cache = ExactCache(CacheSettings(prefix=prefix), backend, KnowledgeVersions(backend, prefix=prefix), QueryResponse)
    key = await cache.key_for("acme", "auto", "q", visibility=Visibility.everything())
    assert key is not None
    assert await cache.set(key, query_response("stored"))

    proxy.delay_s = 0.5
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await cache.get(key) is None
    assert loop.time() - started < 0.25  # 50 ms budget plus scheduling slack, far below the 500 ms delay
    assert cache.errors == 1
    started = loop.time()
    outcome = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=CountedCompute(), visibility=Visibility.everything()
    )
    assert outcome.source == "bypass"
    assert loop.time() - started < 0.05  # within the backoff: Redis is skipped outright

    proxy.delay_s = 0.0
    await asyncio.sleep(BACKOFF_S + 0.05)
    found = await cache.get(key)
    assert found is not None
    assert found.answer == "stored"


def hold_the_loop(seconds: float) -> None:
    """Other requests' work on the event loop: it handles nothing else meanwhile."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def test_a_reply_that_came_while_the_loop_was_busy_is_not_a_timeout(
    proxy: TcpProxy, backend: RedisBackend, prefix: str
) -> None:
    """The loop held past the deadline by other work (a backlog of requests): Redis answered in time, so the call
    returns its reply and Redis stays up; one that has not answered by then still times out."""
    direct = ResilientRedis.from_url(REDIS_TEST_URL)  # no proxy: it runs on this loop, which is held below
    try:
        await direct.run("set", lambda client: client.set(f"{prefix}:k", "v"))
        for _ in range(3):
            call = asyncio.create_task(direct.run("get", lambda client: client.get(f"{prefix}:k")))
            await asyncio.sleep(0)  # the command goes out
            hold_the_loop(0.12)  # well past the 50 ms deadline; Redis replies meanwhile
            assert await call == b"v"
        assert (direct.failures, direct.up) == (0, True)
    finally:
        await direct.aclose()

    redis = backend.redis
    await redis.run("set", lambda client: client.set(f"{prefix}:k", "v"))
    proxy.delay_s = 0.3  # through the proxy, delayed: the reply is not there at the deadline
    call = asyncio.create_task(redis.run("get", lambda client: client.get(f"{prefix}:k")))
    await asyncio.sleep(0)
    hold_the_loop(0.12)
    with pytest.raises(RedisUnavailableError, match="timed out after 50 ms"):
        await call
    assert (redis.failures, redis.up) == (1, False)


async def test_query_embeddings_fall_through_to_the_model_while_redis_is_down(
    proxy: TcpProxy, backend: RedisBackend, prefix: str
) -> None:
    inner = CountingEmbeddings()
    cached = CachedEmbeddings(inner, backend, model="m", prefix=prefix)
    vector = await cached.aembed_query("q")
    await proxy.stop()
    assert await cached.aembed_query("q") == vector
    assert (inner.query_calls, cached.errors) == (2, 2)
    await proxy.start()
    await asyncio.sleep(BACKOFF_S + 0.05)
    assert await cached.aembed_query("q") == vector
    assert inner.query_calls == 2  # served from Redis again
