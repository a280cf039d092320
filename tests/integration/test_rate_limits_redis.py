"""Rate limits and budgets in the real Redis: shared by two app instances, atomic, and failing as configured."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from redis.asyncio import Redis

from gateway.access.keys import Principal
from gateway.access.limits import RedisRateLimiter
from gateway.errors import AccessUnavailableError
from gateway.providers.redis import RedisUnavailableError, ResilientRedis
from gateway.settings import Settings
from tests.chat_support import ACME_KEY, bearer, chat_model, keyed, openai_client
from tests.integration.conftest import REDIS_TEST_URL

pytestmark = pytest.mark.redis

DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens: connection refused at once


def shared(settings: Settings, prefix: str, **limits: Any) -> Settings:
    return keyed(settings, **limits).replace(
        redis={"url": REDIS_TEST_URL}, access={"rate_limit_prefix": prefix}, cache={"prefix": f"{prefix}:cache"}
    )


async def test_two_instances_share_one_limit(make_client: Any, settings: Settings, prefix: str, redis: Redis) -> None:
    config = shared(settings, prefix, requests_per_minute=3)
    async with (
        make_client(chat_model(), settings_override=config) as (one, _),
        make_client(chat_model(), settings_override=config) as (two, _),
    ):
        statuses = []
        for client in (one, two, one):
            response = await client.post("/v1/route", json={"query": "hi"}, headers=bearer(ACME_KEY))
            statuses.append(response.status_code)
        with pytest.raises(openai.RateLimitError) as caught:
            await openai_client(two, ACME_KEY).chat.completions.create(
                model="gateway-direct", messages=[{"role": "user", "content": "hi"}]
            )
        native = await one.post("/v1/route", json={"query": "hi"}, headers=bearer(ACME_KEY))
    assert statuses == [200, 200, 200]
    assert 1 <= int(caught.value.response.headers["retry-after"]) <= 60
    assert native.status_code == 429
    assert native.headers["content-type"].startswith("application/problem+json")
    keys = [key.decode() async for key in redis.scan_iter(match=f"{prefix}:rpm:*")]
    assert len(keys) == 1
    assert keys[0].startswith(f"{prefix}:rpm:acme-chatbot:")  # the key's name, never the key
    assert ACME_KEY not in keys[0]
    assert 0 < await redis.ttl(keys[0]) <= 120


async def test_token_budget_is_shared_too(make_client: Any, settings: Settings, prefix: str, redis: Redis) -> None:
    config = shared(settings, prefix, daily_tokens=5)
    async with (
        make_client(chat_model(), settings_override=config) as (one, _),
        make_client(chat_model(), settings_override=config) as (two, _),
    ):
        first = await openai_client(one, ACME_KEY).chat.completions.create(
            model="gateway-direct", messages=[{"role": "user", "content": "hi"}]
        )
        with pytest.raises(openai.RateLimitError) as caught:
            await openai_client(two, ACME_KEY).chat.completions.create(
                model="gateway-direct", messages=[{"role": "user", "content": "hello"}]
            )
    keys = [key.decode() async for key in redis.scan_iter(match=f"{prefix}:tok:*")]
    assert first.usage is not None
    assert len(keys) == 1
    assert int(await redis.get(keys[0]) or 0) == first.usage.total_tokens
    assert 0 < await redis.ttl(keys[0]) <= 2 * 86_400
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "daily_token_budget_exceeded"


async def test_concurrent_requests_never_overshoot(prefix: str) -> None:
    frozen_clock = 60.0 * 28_333_334 + 10  # 10 s into a minute: the burst cannot straddle two windows
    redis = ResilientRedis.from_url(REDIS_TEST_URL, timeout_s=2.0)
    limiter = RedisRateLimiter(redis, prefix=prefix, timeout_s=2.0, fail_closed=True, clock=lambda: frozen_clock)
    principal = Principal(name="burst", tenant="acme", scopes=frozenset({"query"}), requests_per_minute=25)
    try:
        decisions = await asyncio.gather(*(limiter.admit(principal) for _ in range(60)))
    finally:
        await redis.aclose()
    assert sum(d.allowed for d in decisions) == 25
    assert {d.retry_after_s for d in decisions if not d.allowed} == {50}


def dead_limiter(*, fail_closed: bool) -> tuple[ResilientRedis, RedisRateLimiter]:
    redis = ResilientRedis.from_url(DEAD_REDIS, timeout_s=0.2)
    return redis, RedisRateLimiter(redis, prefix="unused", timeout_s=0.2, fail_closed=fail_closed)


async def test_redis_down_fails_open_to_per_process_limits() -> None:
    redis, limiter = dead_limiter(fail_closed=False)
    principal = Principal(name="bot", tenant="acme", scopes=frozenset({"query"}), requests_per_minute=2)
    try:
        decisions = [await limiter.admit(principal) for _ in range(3)]
    finally:
        await redis.aclose()
    assert [d.verdict for d in decisions] == ["ok", "ok", "requests"]


async def test_redis_down_fails_closed_when_configured(make_client: Any, settings: Settings) -> None:
    config = keyed(settings, requests_per_minute=100).replace(
        redis={"url": DEAD_REDIS}, access={"rate_limit_fail_closed": True}, cache={"enabled": False}
    )
    async with make_client(chat_model(), settings_override=config) as (client, model):
        native = await client.post("/v1/route", json={"query": "hi"}, headers=bearer(ACME_KEY))
        with pytest.raises(openai.InternalServerError) as caught:
            await openai_client(client, ACME_KEY).chat.completions.create(
                model="gateway-direct", messages=[{"role": "user", "content": "hi"}]
            )
    assert native.status_code == 503
    assert native.headers["retry-after"] == "5"
    assert "Redis unavailable" in native.json()["detail"]
    assert caught.value.status_code == 503
    assert model.calls == []


async def test_fail_closed_limiter_raises_the_503_error() -> None:
    redis, limiter = dead_limiter(fail_closed=True)
    principal = Principal(name="bot", tenant="acme", scopes=frozenset({"query"}), requests_per_minute=2)
    try:
        with pytest.raises(AccessUnavailableError) as raised:
            await limiter.admit(principal)
    finally:
        await redis.aclose()
    assert isinstance(raised.value.__cause__, RedisUnavailableError)  # translated at the boundary
