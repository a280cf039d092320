"""The cache against the real Redis: hits, tenant isolation, invalidation, TTLs, stampedes, versions.

Every test writes under its own key prefix in DB 15 and deletes only that prefix afterwards.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from redis.asyncio import Redis

from gateway.cache.backend import RedisBackend
from gateway.cache.embeddings import CachedEmbeddings
from gateway.cache.exact import ExactCache
from gateway.cache.keys import embedding_key, exact_key, exact_key_parts, lock_key, version_key
from gateway.cache.versions import KnowledgeVersions
from gateway.providers.redis import ResilientRedis
from gateway.query.schemas import QueryResponse
from gateway.settings import CacheSettings
from pipelines.shared.visibility import Visibility
from tests.integration.conftest import REDIS_TEST_URL
from tests.scripted import CountedCompute, query_response

pytestmark = pytest.mark.redis


def make_cache(
    backend: RedisBackend, prefix: str, settings: CacheSettings | None = None, *, poll_s: float = 0.05
) -> ExactCache[QueryResponse]:
    settings = settings or CacheSettings(prefix=prefix)
    return ExactCache(
        settings, backend, KnowledgeVersions(backend, prefix=settings.prefix), QueryResponse, poll_s=poll_s
    )


async def test_miss_then_hit(backend: RedisBackend, prefix: str, redis: Redis) -> None:
    cache = make_cache(backend, prefix)
    compute = CountedCompute()
    miss = await cache.get_or_compute(
        tenant="acme", route="auto", query="Where is Osaka?", compute=compute, visibility=Visibility.everything()
    )
    await cache.drain()  # the answer went before its store
    hit = await cache.get_or_compute(
        tenant="acme", route="auto", query="where is  OSAKA?", compute=compute, visibility=Visibility.everything()
    )
    assert (miss.source, hit.source, compute.calls) == ("computed", "hit", 1)
    assert hit.value == miss.value
    assert miss.key is not None
    assert miss.key.startswith(f"{prefix}:q:acme:v")
    assert await redis.exists(miss.key) == 1
    assert await redis.exists(lock_key(miss.key)) == 0  # the stampede lock was released


async def test_same_question_two_tenants_two_entries(backend: RedisBackend, prefix: str, redis: Redis) -> None:
    cache = make_cache(backend, prefix)
    acme = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=CountedCompute("acme"), visibility=Visibility.everything()
    )
    globex = await cache.get_or_compute(
        tenant="globex", route="auto", query="q", compute=CountedCompute("globex"), visibility=Visibility.everything()
    )
    await cache.drain()
    assert acme.key is not None
    assert globex.key is not None
    assert acme.key != globex.key
    assert ":acme:" in acme.key
    assert ":globex:" in globex.key
    assert (await cache.get(acme.key), await cache.get(globex.key)) == (
        query_response("acme #1"),
        query_response("globex #1"),
    )
    raw = await redis.get(globex.key)
    assert raw is not None
    assert b"globex #1" in raw
    assert b"acme" not in raw


async def test_a_bump_means_the_old_entry_is_never_served(backend: RedisBackend, prefix: str) -> None:
    versions = KnowledgeVersions(backend, prefix=prefix)
    cache = ExactCache(CacheSettings(prefix=prefix), backend, versions, QueryResponse)
    other_replica = ExactCache(
        CacheSettings(prefix=prefix), backend, KnowledgeVersions(backend, prefix=prefix), QueryResponse
    )
    compute = CountedCompute()
    old = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    await versions.bump("acme")
    new = await other_replica.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    assert (new.source, new.value.answer) == ("computed", "computed #2")
    assert old.key != new.key
    globex = await cache.get_or_compute(
        tenant="globex", route="auto", query="q", compute=CountedCompute("g"), visibility=Visibility.everything()
    )
    await cache.drain()
    assert (
        await cache.get_or_compute(
            tenant="globex", route="auto", query="q", compute=compute, visibility=Visibility.everything()
        )
    ).source == "hit"
    assert globex.source == "computed"


async def test_ttl_per_answering_route(backend: RedisBackend, prefix: str, redis: Redis) -> None:
    cache = make_cache(
        backend, prefix, CacheSettings(prefix=prefix, route_ttls={"direct": 2, "multi_hop": 7}, default_ttl_s=4)
    )
    ttls = {}
    for route in ("direct", "multi_hop", "single_hop"):
        outcome = await cache.get_or_compute(
            tenant="acme",
            route="auto",
            query=route,
            compute=CountedCompute(route=route),
            visibility=Visibility.everything(),
        )
        assert outcome.key is not None
        await cache.drain()
        ttls[route] = await redis.pttl(outcome.key)
    assert 1_500 < ttls["direct"] <= 2_000
    assert 6_500 < ttls["multi_hop"] <= 7_000
    assert 3_500 < ttls["single_hop"] <= 4_000


async def test_twenty_concurrent_misses_compute_once(backend: RedisBackend, prefix: str) -> None:
    cache = make_cache(backend, prefix)
    compute = CountedCompute(delay_s=0.2)
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
    assert sum(o.cached for o in outcomes) == 19


async def test_concurrent_misses_on_two_replicas_compute_once(prefix: str) -> None:
    """Two caches with their own Redis clients stand for two gateway processes."""
    clients = [ResilientRedis.from_url(REDIS_TEST_URL, timeout_s=0.5) for _ in range(2)]
    caches = [make_cache(RedisBackend(c), prefix, poll_s=0.02) for c in clients]
    compute = CountedCompute(delay_s=0.3)
    try:
        outcomes = await asyncio.gather(
            *(
                caches[i % 2].get_or_compute(
                    tenant="acme", route="auto", query="Popular?", compute=compute, visibility=Visibility.everything()
                )
                for i in range(20)
            )
        )
    finally:
        for c in clients:
            await c.aclose()
    assert compute.calls == 1
    assert {o.value.answer for o in outcomes} == {"computed #1"}
    assert sorted(o.source for o in outcomes).count("computed") == 1


async def test_a_dead_holders_lock_expires_and_another_replica_computes(
    backend: RedisBackend, prefix: str, redis: Redis
) -> None:
    cache = make_cache(backend, prefix, poll_s=0.02)
    key = await cache.key_for("acme", "auto", "q", visibility=Visibility.everything())
    assert key is not None
    await redis.set(lock_key(key), "a replica that crashed", px=300)
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome = await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=CountedCompute(), visibility=Visibility.everything()
    )
    assert outcome.source == "computed"
    assert 0.25 <= loop.time() - started < 2.0


async def test_versions_are_atomic_counters_seeded_from_the_server_clock(
    backend: RedisBackend, prefix: str, redis: Redis
) -> None:
    versions = KnowledgeVersions(backend, prefix=prefix)
    seconds, micros = await redis.time()
    first = await versions.current("acme")
    assert abs(first - (seconds * 1000 + micros // 1000)) < 5_000
    bumps = await asyncio.gather(*(versions.bump("acme") for _ in range(10)))
    assert sorted(b for b in bumps if b is not None) == list(range(first + 1, first + 11))
    assert await versions.current("acme") == first + 10
    await redis.delete(version_key(prefix, "acme"))  # evicted, or Redis restarted without its data
    await asyncio.sleep(0.02)
    assert await versions.current("acme") > first + 10  # never back to a version used before


async def test_query_vectors_are_cached_as_float32(backend: RedisBackend, prefix: str, redis: Redis) -> None:
    class Fixed(Embeddings):
        dimensions = 3
        calls = 0

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [self.embed_query(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            self.calls += 1
            return [0.25, -1.5, 3.0]

    inner = Fixed()
    cached = CachedEmbeddings(inner, backend, model="fixed-3", prefix=prefix, ttl_s=30)
    assert await cached.aembed_query("q") == [0.25, -1.5, 3.0]
    assert await cached.aembed_query("q") == [0.25, -1.5, 3.0]
    assert inner.calls == 1
    key = embedding_key(prefix, "fixed-3", "q")
    assert await redis.get(key) == np.asarray([0.25, -1.5, 3.0], dtype="<f4").tobytes()
    assert 29_000 < await redis.pttl(key) <= 30_000


async def test_ping(backend: RedisBackend) -> None:
    await backend.ping()
    assert backend.redis.available


async def test_the_first_look_and_the_lock_are_one_script_and_so_are_the_store_and_release(
    backend: RedisBackend, prefix: str, redis: Redis
) -> None:
    """A miss takes the lock (never over a value, never someone else's); the store drops only its own lock."""
    key, lock = f"{prefix}:entry", lock_key(f"{prefix}:entry")
    assert await backend.get_or_lock(key, lock, "me", 5) == (None, True)
    assert await backend.get_or_lock(key, lock, "you", 5) == (None, False)  # mine: not taken over
    await backend.set_and_release(key, b"answer", 60, lock, "you")  # not the owner: stores, keeps my lock
    assert await redis.get(lock) == b"me"
    await backend.set_and_release(key, b"answer", 60, lock, "me")
    assert await redis.get(lock) is None
    assert 0 < await redis.pttl(key) <= 60_000
    assert await backend.get_or_lock(key, lock, "you", 5) == (b"answer", False)
    assert await redis.get(lock) is None  # a hit takes no lock


class CountingRedis(ResilientRedis):
    """The shared client, counting its calls: each ``run`` is one round trip (a command or a script)."""

    calls: list[str]

    async def run(self, op: str, call: Any, *, timeout_s: float | None = None, probe: bool = False) -> Any:
        self.calls.append(op)
        return await super().run(op, call, timeout_s=timeout_s, probe=probe)


async def test_a_miss_costs_two_round_trips_and_a_hit_one(prefix: str) -> None:
    """The knowledge version is read in the lookup's script; a request that has read it already looks up alone."""
    counting = CountingRedis(Redis.from_url(REDIS_TEST_URL), timeout_s=0.5)
    counting.calls = []
    try:
        cache = make_cache(RedisBackend(counting), prefix)
        compute = CountedCompute()
        await cache.get_or_compute(
            tenant="acme", route="auto", query="Where is Kyoto?", compute=compute, visibility=Visibility.everything()
        )
        await cache.drain()  # the store, after the answer
        miss, counting.calls = counting.calls, []
        await cache.get_or_compute(
            tenant="acme", route="auto", query="Where is Kyoto?", compute=compute, visibility=Visibility.everything()
        )
        hit = counting.calls
    finally:
        await counting.aclose()
    assert miss == ["cache lookup", "cache set_and_release"]
    assert hit == ["cache lookup"]
    assert compute.calls == 1


async def test_a_request_that_read_the_version_looks_up_the_entry_alone(prefix: str) -> None:
    counting = CountingRedis(Redis.from_url(REDIS_TEST_URL), timeout_s=0.5)
    counting.calls = []
    try:
        backend = RedisBackend(counting)
        versions = KnowledgeVersions(backend, prefix=prefix)
        cache = make_cache(backend, prefix)
        compute = CountedCompute()
        with KnowledgeVersions.snapshot():
            await versions.current("acme")  # e.g. the router's probe, had it run first
            await cache.get_or_compute(
                tenant="acme", route="auto", query="Where is Nara?", compute=compute, visibility=Visibility.everything()
            )
        await cache.drain()  # the answer is stored after it is served
    finally:
        await counting.aclose()
    assert counting.calls == ["cache get_version", "cache get_or_lock", "cache set_and_release"]


async def test_a_lookup_retried_after_its_reply_was_lost_holds_its_own_lock(backend: RedisBackend, prefix: str) -> None:
    """A retry runs the script again over the lock the first run took: still ours, not someone else's to wait for."""
    head_tail = exact_key_parts(prefix, "acme", "auto", "Where is Osaka?", visibility="all")
    first = await backend.lookup_versioned(version_key(prefix, "acme"), head_tail, "me", 5)
    again = await backend.lookup_versioned(version_key(prefix, "acme"), head_tail, "me", 5)
    other = await backend.lookup_versioned(version_key(prefix, "acme"), head_tail, "you", 5)
    assert (first[1:], again[1:], other[1:]) == ((None, True), (None, True), (None, False))
    key, lock = f"{prefix}:entry", lock_key(f"{prefix}:entry")
    assert await backend.get_or_lock(key, lock, "me", 5) == (None, True)
    assert await backend.get_or_lock(key, lock, "me", 5) == (None, True)


async def test_the_lookup_script_builds_the_key_exact_key_builds(
    backend: RedisBackend, prefix: str, redis: Redis
) -> None:
    """Redis seeds a missing version from its clock and puts it between the key's head and tail, as ``exact_key``."""
    head, tail = exact_key_parts(prefix, "acme", "auto", "Where is Kyoto?", {"top_k": 3}, visibility="all")
    seconds, _ = await redis.time()
    version, value, held = await backend.lookup_versioned(version_key(prefix, "acme"), (head, tail), "me", 5)
    assert (value, held) == (None, True)
    assert abs(version - seconds * 1000) < 5_000
    key = exact_key(prefix, "acme", version, "auto", "Where is Kyoto?", {"top_k": 3}, visibility="all")
    assert await redis.get(lock_key(key)) == b"me"
    await backend.set_and_release(key, b"answer", 60, lock_key(key), "me")
    assert await backend.lookup_versioned(version_key(prefix, "acme"), (head, tail), "you", 5) == (
        version,
        b"answer",
        False,
    )
    await redis.incr(version_key(prefix, "acme"))  # a knowledge change: the same question is a miss again
    assert await backend.lookup_versioned(version_key(prefix, "acme"), (head, tail), "you", 5) == (
        version + 1,
        None,
        True,
    )
