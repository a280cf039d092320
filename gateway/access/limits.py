"""Per-key request rate (fixed one-minute windows) and daily token budgets, shared by all replicas.

One Lua script checks the day's token budget and counts the request in the current minute
atomically, so concurrent requests on any number of replicas never overshoot a limit. Tokens are
known only after an answer, so the budget is checked before a request (a key already over it is
refused) and charged after it: a request in flight may take the day a little over, never the next.

Redis keys are ``{prefix}:rpm:{name}:{minute}`` and ``{prefix}:tok:{name}:{yyyymmdd}``, where
``name`` is the configured key *name*, never the key or its digest; every key expires.
Without Redis (no REDIS_URL) the same arithmetic runs in process, so limits hold per process.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from gateway.access.keys import Principal
from gateway.errors import AccessUnavailableError

logger = logging.getLogger(__name__)

WINDOW_S = 60
DAY_S = 86_400
Verdict = Literal["ok", "requests", "tokens"]


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    retry_after_s: int = 0
    limit: int | None = None

    @property
    def allowed(self) -> bool:
        return self.verdict == "ok"


def _windows(now: float) -> tuple[int, int, int, str]:
    """(minute index, seconds left in the minute, seconds left in the UTC day, day label)."""
    minute = int(now // WINDOW_S)
    minute_left = max(1, math.ceil((minute + 1) * WINDOW_S - now))
    day_left = max(1, math.ceil((int(now // DAY_S) + 1) * DAY_S - now))
    label = datetime.fromtimestamp(now, tz=UTC).strftime("%Y%m%d")
    return minute, minute_left, day_left, label


class RateLimiter(ABC):
    name: str

    @abstractmethod
    async def admit(self, principal: Principal) -> Decision:
        """Count one request against ``principal``'s limits, or refuse it."""

    @abstractmethod
    async def charge(self, principal: Principal, tokens: int) -> None:
        """Add an answer's tokens to the principal's daily usage."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass


class LocalRateLimiter(RateLimiter):
    """The same windows in this process only: for single-process runs and as Redis's stand-in."""

    name = "local"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._requests: dict[tuple[str, int], int] = {}
        self._tokens: dict[tuple[str, str], int] = {}

    async def admit(self, principal: Principal) -> Decision:
        minute, minute_left, day_left, day = _windows(self._clock())
        self._prune(minute, day)
        if principal.daily_tokens is not None and self._tokens.get((principal.name, day), 0) >= principal.daily_tokens:
            return Decision("tokens", day_left, principal.daily_tokens)
        if principal.requests_per_minute is not None:
            count = self._requests.get((principal.name, minute), 0) + 1
            self._requests[(principal.name, minute)] = count
            if count > principal.requests_per_minute:
                return Decision("requests", minute_left, principal.requests_per_minute)
        return Decision("ok")

    async def charge(self, principal: Principal, tokens: int) -> None:
        if principal.daily_tokens is None or tokens <= 0:
            return
        _, _, _, day = _windows(self._clock())
        self._tokens[(principal.name, day)] = self._tokens.get((principal.name, day), 0) + tokens

    def _prune(self, minute: int, day: str) -> None:
        for stale in [k for k in self._requests if k[1] < minute]:
            del self._requests[stale]
        for old in [k for k in self._tokens if k[1] != day]:
            del self._tokens[old]


_ADMIT_LUA = """
local budget = tonumber(ARGV[3])
if budget > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= budget then return 2 end
local limit = tonumber(ARGV[1])
if limit > 0 then
  local count = redis.call('INCR', KEYS[1])
  if count == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
  if count > limit then return 1 end
end
return 0
"""
_CHARGE_LUA = """
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""


class RedisRateLimiter(RateLimiter):
    """Limits in Redis; when Redis fails, per-process limits (default) or 503 (``fail_closed``)."""

    name = "redis"

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str,
        timeout_s: float,
        fail_closed: bool,
        owns_client: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._timeout_s = timeout_s
        self._fail_closed = fail_closed
        self._owns_client = owns_client
        self._clock = clock
        self._fallback = LocalRateLimiter(clock)
        self._degraded = False
        self._admit = client.register_script(_ADMIT_LUA)
        self._charge = client.register_script(_CHARGE_LUA)

    @classmethod
    def from_url(cls, url: str, *, prefix: str, timeout_s: float, fail_closed: bool) -> RedisRateLimiter:
        client = Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0)
        )
        return cls(client, prefix=prefix, timeout_s=timeout_s, fail_closed=fail_closed, owns_client=True)

    def _tokens_key(self, principal: Principal, day: str) -> str:
        return f"{self._prefix}:tok:{principal.name}:{day}"

    async def admit(self, principal: Principal) -> Decision:
        if principal.requests_per_minute is None and principal.daily_tokens is None:
            return Decision("ok")
        minute, minute_left, day_left, day = _windows(self._clock())
        args = [principal.requests_per_minute or 0, WINDOW_S * 2, principal.daily_tokens or 0]
        try:
            async with asyncio.timeout(self._timeout_s):
                keys = [f"{self._prefix}:rpm:{principal.name}:{minute}", self._tokens_key(principal, day)]
                code = int(await self._admit(keys=keys, args=args))
        except (RedisError, OSError, TimeoutError) as exc:
            self._failed("admit", exc)
            return await self._fallback.admit(principal)
        self._recovered()
        if code == 2:
            return Decision("tokens", day_left, principal.daily_tokens)
        if code == 1:
            return Decision("requests", minute_left, principal.requests_per_minute)
        return Decision("ok")

    async def charge(self, principal: Principal, tokens: int) -> None:
        if principal.daily_tokens is None or tokens <= 0:
            return
        day = _windows(self._clock())[3]
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._charge(keys=[self._tokens_key(principal, day)], args=[tokens, DAY_S * 2])
        except (RedisError, OSError, TimeoutError) as exc:
            # An answer already went out: record locally and never fail the response for it.
            logger.warning("token budget: could not charge %d tokens to %s in Redis: %r", tokens, principal.name, exc)
            await self._fallback.charge(principal, tokens)

    def _failed(self, op: str, exc: BaseException) -> None:
        if self._fail_closed:
            raise AccessUnavailableError(
                "Rate limits cannot be checked (Redis unavailable) and GATEWAY_RATE_LIMIT_FAIL_CLOSED is set; "
                "retry shortly."
            ) from exc
        if not self._degraded:
            logger.warning(
                "rate limiter: Redis %s failed (%r); enforcing limits per process until it recovers", op, exc
            )
        self._degraded = True

    def _recovered(self) -> None:
        if self._degraded:
            logger.info("rate limiter: Redis is back; limits are shared by all replicas again")
        self._degraded = False

    async def ping(self) -> None:
        async with asyncio.timeout(self._timeout_s):
            await self._client.ping()

    async def close(self) -> None:
        if self._owns_client:
            await self._client.aclose()
