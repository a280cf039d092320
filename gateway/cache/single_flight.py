"""Stampede protection: when many identical requests miss at once, one computes and all share it.

Two layers, because a popular question after an invalidation arrives at every replica at once:

* in-process: concurrent callers with the same key share one execution (Go's ``singleflight``);
* across replicas: the computing process holds a short Redis lock (SET NX PX, renewed while it
  works); other replicas poll the cache until the value appears, the lock disappears (its holder
  finished without storing, failed, or died and the lock expired) or a bounded wait runs out,
  and then compute themselves. The lock is an optimisation: any cache failure means "compute".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Literal, TypeVar

from gateway.cache.backend import CacheBackend, CacheUnavailableError
from gateway.cache.keys import lock_key

T = TypeVar("T")
Source = Literal["hit", "computed", "coalesced"]
# Stores a computed value and releases the lock (None: no lock held) for the token; never raises for the cache.
Finish = Callable[[T, str | None, str], Awaitable[None]]

logger = logging.getLogger(__name__)


class SingleFlight(Generic[T]):
    """Concurrent ``run`` calls with one key share one execution of the first caller's function.

    With :meth:`run` the function runs in its own task and each caller awaits it through ``asyncio.shield``: a caller
    that goes away (client disconnect) neither cancels the work the others wait for nor loses the value it would have
    stored. With :meth:`run_here` it runs in the first caller's task, for a caller no client cancels (it saves a task
    per miss). Only in-flight work is shared; nothing is remembered after it.
    """

    def __init__(self) -> None:
        self._flights: dict[str, asyncio.Future[T]] = {}
        self._held: dict[str, asyncio.Future[None]] = {}

    def in_flight(self, key: str) -> bool:
        return key in self._flights

    def hold(self, key: str, until: asyncio.Future[None]) -> None:
        """From inside ``key``'s running flight: once it has its value, keep it joinable until ``until`` is done (the
        value's store), so that an identical request meanwhile shares the value instead of waiting for the store."""
        self._held[key] = until

    async def run(self, key: str, fn: Callable[[], Coroutine[Any, Any, T]]) -> tuple[T, bool]:
        """The shared result, and whether this caller joined someone else's execution."""
        flight = self._flights.get(key)
        if flight is not None:
            return await asyncio.shield(flight), True
        task = asyncio.create_task(fn(), name=f"single-flight:{key}")
        self._fly(key, task)
        return await asyncio.shield(task), False

    async def run_here(self, key: str, fn: Callable[[], Coroutine[Any, Any, T]]) -> tuple[T, bool]:
        """:meth:`run`, with the first caller's function run in the caller's own task: for a caller whose task nobody
        cancels while others may have joined (the response cache's own task, ``ExactCache.get_or_compute``), since
        cancelling it cancels the work and its joiners get the cancellation."""
        flight = self._flights.get(key)
        if flight is not None:
            return await asyncio.shield(flight), True
        # The joiners' view of the work: a future its outcome is set on.
        here: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._fly(key, here)
        try:
            value = await fn()
        except asyncio.CancelledError:
            here.cancel()
            raise
        except BaseException as exc:
            here.set_exception(exc)
            raise
        here.set_result(value)
        return value, False

    def _fly(self, key: str, flight: asyncio.Future[T]) -> None:
        self._flights[key] = flight
        flight.add_done_callback(partial(self._finished, key))

    def _finished(self, key: str, flight: asyncio.Future[T]) -> None:
        # The outcome is retrieved either way: no "never retrieved" warning when every caller left.
        failed = flight.cancelled() or flight.exception() is not None
        held = self._held.pop(key, None)
        if held is not None and not held.done() and not failed:
            held.add_done_callback(lambda _: self._drop(key, flight))
            return
        self._drop(key, flight)

    def _drop(self, key: str, flight: asyncio.Future[T]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]


def _as_follower(source: Source, shared: bool) -> Source:
    """A value another caller's computation produced is reported as coalesced: this one did not pay for it."""
    return "coalesced" if shared and source == "computed" else source


@dataclass(frozen=True, slots=True)
class Loaded(Generic[T]):
    value: T
    source: Source


class StampedeGuard(Generic[T]):
    """Settles a cache key's miss so that concurrent misses, here and on other replicas, compute once.

    ``lookup`` reads the cache (None on a miss *or* a cache failure); ``compute`` computes and ``finish``
    stores, so that waiters find the value once the lock goes.
    """

    def __init__(
        self,
        backend: CacheBackend,
        *,
        lock_ttl_s: float = 5.0,
        max_wait_s: float = 30.0,
        poll_s: float = 0.05,
        on_error: Callable[[CacheUnavailableError], None] | None = None,
    ) -> None:
        if lock_ttl_s <= 0 or max_wait_s < 0 or poll_s <= 0:
            raise ValueError("lock TTL and poll interval must be positive, the wait non-negative")
        self._backend = backend
        self._lock_ttl_s = lock_ttl_s
        self._max_wait_s = max_wait_s
        self._poll_s = poll_s
        self._on_error = on_error
        self._flight: SingleFlight[tuple[T, Source]] = SingleFlight()
        self._storing: set[asyncio.Future[None]] = set()

    @property
    def lock_ttl_s(self) -> float:
        return self._lock_ttl_s

    @property
    def storing(self) -> int:
        """Stores of computed values still under way (the answers have gone already)."""
        return len(self._storing)

    async def drain(self) -> None:
        """Waits for the stores under way: before the backend closes (shutdown), and where a test reads the store."""
        while self._storing:
            await asyncio.wait(set(self._storing))

    async def settle(
        self,
        key: str,
        first: tuple[T | None, bool],
        token: str,
        lookup: Callable[[], Awaitable[T | None]],
        compute: Callable[[], Awaitable[T]],
        finish: Finish[T],
    ) -> Loaded[T]:
        """Load a value kept in the backend under ``key`` itself (the response cache), after the caller's first
        look: ``first`` is the value (None on a miss) and whether the look took ``key``'s lock for ``token``, in one
        backend call. The caller makes that call because the key is built from what it reads (the knowledge version
        comes back in the same round trip). A hit is served; the lock's taker computes, in this process's one flight
        of ``key``, and ``finish`` stores the value and releases the lock in one call; a miss that found the lock
        taken joins that flight when the taker is this process, else waits for the replica that holds it (one
        waiting flight per key here), then computes itself if the holder stored nothing. ``lookup`` is the plain
        read of such a wait. A hit costs the caller's one call, a miss two.

        Joining only after a look of one's own is what keeps the knowledge versions' guarantee: a request never
        shares a computation that began before a change it can see.

        The flight's work runs in the caller's task (:meth:`SingleFlight.run_here`), so that task must be one no
        client cancels: the response cache calls this from a task of its own (``ExactCache.get_or_compute``).
        """
        found, held = first
        if found is not None:
            return Loaded(found, "hit")
        if held or self._flight.in_flight(key):
            return Loaded(*await self._compute_or_join(key, token, held, compute, finish))
        (value, source), shared = await self._flight.run_here(
            f"{key}#wait", lambda: self._wait_or_compute(key, token, lookup, compute, finish)
        )
        return Loaded(value, _as_follower(source, shared))

    async def _compute_or_join(
        self, key: str, token: str, held: bool, compute: Callable[[], Awaitable[T]], finish: Finish[T]
    ) -> tuple[T, Source]:
        """Compute holding ``key``'s lock in this process's flight of ``key``, or join the one already running (whose
        lock is this process's; a lock of ours that a lapse let us take besides is released whatever happens)."""
        lock = lock_key(key)
        joining = self._flight.in_flight(key)
        try:
            (value, source), _ = await self._flight.run_here(
                key, lambda: self._compute_held(key, lock, token, compute, finish)
            )
        finally:
            if held and joining:  # not ours to finish: the running computation covers it
                await self._release(lock, token)
        return value, _as_follower(source, joining)

    async def _compute_held(
        self, key: str, lock: str, token: str, compute: Callable[[], Awaitable[T]], finish: Finish[T]
    ) -> tuple[T, Source]:
        """The value, as soon as it is computed: its store (which releases the lock) goes on after the answer.

        The store is a Redis round trip the client need not wait for, and nothing that needs it sooner waits for it:
        this process's identical requests join the flight, which stays joinable until the store is done; other
        replicas wait for the lock to go, which the store releases; the app drains stores under way before it closes
        the backend (:meth:`drain`).
        """
        try:
            async with self._renewing(lock, token):
                value = await compute()
        except BaseException:
            await self._release(lock, token)
            raise
        stored = asyncio.ensure_future(finish(value, lock, token))
        self._storing.add(stored)
        stored.add_done_callback(partial(self._stored, key))
        self._flight.hold(key, stored)
        return value, "computed"

    def _stored(self, key: str, stored: asyncio.Future[None]) -> None:
        self._storing.discard(stored)
        if not stored.cancelled() and (exc := stored.exception()) is not None:
            # ``finish`` handles the cache's own failures; anything else is a bug worth a trace, not a lost answer.
            logger.error("storing %s failed", key, exc_info=exc)

    async def _wait_or_compute(
        self,
        key: str,
        token: str,
        lookup: Callable[[], Awaitable[T | None]],
        compute: Callable[[], Awaitable[T]],
        finish: Finish[T],
    ) -> tuple[T, Source]:
        """Another replica holds the lock (or the entry no longer decodes and is computed again): wait for its value.

        A computation of ``key`` that starts in this process meanwhile (its lookup's reply was read after ours) is
        joined rather than repeated; when the holder goes without storing, this takes the lock and computes, in the
        flight of ``key``, so that identical requests arriving then share it.
        """
        found = await self._wait_for_holder(lock_key(key), lookup, until=lambda: self._flight.in_flight(key))
        if found is not None:
            return found, "hit"
        held = False
        if not self._flight.in_flight(key):
            try:
                held = await self._backend.acquire_lock(lock_key(key), token, self._lock_ttl_s)
            except CacheUnavailableError as exc:
                self._error(exc)
        if held or self._flight.in_flight(key):
            return await self._compute_or_join(key, token, held, compute, finish)
        value = await compute()  # another replica took the lock again, or the cache failed: compute, as before
        await finish(value, None, token)
        return value, "computed"

    async def _wait_for_holder(
        self, lock: str, lookup: Callable[[], Awaitable[T | None]], *, until: Callable[[], bool] = lambda: False
    ) -> T | None:
        """Poll until the holder's value appears; None means "compute it yourself" (or ``until`` became true)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_wait_s
        while loop.time() < deadline:
            await asyncio.sleep(self._poll_s)
            if until():
                return None
            found = await lookup()
            if found is not None:
                return found
            try:
                holder = await self._backend.get(lock)
            except CacheUnavailableError as exc:
                self._error(exc)
                return None
            if holder is None:
                # Released (stored, failed, or uncacheable) or expired (holder died): one last
                # look covers a value stored between our lookup and the lock check.
                return await lookup()
        logger.info("stampede wait for %s ran out after %.1f s; computing here", lock, self._max_wait_s)
        return None

    @asynccontextmanager
    async def _renewing(self, lock: str, token: str) -> AsyncIterator[None]:
        """Keep the lock short yet held for as long as the holder is alive and computing.

        The renewing task starts only once a renewal is due (a third of the TTL): most computations end
        before that, and a timer costs far less than a task started and cancelled around each of them.
        """
        loop = asyncio.get_running_loop()
        renewer: asyncio.Task[None] | None = None

        def start() -> None:
            nonlocal renewer
            renewer = asyncio.create_task(self._renew(lock, token), name=f"lock-renew:{lock}")

        due = loop.call_later(self._lock_ttl_s / 3, start)
        try:
            yield
        finally:
            due.cancel()
            if renewer is not None:
                renewer.cancel()
                await asyncio.wait({renewer})

    async def _renew(self, lock: str, token: str) -> None:
        """From the first renewal on: refresh, then wait a third of the TTL, until cancelled."""
        while True:
            try:
                if not await self._backend.refresh_lock(lock, token, self._lock_ttl_s):
                    return  # expired and maybe taken over: at worst another replica computes too
            except CacheUnavailableError as exc:
                self._error(exc)
            await asyncio.sleep(self._lock_ttl_s / 3)

    async def _release(self, lock: str, token: str) -> None:
        try:
            await self._backend.release_lock(lock, token)
        except CacheUnavailableError as exc:
            self._error(exc)  # the lock expires on its own within its TTL

    def _error(self, exc: CacheUnavailableError) -> None:
        if self._on_error is not None:
            self._on_error(exc)
