"""Fixtures for tests against the real Redis (DB 15 by default; each test writes under its own prefix)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from uuid import uuid4

import pytest
from redis.asyncio import Redis

from gateway.cache.backend import RedisBackend
from gateway.providers.redis import ResilientRedis
from tests.redis_proxy import ThreadedProxy

REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    """A plain client for looking at what the cache wrote."""
    client = Redis.from_url(REDIS_TEST_URL)
    yield client
    await client.aclose()


@pytest.fixture
async def prefix(redis: Redis) -> AsyncIterator[str]:
    """A key prefix of this test's own; everything under it is deleted afterwards (never FLUSHDB)."""
    value = f"test-{uuid4().hex}"
    yield value
    keys = [key async for key in redis.scan_iter(match=f"{value}:*", count=1000)]
    if keys:
        await redis.delete(*keys)


@pytest.fixture
async def shared_redis() -> AsyncIterator[ResilientRedis]:
    """The gateway's resilient client, as the app opens it; a generous timeout: these tests are about
    behaviour, test_cache_outage is about timeouts."""
    client = ResilientRedis.from_url(REDIS_TEST_URL, timeout_s=0.5)
    yield client
    await client.aclose()


@pytest.fixture
def backend(shared_redis: ResilientRedis) -> RedisBackend:
    return RedisBackend(shared_redis)


@pytest.fixture
def proxy() -> Iterator[ThreadedProxy]:
    """Redis through a proxy the test can cut (``stop``) and restore (``start``) while apps run on their threads."""
    proxy = ThreadedProxy(REDIS_TEST_URL)
    proxy.start()
    yield proxy
    proxy.close()
