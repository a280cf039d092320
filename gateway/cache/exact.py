"""The exact-match response cache: the same question, tenant, knowledge and options -> the same answer.

Stores the whole serialised response (msgspec JSON) under a key that embeds the tenant's knowledge
version, with a TTL per answering route (a multi-hop answer is worth keeping longer than a chat
reply). It never fails a request: a cache that is down or slow is computed past (a bypass, counted in
``stats``); the shared Redis client logs the outage once and its short backoff means recovery needs no restart.
A lookup that timed out after Redis ran it may leave its stampede lock behind: identical requests then wait for
it at most ``lock_ttl_s`` before computing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar
from uuid import uuid4

import msgspec

from gateway.cache.backend import CacheBackend, CacheUnavailableError
from gateway.cache.events import NO_CACHE_EVENTS, CacheEvents
from gateway.cache.keys import KeyParams, exact_key, exact_key_parts, lock_key, versioned
from gateway.cache.single_flight import StampedeGuard
from gateway.cache.versions import KnowledgeVersions
from gateway.settings import CacheSettings
from pipelines.shared import Visibility

R = TypeVar("R", bound=msgspec.Struct)
Outcome = Literal["hit", "computed", "coalesced", "bypass"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class CacheStats:
    """Counters since start-up; export them as metrics or read them in tests."""

    hits: int = 0
    misses: int = 0  # computed here after a miss
    coalesced: int = 0  # shared an in-process computation
    bypassed: int = 0  # computed without the cache (the lookup failed, or the tenant has an invalidation pending)
    stores: int = 0
    errors: int = 0  # cache operations that failed and degraded to a miss / no store
    decode_errors: int = 0  # entries that no longer decode (response schema changed): misses


@dataclass(frozen=True, slots=True)
class CacheOutcome(Generic[R]):
    value: R
    source: Outcome
    key: str | None

    @property
    def cached(self) -> bool:
        """True when this request did not pay for the computation."""
        return self.source in ("hit", "coalesced")


def _route_attribute(value: msgspec.Struct) -> str:
    route = getattr(value, "route", "")
    return route if isinstance(route, str) else ""


def _always(_: msgspec.Struct) -> bool:
    return True


class ExactCache(Generic[R]):
    """``get_or_compute`` for the request path; ``get``/``set``/``key_for`` for anything finer.

    From ``settings``: ``route_ttls`` maps the route that *answered* (``value.route`` by default) to seconds;
    routes it does not name get ``default_ttl_s``; a TTL of 0 means "do not cache this route". Keys start with
    ``prefix``, then ``namespace`` when given (a digest of the settings that shape answers: see
    :meth:`gateway.cache.layer.CacheLayer.answers`). ``cacheable`` can refuse individual values (e.g. abstentions).
    """

    def __init__(
        self,
        settings: CacheSettings,
        backend: CacheBackend,
        versions: KnowledgeVersions,
        response_type: type[R],
        *,
        namespace: str = "",
        route_of: Callable[[R], str] = _route_attribute,
        cacheable: Callable[[R], bool] = _always,
        poll_s: float = 0.05,
        events: CacheEvents = NO_CACHE_EVENTS,
    ) -> None:
        self._backend = backend
        self._versions = versions
        self._ttls = dict(settings.route_ttls)
        self._default_ttl_s = settings.default_ttl_s
        self._prefix = f"{settings.prefix}:{namespace}" if namespace else settings.prefix
        self._route_of = route_of
        self._cacheable = cacheable
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(response_type)
        self._guard: StampedeGuard[R] = StampedeGuard(
            backend,
            lock_ttl_s=settings.lock_ttl_s,
            max_wait_s=settings.max_wait_s,
            poll_s=poll_s,
            on_error=self._record_error,
        )
        self._events = events
        self._running: set[asyncio.Future[CacheOutcome[R] | None]] = set()
        self.stats = CacheStats()

    @property
    def errors(self) -> int:
        return self.stats.errors

    @property
    def backend(self) -> CacheBackend:
        return self._backend

    @property
    def storing(self) -> int:
        """Computed answers served and still being stored."""
        return self._guard.storing

    async def drain(self) -> None:
        """Waits for computed answers still being stored (they are stored after they are served), and for
        computations still running whose caller left (their store follows them): the app's shutdown runs it before
        closing the backend."""
        while self._running:
            await asyncio.wait(set(self._running))
        await self._guard.drain()

    def ttl_for(self, route: str) -> float:
        return self._ttls.get(route, self._default_ttl_s)

    async def key_for(
        self, tenant: str, route: str, query: str, params: KeyParams | None = None, *, visibility: Visibility
    ) -> str | None:
        """The key of this request, or None when the tenant's version is unavailable (bypass)."""
        try:
            version = await self._versions.current(tenant)
        except CacheUnavailableError as exc:
            self._record_error(exc)
            return None
        return exact_key(self._prefix, tenant, version, route, query, params, visibility=visibility.key())

    async def get(self, key: str) -> R | None:
        """A hit, or None on a miss *and* on any cache failure (counted, never raised)."""
        with self._events.cache_lookup("exact"):
            value = await self._fetch(key)
            if value is None:
                self.stats.misses += 1
            else:
                self.stats.hits += 1
            self._events.cache_result("exact", "miss" if value is None else "hit")
        return value

    async def set(self, key: str, value: R) -> bool:
        """Store ``value`` under its route's TTL; False when not cacheable or the cache failed."""
        ttl = self.ttl_for(self._route_of(value))
        if ttl <= 0 or not self._cacheable(value):
            return False
        try:
            await self._backend.set(key, self._encoder.encode(value), ttl)
        except CacheUnavailableError as exc:
            self._record_error(exc)
            return False
        self.stats.stores += 1
        return True

    async def get_or_compute(
        self,
        *,
        tenant: str,
        route: str,
        query: str,
        compute: Callable[[], Awaitable[R]],
        visibility: Visibility,
        params: KeyParams | None = None,
    ) -> CacheOutcome[R]:
        """Serve from the cache, or compute once for every concurrent identical miss and store.

        ``visibility`` is the reader's and part of the key, so both the entry and the single flight (in this
        process and across replicas, both keyed by it) are shared only by readers who see the same documents.

        The lookup reads the tenant's knowledge version, the entry keyed by it and, on a miss, takes the entry's
        stampede lock, all in one backend call (a hit is one round trip, a miss two with the store). A lookup that
        fails is served as a bypass: computed, not stored. Errors from ``compute`` propagate to every caller sharing
        it and are not cached.
        """
        # In a task of its own, which a caller that goes away (client disconnect) does not cancel: a lookup that took
        # the lock is followed by the computation and the store others wait for, not by a lock left to expire.
        work = asyncio.ensure_future(self._get_or_compute(tenant, route, query, compute, visibility, params))
        self._running.add(work)
        work.add_done_callback(self._settled)
        outcome = await asyncio.shield(work)
        if outcome is None:  # no cache to share the work with: computed here, so a caller that goes away cancels it
            self.stats.bypassed += 1
            return CacheOutcome(await compute(), "bypass", None)
        return outcome

    def _settled(self, work: asyncio.Future[CacheOutcome[R] | None]) -> None:
        self._running.discard(work)
        if not work.cancelled():
            work.exception()  # retrieved: no "never retrieved" warning when the caller left

    async def _get_or_compute(
        self,
        tenant: str,
        route: str,
        query: str,
        compute: Callable[[], Awaitable[R]],
        visibility: Visibility,
        params: KeyParams | None,
    ) -> CacheOutcome[R] | None:
        """The outcome, or None when the lookup failed (a bypass, which the caller computes)."""
        parts = exact_key_parts(self._prefix, tenant, route, query, params, visibility=visibility.key())
        token = uuid4().hex
        with self._events.cache_lookup("exact"):
            try:
                key, raw, held = await self._lookup(tenant, parts, token)
            except CacheUnavailableError as exc:
                self._record_error(exc)
                return None
            found = None if raw is None else self._decode(key, raw)
            if found is not None:
                self._events.cache_result("exact", "hit")  # on the lookup's span, as a hit is traced
        if raw is not None and found is None:  # an entry that no longer decodes: recomputed under the lock
            try:
                held = await self._backend.acquire_lock(lock_key(key), token, self._guard.lock_ttl_s)
            except CacheUnavailableError as exc:
                self._record_error(exc)
                return None  # the cache went down: a bypass, computed in the caller's task

        async def finish(value: R, lock: str | None, token: str) -> None:
            await self._store(key, value, lock, token)

        loaded = await self._guard.settle(key, (found, held), token, lambda: self._fetch(key), compute, finish)
        if loaded.source == "hit":
            self.stats.hits += 1
        elif loaded.source == "coalesced":
            self.stats.coalesced += 1
        else:
            self.stats.misses += 1
        # A request that shared another's computation did not pay for it: a hit, as in ``CacheOutcome.cached``.
        if found is None:
            self._events.cache_result("exact", "miss" if loaded.source == "computed" else "hit")
        return CacheOutcome(loaded.value, loaded.source, key)

    async def _lookup(self, tenant: str, parts: tuple[str, str], token: str) -> tuple[str, bytes | None, bool]:
        """The entry's key, its value, whether its lock was taken: one round trip that reads the version too, or,
        when this request has read the version already, the entry's look alone. Raises ``CacheUnavailableError``
        when the backend fails or the tenant has an invalidation not applied yet (a bypass)."""
        version = await self._versions.known(tenant)
        if version is None:
            version, raw, held = await self._backend.lookup_versioned(
                self._versions.key(tenant), parts, token, self._guard.lock_ttl_s
            )
            self._versions.read(tenant, version)
            return versioned(parts, version), raw, held
        key = versioned(parts, version)
        raw, held = await self._backend.get_or_lock(key, lock_key(key), token, self._guard.lock_ttl_s)
        return key, raw, held

    async def _store(self, key: str, value: R, lock: str | None, token: str) -> None:
        """``set`` for a computed value, releasing the stampede lock in the same call when one is held."""
        if lock is None:
            await self.set(key, value)
            return
        ttl = self.ttl_for(self._route_of(value))
        try:
            if ttl <= 0 or not self._cacheable(value):
                await self._backend.release_lock(lock, token)
                return
            await self._backend.set_and_release(key, self._encoder.encode(value), ttl, lock, token)
        except CacheUnavailableError as exc:
            self._record_error(exc)  # a lock left behind expires within its TTL
            return
        self.stats.stores += 1

    async def _fetch(self, key: str) -> R | None:
        try:
            raw = await self._backend.get(key)
        except CacheUnavailableError as exc:
            self._record_error(exc)
            return None
        return None if raw is None else self._decode(key, raw)

    def _decode(self, key: str, raw: bytes) -> R | None:
        try:
            return self._decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.stats.decode_errors += 1
            logger.warning("cache entry %s no longer decodes; treating it as a miss", key)
            return None

    def _record_error(self, exc: CacheUnavailableError) -> None:
        """Count a failure served as a miss; the backend's client logs outages (once, not per layer)."""
        self.stats.errors += 1
        self._events.cache_result("exact", "error")
        logger.debug("response cache miss on error: %s", exc.detail)
