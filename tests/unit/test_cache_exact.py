"""The response cache and stampede protection over the in-process backend (no Redis needed)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest

from gateway.cache.backend import CacheUnavailableError, MemoryBackend
from gateway.cache.exact import ExactCache
from gateway.cache.keys import lock_key
from gateway.cache.single_flight import SingleFlight
from gateway.cache.versions import KnowledgeVersions
from gateway.query.schemas import QueryResponse
from gateway.settings import CacheSettings
from pipelines.shared.visibility import Visibility
from tests.scripted import CountedCompute, query_response


class FlakyMemory(MemoryBackend):
    """Fails every call while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def _check(self, op: str) -> None:
        if self.down:
            raise CacheUnavailableError(f"cache {op} failed: connection refused")

    async def get(self, key: str) -> bytes | None:
        self._check("get")
        return await super().get(key)

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        self._check("set")
        await super().set(key, value, ttl_s)

    async def get_version(self, key: str) -> int:
        self._check("get_version")
        return await super().get_version(key)

    async def incr_version(self, key: str, *, insist: bool = False) -> int:
        self._check("incr_version")
        return await super().incr_version(key, insist=insist)

    async def acquire_lock(self, key: str, token: str, ttl_s: float) -> bool:
        self._check("lock")
        return await super().acquire_lock(key, token, ttl_s)


async def nothing() -> str | None:
    """A lookup that never finds the value (nobody else stores it)."""
    return None


Compute = Callable[[], Awaitable[str]]


def returning(value: str) -> Compute:
    async def compute() -> str:
        return value

    return compute


def make_cache(
    backend: MemoryBackend, settings: CacheSettings | None = None, **kwargs: Any
) -> ExactCache[QueryResponse]:
    settings = settings or CacheSettings(prefix="t")
    return ExactCache(settings, backend, KnowledgeVersions(backend, prefix=settings.prefix), QueryResponse, **kwargs)


async def test_a_miss_computes_and_stores_then_the_same_question_hits() -> None:
    cache = make_cache(MemoryBackend())
    compute = CountedCompute()
    first = await cache.get_or_compute(
        tenant="acme", route="auto", query="What is X?", compute=compute, visibility=Visibility.everything()
    )
    await cache.drain()  # the answer went before its store: wait for that
    second = await cache.get_or_compute(
        tenant="acme", route="auto", query="  what is x? ", compute=compute, visibility=Visibility.everything()
    )
    assert (first.source, first.cached, second.source, second.cached) == ("computed", False, "hit", True)
    assert second.value == first.value  # the full response round-trips through JSON
    assert compute.calls == 1
    assert (cache.stats.hits, cache.stats.misses, cache.stats.stores) == (1, 1, 1)


class SlowStore(MemoryBackend):
    """A backend whose stores wait until the test lets them go, as a slow Redis round trip would."""

    def __init__(self) -> None:
        super().__init__()
        self.let_go = asyncio.Event()

    async def set_and_release(self, key: str, value: bytes, ttl_s: float, lock: str, token: str) -> None:
        await self.let_go.wait()
        await super().set_and_release(key, value, ttl_s, lock, token)


async def test_the_answer_goes_before_its_store_and_a_repeat_meanwhile_shares_it() -> None:
    """The store (a Redis round trip) is off the miss's path: the caller has its answer while the store is still
    under way, and the same question asked meanwhile is served that answer instead of waiting for the store or
    computing again."""
    backend = SlowStore()
    cache = make_cache(backend)
    compute = CountedCompute()
    first = await asyncio.wait_for(
        cache.get_or_compute(
            tenant="acme", route="auto", query="What is X?", compute=compute, visibility=Visibility.everything()
        ),
        5.0,
    )
    assert first.source == "computed"
    assert cache.stats.stores == 0  # answered; not stored yet
    assert cache.storing == 1
    second = await cache.get_or_compute(
        tenant="acme", route="auto", query="What is X?", compute=compute, visibility=Visibility.everything()
    )
    assert (second.source, second.cached, second.value) == ("coalesced", True, first.value)
    assert compute.calls == 1
    backend.let_go.set()
    await cache.drain()
    assert (cache.stats.stores, cache.storing) == (1, 0)
    third = await cache.get_or_compute(
        tenant="acme", route="auto", query="What is X?", compute=compute, visibility=Visibility.everything()
    )
    assert (third.source, compute.calls) == ("hit", 1)


async def test_drain_waits_for_a_computation_whose_caller_left_and_its_store() -> None:
    """A computation goes on when its caller leaves (a client disconnect), and its store follows it: the shutdown's
    drain waits for both, so the store never meets a closed backend."""
    cache = make_cache(MemoryBackend())
    release = asyncio.Event()

    async def compute() -> QueryResponse:
        await release.wait()
        return query_response("late")

    caller = asyncio.ensure_future(
        cache.get_or_compute(
            tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
        )
    )
    await asyncio.sleep(0.01)
    caller.cancel()
    draining = asyncio.ensure_future(cache.drain())
    await asyncio.sleep(0.01)
    assert not draining.done()  # the computation still runs
    release.set()
    await asyncio.wait_for(draining, 5)
    assert cache.stats.stores == 1
    assert cache.storing == 0


async def test_get_and_set_by_key() -> None:
    cache = make_cache(MemoryBackend())
    key = await cache.key_for("acme", "auto", "q", visibility=Visibility.everything())
    assert key is not None
    assert await cache.get(key) is None
    assert await cache.set(key, query_response("a"))
    assert await cache.get(key) == query_response("a")


async def test_tenants_never_share_entries() -> None:
    cache = make_cache(MemoryBackend())
    acme = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=CountedCompute("acme"), visibility=Visibility.everything()
    )
    globex = await cache.get_or_compute(
        tenant="globex", route="auto", query="q", compute=CountedCompute("globex"), visibility=Visibility.everything()
    )
    assert acme.key != globex.key
    assert (acme.source, globex.source) == ("computed", "computed")
    again = await cache.get_or_compute(
        tenant="globex", route="auto", query="q", compute=CountedCompute("never"), visibility=Visibility.everything()
    )
    assert again.value.answer == "globex #1"


async def test_a_version_bump_makes_earlier_answers_unreachable() -> None:
    backend = MemoryBackend()
    versions = KnowledgeVersions(backend, prefix="t")
    cache = ExactCache(CacheSettings(prefix="t"), backend, versions, QueryResponse)
    compute = CountedCompute()
    before = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    await versions.bump("acme")
    after = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    assert (after.source, after.value.answer, compute.calls) == ("computed", "computed #2", 2)
    assert after.key != before.key
    await cache.drain()  # answers are stored after they are served
    assert await cache.get(before.key or "") is not None  # still stored, just never looked up again


async def test_options_that_change_the_work_are_part_of_the_key() -> None:
    cache = make_cache(MemoryBackend())
    compute = CountedCompute()
    await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, params={"top_k": 4}, visibility=Visibility.everything()
    )
    other = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, params={"top_k": 8}, visibility=Visibility.everything()
    )
    assert other.source == "computed"


async def test_each_answering_route_has_its_own_ttl_and_zero_means_uncached() -> None:
    backend = MemoryBackend()
    cache = make_cache(
        backend, CacheSettings(prefix="t", route_ttls={"direct": 0, "multi_hop": 3600}, default_ttl_s=60)
    )
    for route in ("single_hop", "multi_hop", "direct"):
        await cache.get_or_compute(
            tenant="acme",
            route="auto",
            query=route,
            compute=CountedCompute(route=route),
            visibility=Visibility.everything(),
        )
    await cache.drain()  # answers are stored after they are served
    keys = {
        route: await cache.key_for("acme", "auto", route, visibility=Visibility.everything())
        for route in ("single_hop", "multi_hop", "direct")
    }
    assert backend.ttl_remaining(keys["single_hop"] or "") == pytest.approx(60, abs=1)
    assert backend.ttl_remaining(keys["multi_hop"] or "") == pytest.approx(3600, abs=1)
    assert await cache.get(keys["direct"] or "") is None
    assert cache.ttl_for("direct") == 0
    assert cache.ttl_for("unknown") == 60


async def test_a_predicate_can_refuse_values() -> None:
    cache = make_cache(MemoryBackend(), cacheable=lambda r: not r.abstained)
    key = await cache.key_for("acme", "auto", "q", visibility=Visibility.everything())
    assert key is not None
    assert not await cache.set(key, query_response("I don't know", abstained=True))
    assert await cache.get(key) is None


async def test_entries_that_no_longer_decode_are_misses(caplog: pytest.LogCaptureFixture) -> None:
    backend = MemoryBackend()
    cache = make_cache(backend)
    key = await cache.key_for("acme", "auto", "q", visibility=Visibility.everything())
    assert key is not None
    await backend.set(key, msgspec.json.encode({"answer": "old schema"}), 60)
    with caplog.at_level(logging.WARNING):
        assert await cache.get(key) is None
    assert cache.stats.decode_errors == 1
    assert "no longer decodes" in caplog.text


async def test_an_entry_that_no_longer_decodes_is_recomputed_under_the_lock_or_bypassed_when_that_fails() -> None:
    class NoLocks(MemoryBackend):
        async def acquire_lock(self, key: str, token: str, ttl_s: float) -> bool:
            raise CacheUnavailableError("cache lock failed: connection refused")

    for backend, source in ((MemoryBackend(), "computed"), (NoLocks(), "bypass")):
        cache = make_cache(backend)
        key = await cache.key_for("acme", "auto", "q", visibility=Visibility.everything())
        assert key is not None
        await backend.set(key, msgspec.json.encode({"answer": "old schema"}), 60)
        outcome = await cache.get_or_compute(
            tenant="acme", route="auto", query="q", compute=CountedCompute(), visibility=Visibility.everything()
        )
        assert outcome.source == source
        await cache.drain()
        stored = await cache.get(key)
        assert (stored is not None) == (source == "computed")  # a bypass leaves the old entry as it was


async def test_twenty_concurrent_identical_misses_compute_once() -> None:
    cache = make_cache(MemoryBackend())
    compute = CountedCompute(delay_s=0.1)
    outcomes = await asyncio.gather(
        *(
            cache.get_or_compute(
                tenant="acme", route="auto", query="Popular?", compute=compute, visibility=Visibility.everything()
            )
            for _ in range(20)
        )
    )
    assert compute.calls == 1
    assert {o.value.answer for o in outcomes} == {"computed #1"}
    assert sorted(o.source for o in outcomes) == ["coalesced"] * 19 + ["computed"]
    assert cache.stats.coalesced == 19
    await cache.drain()
    late = await cache.get_or_compute(
        tenant="acme", route="auto", query="popular?", compute=compute, visibility=Visibility.everything()
    )
    assert late.source == "hit"


async def test_a_question_asked_after_a_change_never_joins_a_computation_begun_before_it() -> None:
    """Joining an in-process computation comes after the request's own lookup, which reads the version."""
    backend = MemoryBackend()
    versions = KnowledgeVersions(backend, prefix="t")
    cache = ExactCache(CacheSettings(prefix="t"), backend, versions, QueryResponse)
    compute = CountedCompute(delay_s=0.1)
    before = asyncio.create_task(
        cache.get_or_compute(
            tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
        )
    )
    joined = asyncio.create_task(
        cache.get_or_compute(
            tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
        )
    )
    await asyncio.sleep(0.02)  # both have looked up; the first is computing
    await versions.bump("acme")
    after = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    first, second = await before, await joined
    assert (first.source, second.source, after.source) == ("computed", "coalesced", "computed")
    assert compute.calls == 2
    assert first.value is second.value
    assert after.value is not first.value
    assert after.key != first.key


class SlowReplies(MemoryBackend):
    """A lookup runs at once (the lock is taken then); its reply reaches the caller after the next of ``delays``
    (after the last, at once)."""

    def __init__(self, *delays: float) -> None:
        super().__init__()
        self.delays = list(delays)

    async def lookup_versioned(
        self, version_key: str, key: tuple[str, str], token: str, ttl_s: float
    ) -> tuple[int, bytes | None, bool]:
        result = await super().lookup_versioned(version_key, key, token, ttl_s)
        await asyncio.sleep(self.delays.pop(0) if self.delays else 0.0)
        return result


async def test_a_caller_gone_while_its_lookup_took_the_lock_still_computes_stores_and_unlocks() -> None:
    backend = SlowReplies(0.05)
    cache = make_cache(backend)
    compute = CountedCompute()
    asked = asyncio.create_task(
        cache.get_or_compute(
            tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
        )
    )
    await asyncio.sleep(0.01)  # the lock is taken; the reply is on its way
    asked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asked
    await asyncio.sleep(0.1)
    assert compute.calls == 1
    again = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    assert (again.source, compute.calls) == ("hit", 1)
    assert again.key is not None
    assert await backend.get(lock_key(again.key)) is None


async def test_a_bypass_is_computed_in_the_callers_task_so_a_caller_gone_cancels_it() -> None:
    """With the cache down there is nobody to share the work with: it is not kept running for a client that left."""
    backend = FlakyMemory()
    backend.down = True
    cache = make_cache(backend)
    cancelled = asyncio.Event()

    async def slow() -> QueryResponse:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return query_response("late", "direct")

    asked = asyncio.create_task(
        cache.get_or_compute(tenant="acme", route="auto", query="q", compute=slow, visibility=Visibility.everything())
    )
    await asyncio.sleep(0.02)
    asked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asked
    await asyncio.wait_for(cancelled.wait(), 1)
    assert cache.stats.bypassed == 1


async def test_a_request_whose_lookup_reply_came_first_joins_the_lock_takers_computation() -> None:
    """The lock taker's reply is read after the second request's: that one waits, then joins, and an answer that is
    not cached (nothing for the wait to find) is still computed once in this process."""
    backend = SlowReplies(0.03, 0.0)
    cache = make_cache(backend, poll_s=0.01, cacheable=lambda _: False)
    compute = CountedCompute(delay_s=0.1)
    taker = asyncio.create_task(
        cache.get_or_compute(
            tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
        )
    )
    await asyncio.sleep(0)
    waiter = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    first = await taker
    assert compute.calls == 1
    assert (first.source, waiter.source) == ("computed", "coalesced")
    assert waiter.value is first.value


async def test_a_failed_computation_reaches_every_waiter_and_is_not_cached() -> None:
    cache = make_cache(MemoryBackend())
    calls = 0

    async def failing() -> QueryResponse:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        raise RuntimeError("llm down")

    results = await asyncio.gather(
        *(
            cache.get_or_compute(
                tenant="acme", route="auto", query="q", compute=failing, visibility=Visibility.everything()
            )
            for _ in range(5)
        ),
        return_exceptions=True,
    )
    assert calls == 1
    assert all(isinstance(r, RuntimeError) for r in results)
    retry = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=CountedCompute(), visibility=Visibility.everything()
    )
    assert retry.source == "computed"


async def test_a_caller_that_goes_away_does_not_cancel_the_shared_work() -> None:
    cache = make_cache(MemoryBackend())
    compute = CountedCompute(delay_s=0.1)
    first = asyncio.create_task(
        cache.get_or_compute(
            tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
        )
    )
    await asyncio.sleep(0.01)
    second = asyncio.create_task(
        cache.get_or_compute(
            tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
        )
    )
    await asyncio.sleep(0.01)
    first.cancel()
    outcome = await second
    assert (outcome.source, compute.calls) == ("coalesced", 1)
    await cache.drain()
    assert (
        await cache.get_or_compute(
            tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
        )
    ).source == "hit"


async def test_a_failing_cache_degrades_to_computing_and_recovers_by_itself() -> None:
    backend = FlakyMemory()
    cache = make_cache(backend)
    compute = CountedCompute()
    await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    await cache.drain()  # stored after it was served, before the cache goes down
    backend.down = True
    degraded = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    assert (degraded.source, degraded.cached, compute.calls) == ("bypass", False, 2)
    assert cache.stats.errors == 1
    backend.down = False
    recovered = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    assert (recovered.source, recovered.value.answer) == ("hit", "computed #1")


async def test_get_and_set_never_raise_for_cache_failures() -> None:
    backend = FlakyMemory()
    cache = make_cache(backend)
    key = await cache.key_for("acme", "auto", "q", visibility=Visibility.everything())
    assert key is not None
    backend.down = True
    assert await cache.get(key) is None
    assert not await cache.set(key, query_response("a"))
    assert await cache.key_for("acme", "auto", "q", visibility=Visibility.everything()) is None
    assert cache.errors == 3


async def test_single_flight_shares_only_concurrent_work() -> None:
    flight: SingleFlight[int] = SingleFlight()
    calls = 0

    async def work() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.02)
        return calls

    results = await asyncio.gather(flight.run("k", work), flight.run("k", work), flight.run("other", work))
    assert [shared for _, shared in results] == [False, True, False]
    assert results[0][0] == results[1][0]
    assert not flight.in_flight("k")
    assert (await flight.run("k", work))[0] == 3


async def test_single_flight_runs_the_first_callers_work_in_its_own_task_when_asked_and_shares_it() -> None:
    flight: SingleFlight[int] = SingleFlight()
    ran_in: list[asyncio.Task[Any] | None] = []

    async def work() -> int:
        ran_in.append(asyncio.current_task())
        await asyncio.sleep(0.02)
        return 7

    async def first() -> tuple[int, bool]:
        return await flight.run_here("k", work)

    owner = asyncio.ensure_future(first())
    await asyncio.sleep(0)
    joiner = asyncio.ensure_future(flight.run_here("k", work))
    leaver = asyncio.ensure_future(flight.run_here("k", work))
    await asyncio.sleep(0)
    leaver.cancel()  # a joiner that goes away takes only its own wait with it
    assert await owner == (7, False)
    assert await joiner == (7, True)
    assert leaver.cancelled()
    assert ran_in == [owner]  # one execution, in the first caller's task: no task of the flight's own
    assert not flight.in_flight("k")
