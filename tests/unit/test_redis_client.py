"""The shared resilient Redis client without a Redis server: deadlines, fail-fast backoff, transitions.

The calls here never touch the raw client (they are scripted coroutines), so what is tested is the
resilience layer itself; tests/integration/test_redis_shared_client.py runs it against the real Redis.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.asyncio import Redis
from redis.backoff import ConstantBackoff, ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.errors import ProviderUnavailableError
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.recorder import Telemetry
from gateway.providers.redis import DEFAULT_CLIENT_NAME, RedisUnavailableError, ResilientRedis


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Calls:
    """Scripted Redis calls that count how often they actually ran."""

    def __init__(self) -> None:
        self.ran = 0

    async def ok(self, _: Redis) -> str:
        self.ran += 1
        return "PONG"

    async def refused(self, _: Redis) -> str:
        self.ran += 1
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    async def slow(self, _: Redis) -> str:
        self.ran += 1
        await asyncio.sleep(1.0)
        return "late"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def metrics() -> GatewayMetrics:
    return GatewayMetrics()


@pytest.fixture
def redis(clock: FakeClock, metrics: GatewayMetrics) -> ResilientRedis:
    return ResilientRedis(
        Redis(), timeout_s=0.05, backoff=ConstantBackoff(1.0), events=Telemetry(metrics, None), clock=clock
    )


def transitions(metrics: GatewayMetrics, state: str) -> float | None:
    labels = {"dependency": "redis", "state": state}
    return metrics.registry.get_sample_value("gateway_dependency_transitions_total", labels)


def up_gauge(metrics: GatewayMetrics) -> float | None:
    return metrics.registry.get_sample_value("gateway_dependency_up", {"dependency": "redis"})


async def test_a_slow_call_costs_the_deadline_not_the_delay(redis: ResilientRedis) -> None:
    calls = Calls()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RedisUnavailableError) as raised:
        await redis.run("get", calls.slow)
    assert loop.time() - started < 0.5  # 50 ms budget plus slack, far below the 1 s the call wanted
    assert "timed out after 50 ms" in raised.value.detail
    assert isinstance(raised.value.__cause__, TimeoutError)
    assert isinstance(raised.value, ProviderUnavailableError)
    assert (raised.value.provider, raised.value.status_code) == ("redis", 503)


async def test_a_caller_can_give_a_call_a_longer_budget(redis: ResilientRedis) -> None:
    async def takes_100_ms(_: Redis) -> str:
        await asyncio.sleep(0.1)
        return "done"

    assert await redis.run("admit", takes_100_ms, timeout_s=0.5) == "done"
    with pytest.raises(RedisUnavailableError):
        await redis.run("admit", takes_100_ms)  # the default 50 ms


async def test_after_a_failure_calls_fail_fast_until_the_backoff_ends(redis: ResilientRedis, clock: FakeClock) -> None:
    calls = Calls()
    with pytest.raises(RedisUnavailableError) as raised:
        await redis.run("get", calls.refused)
    assert isinstance(raised.value.__cause__, RedisConnectionError)
    assert "Connection refused" in raised.value.detail
    assert not redis.available

    clock.now += 0.9
    for _ in range(3):
        with pytest.raises(RedisUnavailableError, match="backing off"):
            await redis.run("get", calls.ok)
    assert calls.ran == 1  # Redis was not even tried inside the backoff
    assert (redis.failures, redis.skipped) == (1, 3)

    clock.now += 0.2
    assert await redis.run("get", calls.ok) == "PONG"
    assert redis.available
    assert calls.ran == 2


async def test_a_probe_always_asks_redis_and_its_success_ends_the_backoff(redis: ResilientRedis) -> None:
    calls = Calls()
    with pytest.raises(RedisUnavailableError):
        await redis.run("get", calls.refused)
    assert await redis.run("ping", calls.ok, probe=True) == "PONG"
    assert redis.available
    assert await redis.run("get", calls.ok) == "PONG"


async def test_the_backoff_policy_is_redis_pys(clock: FakeClock) -> None:
    redis = ResilientRedis(Redis(), backoff=ExponentialBackoff(cap=10, base=1), clock=clock)
    calls = Calls()
    for expected_wait in (2.0, 4.0):  # ExponentialBackoff: base * 2 ** failures
        with pytest.raises(RedisUnavailableError):
            await redis.run("get", calls.refused, probe=True)
        clock.now += expected_wait - 0.01
        assert not redis.available
        clock.now += 0.01
        assert redis.available


async def test_degraded_and_recovered_are_reported_once_per_transition(
    redis: ResilientRedis, clock: FakeClock, metrics: GatewayMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    calls = Calls()
    caplog.set_level(logging.INFO, logger="gateway.providers.redis")
    assert up_gauge(metrics) is None  # nothing known before the first call
    for _ in range(3):  # whichever layer calls, and however often, the outage is one transition
        with pytest.raises(RedisUnavailableError):
            await redis.run("cache get", calls.refused, probe=True)
        with pytest.raises(RedisUnavailableError):
            await redis.run("rate limit admit", calls.ok)  # skipped during the backoff
    assert not redis.up
    assert (transitions(metrics, "down"), up_gauge(metrics)) == (1.0, 0.0)

    clock.now += 1.0
    for _ in range(3):
        await redis.run("cache get", calls.ok)
    assert redis.up
    assert (transitions(metrics, "down"), transitions(metrics, "up"), up_gauge(metrics)) == (1.0, 1.0, 1.0)

    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(warnings) == 1
    assert "Redis degraded" in warnings[0].getMessage()
    assert "cache get failed" in warnings[0].getMessage()
    assert len(infos) == 1
    assert "Redis recovered" in infos[0].getMessage()


async def test_a_cancelled_caller_is_not_a_redis_failure(redis: ResilientRedis) -> None:
    calls = Calls()
    task = asyncio.create_task(redis.run("get", calls.slow, timeout_s=5.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (redis.failures, redis.up, redis.available) == (0, True, True)


async def test_from_url_names_every_connection_and_retries_only_a_closed_connection() -> None:
    redis = ResilientRedis.from_url("redis://127.0.0.1:1/0", timeout_s=0.05, connect_timeout_s=0.1)
    named = ResilientRedis.from_url("redis://127.0.0.1:1/0?client_name=replica-7")
    try:
        options = redis.client.connection_pool.connection_kwargs
        assert options["client_name"] == DEFAULT_CLIENT_NAME
        # The connect is backed up; a read or write has the call's deadline only (no task per command on 3.11).
        assert (options["socket_timeout"], options["socket_connect_timeout"]) == (None, 0.1)
        # One immediate retry, on a connection error only (a pooled connection a restarted Redis closed);
        # a timeout is never retried inside the call's 50 ms budget.
        assert options["retry"].get_retries() == 1
        assert options["retry"]._supported_errors == (RedisConnectionError,)
        assert named.client.connection_pool.connection_kwargs["client_name"] == "replica-7"
        with pytest.raises(RedisUnavailableError, match="Redis ping failed"):
            await redis.ping()  # nothing listens on port 1: refused at once, translated
    finally:
        await redis.aclose()
        await named.aclose()


def test_the_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        ResilientRedis(Redis(), timeout_s=0)


def test_transition_series_exist_at_zero_when_redis_is_configured(metrics: GatewayMetrics) -> None:
    """So ``increase(gateway_dependency_transitions_total{state="down"}[5m]) > 0`` sees the first outage."""
    assert transitions(metrics, "down") is None
    metrics.initialise(classifier="logistic", cache_layers=[], dependencies=["redis"])
    assert (transitions(metrics, "down"), transitions(metrics, "up")) == (0.0, 0.0)
