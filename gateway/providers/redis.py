"""The app's one Redis client: one pool, resilience written once, shared by every Redis caller.

The response cache, the semantic cache and the rate limiter all talk to Redis, and all need the
same things from it: a call that costs milliseconds, not seconds, when Redis is slow; no call at
all for a moment after Redis failed (an outage must not cost each request a timeout per call);
and one log line when Redis goes away and one when it comes back, not one per caller. Like an
httpx transport stack, :class:`ResilientRedis` wraps the raw ``redis.asyncio`` client once and
callers hand it the command to run; they translate :class:`RedisUnavailableError` into their own
policy (a cache miss, per-process limits, a 503) and repeat no timeout or backoff logic.

redis-py supplies the parts it has: the pool, the client name every connection announces
(``CLIENT SETNAME``, so ``CLIENT LIST`` shows which connections are the gateway's), a connect
timeout as a backstop, one immediate retry inside a call on a connection error only (a pooled
connection that a restarted Redis closed fails at once and a fresh one answers, so recovery does not
cost one failed call per stale connection; a timeout is never retried: it would blow a 50 ms budget,
and the call's deadline bounds the retry too) and its backoff policies (``redis.backoff``) for how
long to fail fast after a failure. The call deadline (``asyncio.timeout``) and the fail-fast window are ours: redis-py's
circuit breaker belongs to its multi-database failover client (and needs pybreaker), and its
``health_check_interval`` pings idle connections before use, a round trip a 50 ms budget cannot
spare, so it stays off. Its socket (read/write) timeout stays off too: every command runs inside ``run``'s
deadline, which cancels a stalled read or write (redis-py then drops that connection), and on Python 3.11
a socket timeout makes redis-py send each command through ``asyncio.wait_for``, which starts a task per
command (two per cache miss) to enforce a bound the deadline already enforces.

A reply that is already here when the deadline comes wins. The deadline is wall time, and it includes the event
loop's own backlog: at 32 concurrent requests on 2 busy cores a lookup's reply sat read and unhandled while the loop
served other requests, its 50 ms ran out, and one such timeout opened the fail-fast window, so every request of the
next second skipped the cache and computed its answer, which lengthened the backlog (18-172 "degraded"
episodes in a 20 s run of cache hits, 400-870 req/s for the same code). So at the deadline the call is cancelled on
the loop's next step rather than at once: the loop handles the sockets that became readable before its timers, so a
reply that arrived in time resumes the call first. A Redis that has not answered still fails the call at its deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import AbstractBackoff, ConstantBackoff, NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from gateway.errors import ProviderUnavailableError
from gateway.settings import RedisSettings

T = TypeVar("T")

logger = logging.getLogger(__name__)

DEPENDENCY = "redis"
DEFAULT_CLIENT_NAME = "rag-gateway"
DEFAULT_TIMEOUT_S = 0.05
DEFAULT_BACKOFF_S = 1.0


class RedisUnavailableError(ProviderUnavailableError):
    """Redis failed, was too slow, or failed moments ago (fail fast); callers decide what that means."""

    title = "Redis unavailable"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail, provider=DEPENDENCY, **extra)


class DependencyEvents(Protocol):
    """Where a dependency going down or coming back is reported (the app's ``Telemetry``)."""

    def dependency_changed(self, name: str, up: bool) -> None: ...


class _NoDependencyEvents:
    def dependency_changed(self, name: str, up: bool) -> None:
        return None


NO_DEPENDENCY_EVENTS: DependencyEvents = _NoDependencyEvents()


class ResilientRedis:
    """``run`` one Redis command (or pipeline, or script) within a deadline, failing fast after a failure.

    After a failure, calls raise :class:`RedisUnavailableError` without touching Redis for the
    backoff's delay; the first call after it tries Redis again, so recovery needs no restart.
    ``probe=True`` calls (readiness) always try: a probe must see the truth, and a successful one
    ends the backoff. The first failure after a success is logged and reported as *degraded*, the
    first success after a failure as *recovered*: once per transition, whoever made the call.
    """

    def __init__(
        self,
        client: Redis,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        backoff: AbstractBackoff | None = None,
        events: DependencyEvents = NO_DEPENDENCY_EVENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("the Redis call timeout must be positive")
        self._client = client
        self._timeout_s = timeout_s
        self._backoff = ConstantBackoff(DEFAULT_BACKOFF_S) if backoff is None else backoff
        self._events = events
        self._clock = clock
        self._down_until = 0.0
        self._failure_streak = 0
        self._up = True
        self.failures = 0  # calls that reached Redis and failed or timed out
        self.skipped = 0  # calls refused during a backoff

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        backoff_s: float = DEFAULT_BACKOFF_S,
        connect_timeout_s: float | None = None,
        client_name: str = DEFAULT_CLIENT_NAME,
        max_connections: int | None = None,
        events: DependencyEvents = NO_DEPENDENCY_EVENTS,
    ) -> ResilientRedis:
        """One pool for ``url``; dials nothing until the first call, so a Redis that is down at start-up
        degrades the gateway instead of failing its start.

        ``connect_timeout_s`` (default ``timeout_s``) bounds a connect, backing up the per-call deadline: give it
        the longest per-call ``timeout_s`` any caller passes to ``run``. Reads and writes have the deadline only
        (see the module's docstring). A ``client_name`` in the URL's query wins.
        """
        connect_timeout = max(connect_timeout_s or timeout_s, timeout_s)
        client = Redis.from_url(
            url,
            socket_timeout=None,
            socket_connect_timeout=connect_timeout,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
            max_connections=max_connections,
            client_name=client_name,
        )
        backoff = ConstantBackoff(max(backoff_s, 0.0))
        return cls(client, timeout_s=timeout_s, backoff=backoff, events=events)

    @property
    def client(self) -> Redis:
        """The raw client, for registering scripts and building pipelines inside ``run``; never call it bare."""
        return self._client

    @property
    def available(self) -> bool:
        """False while failing fast after a failure."""
        return self._clock() >= self._down_until

    @property
    def up(self) -> bool:
        """False from a failure until the next successful call."""
        return self._up

    async def run(
        self,
        op: str,
        call: Callable[[Redis], Awaitable[T]],
        *,
        timeout_s: float | None = None,
        probe: bool = False,
    ) -> T:
        """``call(client)`` within ``timeout_s`` (default: the client's); ``op`` names it in errors and logs."""
        if not probe and not self.available:
            self.skipped += 1
            raise RedisUnavailableError(f"Redis {op} skipped: Redis failed moments ago (backing off)")
        budget = self._timeout_s if timeout_s is None else timeout_s
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None) as deadline:
                # Cancelled one loop step after the deadline: a reply already read wins (module docstring).
                when = loop.time() + budget
                expire = loop.call_at(when, deadline.reschedule, when)
                try:
                    result = await call(self._client)
                finally:
                    expire.cancel()
        except (RedisError, OSError, TimeoutError) as exc:  # TimeoutError: ours, from asyncio.timeout
            error = self._failed(op, budget, exc)
            raise error from exc
        self._succeeded()
        return result

    async def ping(self) -> None:
        """Readiness: always asks Redis, even while backing off."""
        await self.run("ping", lambda client: client.ping(), probe=True)

    async def aclose(self) -> None:
        await self._client.aclose()

    def _failed(self, op: str, budget_s: float, exc: BaseException) -> RedisUnavailableError:
        self.failures += 1
        self._failure_streak += 1
        self._down_until = self._clock() + self._backoff.compute(self._failure_streak)
        reason = f"timed out after {budget_s * 1000:g} ms" if isinstance(exc, TimeoutError) else str(exc)
        error = RedisUnavailableError(f"Redis {op} failed: {reason or type(exc).__name__}")
        if self._up:
            self._up = False
            logger.warning(
                "Redis degraded (%s): caches serve misses and rate limits fall back until it answers again",
                error.detail,
            )
            self._events.dependency_changed(DEPENDENCY, False)
        return error

    def _succeeded(self) -> None:
        self._failure_streak = 0
        self._down_until = 0.0
        if not self._up:
            self._up = True
            logger.info("Redis recovered: caching and shared rate limits resume")
            self._events.dependency_changed(DEPENDENCY, True)


def open_redis(
    settings: RedisSettings, *, longest_call_s: float = 0.0, events: DependencyEvents = NO_DEPENDENCY_EVENTS
) -> ResilientRedis | None:
    """The app's one Redis client (None without REDIS_URL): the caches and the rate limiter share its pool,
    its timeouts, its backoff and its degraded/recovered reports. Dials nothing yet.

    ``longest_call_s`` is the longest per-call budget any caller passes to ``run`` (the rate limiter's), so
    the connect timeout backing up the deadlines never cuts that caller short.
    """
    if not settings.url:
        return None
    return ResilientRedis.from_url(
        settings.url,
        timeout_s=settings.timeout_s,
        backoff_s=settings.backoff_s,
        connect_timeout_s=max(settings.timeout_s, longest_call_s),
        events=events,
    )
