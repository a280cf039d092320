"""Where cached bytes live: a small async contract, Redis for replicas, memory for one process.

The cache is an optimisation, never a dependency: every backend failure surfaces as one error type
(``CacheUnavailableError``) that callers turn into a miss. The Redis backend runs on the app's
shared :class:`gateway.providers.redis.ResilientRedis`, which bounds every call by a short timeout
(a slow Redis costs a request milliseconds, not seconds) and fails fast for a moment after a failure.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis

from gateway.cache.keys import LOCK_SUFFIX, lock_key, versioned
from gateway.errors import ProviderError
from gateway.providers import RedisUnavailableError, ResilientRedis

T = TypeVar("T")


class CacheUnavailableError(ProviderError):
    """The cache backend failed or was too slow; callers treat it as a miss."""

    status_code = 503
    title = "Cache unavailable"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail, provider="cache", **extra)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _ttl_ms(ttl_s: float) -> int:
    if ttl_s <= 0:
        raise ValueError(f"a cache TTL must be positive, got {ttl_s}")
    return max(1, round(ttl_s * 1000))


class CacheBackend(ABC):
    """Bytes with TTLs, per-tenant version counters and short owner-tokened locks.

    Versions start, when missing, at the current wall clock in milliseconds rather than 0: a
    version key lost to eviction or a restart then restarts *above* every version used before,
    so entries keyed by an old version can never become current again.
    """

    name: str

    @abstractmethod
    async def get(self, key: str) -> bytes | None: ...

    @abstractmethod
    async def set(self, key: str, value: bytes, ttl_s: float) -> None: ...

    @abstractmethod
    async def incr_version(self, key: str, *, insist: bool = False) -> int:
        """Atomically advance a version counter and return the new value.

        ``insist``: the bump acknowledges a knowledge change, which is rare and is refused (503) if
        this fails, so it is worth more than a cache read: a backend may try past its fail-fast
        window and once more on a fresh connection. Bumping twice is harmless: versions only rise.
        """

    @abstractmethod
    async def get_version(self, key: str) -> int:
        """The current value of a version counter (initialising it when missing)."""

    @abstractmethod
    async def acquire_lock(self, key: str, token: str, ttl_s: float) -> bool:
        """Take ``key`` for ``ttl_s`` unless someone holds it (SET NX PX)."""

    @abstractmethod
    async def refresh_lock(self, key: str, token: str, ttl_s: float) -> bool:
        """Extend a lock we still hold; False when it expired or another owner took it."""

    @abstractmethod
    async def release_lock(self, key: str, token: str) -> bool:
        """Drop a lock only if ``token`` still owns it (never someone else's after our expiry)."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise ``CacheUnavailableError`` when the backend cannot serve requests."""

    async def get_or_lock(self, key: str, lock: str, token: str, ttl_s: float) -> tuple[bytes | None, bool]:
        """``key``'s value; on a miss, whether ``lock`` was taken for ``token`` (a stampede guard's first step).

        A lock is never taken over a value. Redis does both in one script (one round trip); this default is the
        two calls in turn, which the in-process backend runs without yielding in between.
        """
        value = await self.get(key)
        if value is not None:
            return value, False
        return None, await self.acquire_lock(lock, token, ttl_s)

    async def lookup_versioned(
        self, version_key: str, key: tuple[str, str], token: str, ttl_s: float
    ) -> tuple[int, bytes | None, bool]:
        """``get_version(version_key)``, then ``get_or_lock`` of the entry ``head + str(version) + tail`` (``key``)
        and of its lock (``lock_key`` of it) for ``token``: the version read, the value, whether the lock was taken.

        A response key embeds its tenant's knowledge version, so a lookup used to read the version first, a round trip
        of its own: Redis builds the key in the same script. This default is the calls in turn, which the in-process
        backend runs without yielding in between.
        """
        current = await self.get_version(version_key)
        entry = versioned(key, current)
        value, held = await self.get_or_lock(entry, lock_key(entry), token, ttl_s)
        return current, value, held

    async def set_and_release(self, key: str, value: bytes, ttl_s: float, lock: str, token: str) -> None:
        """Store a computed value, then drop ``lock`` if ``token`` still owns it (a stampede guard's last step):
        one round trip on Redis. The lock is released even when the store fails."""
        try:
            await self.set(key, value, ttl_s)
        finally:
            await self.release_lock(lock, token)


class MemoryBackend(CacheBackend):
    """In-process LRU with per-entry TTLs: the embedded default for a single replica.

    Bounded by entry count and by total value bytes; expired entries are dropped when touched
    and otherwise age out in LRU order like any other. Not shared between processes: run Redis when the
    gateway has more than one replica, or a document change on one would not reach the others.
    """

    name = "memory"

    def __init__(
        self,
        max_entries: int = 10_000,
        max_bytes: int = 64 * 1024 * 1024,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("a memory cache needs room for at least one entry")
        self._entries: OrderedDict[str, tuple[bytes, float | None]] = OrderedDict()
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0
        self._clock = clock
        self._wall_ms = wall_ms

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def _read(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, expires = entry
        if expires is not None and expires <= self._clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    def _write(self, key: str, value: bytes, ttl_s: float | None) -> None:
        self._drop(key)
        if len(value) > self._max_bytes:
            return  # larger than the whole cache: storing it would only evict everything else
        expires = None if ttl_s is None else self._clock() + ttl_s
        self._entries[key] = (value, expires)
        self._bytes += len(value)
        while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= len(entry[0])

    async def get(self, key: str) -> bytes | None:
        return self._read(key)

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        _ttl_ms(ttl_s)
        self._write(key, value, ttl_s)

    def ttl_remaining(self, key: str) -> float | None:
        """Seconds left before ``key`` expires (None: missing or no TTL); for tests and debugging."""
        entry = self._entries.get(key)
        if entry is None or entry[1] is None:
            return None
        return entry[1] - self._clock()

    def _version(self, key: str) -> int:
        raw = self._read(key)
        return int(raw) if raw is not None else self._wall_ms()

    async def incr_version(self, key: str, *, insist: bool = False) -> int:
        version = self._version(key) + 1
        self._write(key, str(version).encode(), None)
        return version

    async def get_version(self, key: str) -> int:
        raw = self._read(key)
        if raw is not None:
            return int(raw)
        version = self._wall_ms()
        self._write(key, str(version).encode(), None)
        return version

    async def acquire_lock(self, key: str, token: str, ttl_s: float) -> bool:
        if self._read(key) is not None:
            return False
        self._write(key, token.encode(), ttl_s)
        return True

    async def refresh_lock(self, key: str, token: str, ttl_s: float) -> bool:
        if self._read(key) != token.encode():
            return False
        self._write(key, token.encode(), ttl_s)
        return True

    async def release_lock(self, key: str, token: str) -> bool:
        if self._read(key) != token.encode():
            return False
        self._drop(key)
        return True

    async def ping(self) -> None:
        return None


# Server-side so that seeding from the server clock (not skewed replica clocks) and the increment
# are one atomic step; Redis 7 replicates script effects, so TIME before a write is allowed.
_VERSION_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  local now = redis.call('TIME')
  redis.call('INCRBY', KEYS[1], tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
end
if ARGV[1] == '1' then return redis.call('INCR', KEYS[1]) end
return tonumber(redis.call('GET', KEYS[1]))
"""
_REFRESH_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS: the entry, its lock. A hit returns {1, value}; a miss {0, 1} when it took the lock, {0, 0} when not. A lock
# that already holds this token counts as taken: a call retried after its reply was lost must not wait on itself.
_GET_OR_LOCK_LUA = """
local value = redis.call('GET', KEYS[1])
if value then return {1, value} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {0, 1} end
if redis.call('GET', KEYS[2]) == ARGV[1] then return {0, 1} end
return {0, 0}
"""
# KEYS: the tenant's version; ARGV: the entry key's head and tail (the version goes between), the lock's suffix,
# the lock token, PX. The version is read (and seeded, as above) and the entry's key built here, so a lookup is one
# round trip: {version, 1, value} on a hit, {version, 0, 1} on a miss that took the lock (or holds it already, as
# above), {version, 0, 0} on one that did not.
# The entry's keys are not declared in KEYS: one Redis (or a primary with replicas) serves the cache, never a Cluster,
# whose slots would refuse the version and the entry in one script anyway.
_LOOKUP_VERSIONED_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  local now = redis.call('TIME')
  redis.call('INCRBY', KEYS[1], tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
end
local version = redis.call('GET', KEYS[1])
local key = ARGV[1] .. version .. ARGV[2]
local value = redis.call('GET', key)
if value then return {version, 1, value} end
local lock = key .. ARGV[3]
if redis.call('SET', lock, ARGV[4], 'NX', 'PX', ARGV[5]) then return {version, 0, 1} end
if redis.call('GET', lock) == ARGV[4] then return {version, 0, 1} end
return {version, 0, 0}
"""
# KEYS: the entry, its lock; ARGV: value, PX, lock token.
_SET_AND_RELEASE_LUA = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
return 1
"""


class RedisBackend(CacheBackend):
    """The cache's view of the app's shared :class:`ResilientRedis`: its failures become cache misses.

    Timeouts, the fail-fast backoff and the degraded/recovered log live in the shared client
    (one Redis, one health, whichever layer calls it); this class only speaks the cache contract
    and translates :class:`RedisUnavailableError` into ``CacheUnavailableError`` at its boundary.
    ``ping`` always probes, so readiness sees the truth and a successful probe ends the backoff.
    """

    name = "redis"

    def __init__(self, redis: ResilientRedis) -> None:
        self._redis = redis
        self._version_script = redis.client.register_script(_VERSION_LUA)
        self._refresh_script = redis.client.register_script(_REFRESH_LUA)
        self._release_script = redis.client.register_script(_RELEASE_LUA)
        self._get_or_lock_script = redis.client.register_script(_GET_OR_LOCK_LUA)
        self._set_and_release_script = redis.client.register_script(_SET_AND_RELEASE_LUA)
        self._lookup_versioned_script = redis.client.register_script(_LOOKUP_VERSIONED_LUA)

    @property
    def redis(self) -> ResilientRedis:
        return self._redis

    async def run(self, op: str, call: Callable[[Redis], Awaitable[T]], *, probe: bool = False) -> T:
        """One Redis call for the cache (the semantic index uses it too): any failure is a cache error."""
        try:
            return await self._redis.run(f"cache {op}", call, probe=probe)
        except RedisUnavailableError as exc:
            raise CacheUnavailableError(exc.detail) from exc

    async def get(self, key: str) -> bytes | None:
        value = await self.run("get", lambda client: client.get(key))
        return value.encode() if isinstance(value, str) else value

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        px = _ttl_ms(ttl_s)
        await self.run("set", lambda client: client.set(key, value, px=px))

    async def incr_version(self, key: str, *, insist: bool = False) -> int:
        def bump(_: Redis) -> Awaitable[Any]:
            return self._version_script(keys=[key], args=["1"])

        if not insist:
            return int(await self.run("incr_version", bump))
        try:  # past the backoff: the failure it remembers may be a connection that died with an old Redis
            return int(await self.run("incr_version", bump, probe=True))
        except CacheUnavailableError:  # that dead pooled connection is gone now; a fresh one decides
            return int(await self.run("incr_version", bump, probe=True))

    async def get_version(self, key: str) -> int:
        return int(await self.run("get_version", lambda _: self._version_script(keys=[key], args=["0"])))

    async def acquire_lock(self, key: str, token: str, ttl_s: float) -> bool:
        px = _ttl_ms(ttl_s)
        return bool(await self.run("lock", lambda client: client.set(key, token, px=px, nx=True)))

    async def refresh_lock(self, key: str, token: str, ttl_s: float) -> bool:
        px = _ttl_ms(ttl_s)
        return bool(await self.run("refresh_lock", lambda _: self._refresh_script(keys=[key], args=[token, px])))

    async def release_lock(self, key: str, token: str) -> bool:
        return bool(await self.run("unlock", lambda _: self._release_script(keys=[key], args=[token])))

    async def get_or_lock(self, key: str, lock: str, token: str, ttl_s: float) -> tuple[bytes | None, bool]:
        px = _ttl_ms(ttl_s)
        found, second = await self.run(
            "get_or_lock", lambda _: self._get_or_lock_script(keys=[key, lock], args=[token, px])
        )
        if int(found):
            return (second.encode() if isinstance(second, str) else second), False
        return None, bool(int(second))

    async def lookup_versioned(
        self, version_key: str, key: tuple[str, str], token: str, ttl_s: float
    ) -> tuple[int, bytes | None, bool]:
        px = _ttl_ms(ttl_s)
        args: list[str | int] = [key[0], key[1], LOCK_SUFFIX, token, px]
        current, found, second = await self.run(
            "lookup", lambda _: self._lookup_versioned_script(keys=[version_key], args=args)
        )
        if int(found):
            return int(current), (second.encode() if isinstance(second, str) else second), False
        return int(current), None, bool(int(second))

    async def set_and_release(self, key: str, value: bytes, ttl_s: float, lock: str, token: str) -> None:
        px = _ttl_ms(ttl_s)
        await self.run(
            "set_and_release", lambda _: self._set_and_release_script(keys=[key, lock], args=[value, px, token])
        )

    async def ping(self) -> None:
        await self.run("ping", lambda client: client.ping(), probe=True)
