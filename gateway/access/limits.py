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

import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from gateway.access.keys import Principal
from gateway.errors import AccessUnavailableError
from gateway.providers import RedisUnavailableError, ResilientRedis

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
    """Limits in Redis, on the app's shared client; when Redis fails (or the client is failing fast after
    a failure), per-process limits (default) or 503 (``fail_closed``). The shared client bounds each
    call by this limiter's ``timeout_s`` and logs the outage once, for every Redis caller."""

    name = "redis"

    def __init__(
        self,
        redis: ResilientRedis,
        *,
        prefix: str,
        timeout_s: float,
        fail_closed: bool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._timeout_s = timeout_s
        self._fail_closed = fail_closed
        self._clock = clock
        self._fallback = LocalRateLimiter(clock)
        self._admit = redis.client.register_script(_ADMIT_LUA)
        self._charge = redis.client.register_script(_CHARGE_LUA)

    @property
    def redis(self) -> ResilientRedis:
        return self._redis

    def _tokens_key(self, principal: Principal, day: str) -> str:
        return f"{self._prefix}:tok:{principal.name}:{day}"

    async def admit(self, principal: Principal) -> Decision:
        if not principal.limited:
            return Decision("ok")
        minute, minute_left, day_left, day = _windows(self._clock())
        args = [principal.requests_per_minute or 0, WINDOW_S * 2, principal.daily_tokens or 0]
        keys = [f"{self._prefix}:rpm:{principal.name}:{minute}", self._tokens_key(principal, day)]
        try:
            raw = await self._redis.run(
                "rate limit admit", lambda _: self._admit(keys=keys, args=args), timeout_s=self._timeout_s
            )
        except RedisUnavailableError as exc:
            if self._fail_closed:
                raise AccessUnavailableError(
                    "Rate limits cannot be checked (Redis unavailable) and GATEWAY_RATE_LIMIT_FAIL_CLOSED is set; "
                    "retry shortly."
                ) from exc
            return await self._fallback.admit(principal)  # per-process limits until Redis answers again
        code = int(raw)
        if code == 2:
            return Decision("tokens", day_left, principal.daily_tokens)
        if code == 1:
            return Decision("requests", minute_left, principal.requests_per_minute)
        return Decision("ok")

    async def charge(self, principal: Principal, tokens: int) -> None:
        if principal.daily_tokens is None or tokens <= 0:
            return
        key = self._tokens_key(principal, _windows(self._clock())[3])
        try:
            await self._redis.run(
                "token charge", lambda _: self._charge(keys=[key], args=[tokens, DAY_S * 2]), timeout_s=self._timeout_s
            )
        except RedisUnavailableError as exc:
            # An answer already went out: record locally and never fail the response for it.
            logger.warning("token budget: could not charge %d tokens to %s in Redis: %s", tokens, principal.name, exc)
            await self._fallback.charge(principal, tokens)
