"""The in-process backend (LRU, TTLs, versions, locks) and knowledge versions over a failing backend."""

from __future__ import annotations

import pytest

from gateway.cache.backend import CacheBackend, CacheUnavailableError, MemoryBackend
from gateway.cache.versions import KnowledgeVersions
from gateway.errors import ProviderError
from tests.unit.test_cache_exact import FlakyMemory


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.wall = 1_700_000_000_000

    def __call__(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return self.wall


class SwitchableBackend(FlakyMemory):
    """A memory backend that fails every call while ``down``, like Redis during an outage, and only
    version increments while ``writes_down``, like a read-only replica."""

    def __init__(self) -> None:
        super().__init__()
        self.writes_down = False

    async def incr_version(self, key: str, *, insist: bool = False) -> int:
        if self.writes_down:
            raise CacheUnavailableError("cache incr_version failed: READONLY")
        return await super().incr_version(key, insist=insist)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def memory(clock: FakeClock) -> MemoryBackend:
    return MemoryBackend(max_entries=3, max_bytes=100, clock=clock, wall_ms=clock.wall_ms)


def test_the_cache_error_is_a_provider_error_naming_the_cache() -> None:
    error = CacheUnavailableError("cache get timed out after 50 ms")
    assert isinstance(error, ProviderError)
    assert error.provider == "cache"
    assert error.extra == {"provider": "cache"}


def test_the_memory_backend_fulfils_the_contract() -> None:
    backend: CacheBackend = MemoryBackend()
    assert backend.name == "memory"


async def test_values_expire_after_their_ttl(memory: MemoryBackend, clock: FakeClock) -> None:
    await memory.set("a", b"1", 10)
    assert memory.ttl_remaining("a") == pytest.approx(10)
    clock.now += 9.9
    assert await memory.get("a") == b"1"
    clock.now += 0.2
    assert await memory.get("a") is None
    assert len(memory) == 0


async def test_least_recently_used_entries_go_first(memory: MemoryBackend) -> None:
    for key in ("a", "b", "c"):
        await memory.set(key, b"x", 60)
    assert await memory.get("a") == b"x"  # now "b" is the least recently used
    await memory.set("d", b"x", 60)
    assert [await memory.get(k) for k in ("a", "b", "c", "d")] == [b"x", None, b"x", b"x"]


async def test_total_bytes_are_bounded(memory: MemoryBackend) -> None:
    await memory.set("a", b"x" * 60, 60)
    await memory.set("b", b"y" * 30, 60)
    await memory.set("c", b"z" * 30, 60)  # 120 bytes > 100: "a" goes
    assert await memory.get("a") is None
    assert memory.size_bytes == 60
    await memory.set("huge", b"h" * 101, 60)  # larger than the cache: not stored, nothing evicted
    assert await memory.get("huge") is None
    assert await memory.get("b") == b"y" * 30


async def test_overwriting_replaces_value_and_ttl(memory: MemoryBackend, clock: FakeClock) -> None:
    await memory.set("a", b"old", 1)
    await memory.set("a", b"new!", 50)
    clock.now += 10
    assert await memory.get("a") == b"new!"
    assert memory.size_bytes == 4


async def test_non_positive_ttls_are_refused(memory: MemoryBackend) -> None:
    with pytest.raises(ValueError, match="positive"):
        await memory.set("a", b"1", 0)


async def test_versions_start_at_the_wall_clock_and_only_move_forward(memory: MemoryBackend, clock: FakeClock) -> None:
    assert await memory.get_version("v") == clock.wall
    assert await memory.incr_version("v") == clock.wall + 1
    assert await memory.incr_version("new") == clock.wall + 1  # a first bump also starts from the clock
    for key in ("x", "y", "z"):  # evict both version keys from the 3-entry LRU
        await memory.set(key, b"1", 60)
    clock.wall += 5_000
    assert await memory.get_version("v") == clock.wall  # lost: restarts above every earlier version


async def test_locks_have_one_owner_and_expire(memory: MemoryBackend, clock: FakeClock) -> None:
    assert await memory.acquire_lock("l", "me", 5)
    assert not await memory.acquire_lock("l", "you", 5)
    assert not await memory.refresh_lock("l", "you", 5)
    assert not await memory.release_lock("l", "you")
    clock.now += 4
    assert await memory.refresh_lock("l", "me", 5)
    clock.now += 4
    assert not await memory.acquire_lock("l", "you", 5)  # refreshed: still mine
    assert await memory.release_lock("l", "me")
    assert await memory.acquire_lock("l", "you", 5)
    clock.now += 6
    assert not await memory.release_lock("l", "you")  # expired
    assert await memory.acquire_lock("l", "me", 5)


async def test_a_bump_invalidates_the_tenant_only() -> None:
    versions = KnowledgeVersions(MemoryBackend(), prefix="t")
    acme, globex = await versions.current("acme"), await versions.current("globex")
    assert await versions.bump("acme") == acme + 1
    assert await versions.current("acme") == acme + 1
    assert await versions.current("globex") == globex


async def test_a_bump_that_cannot_land_is_retried_and_blocks_the_tenant_meanwhile() -> None:
    backend = SwitchableBackend()
    versions = KnowledgeVersions(backend, prefix="t")
    before = await versions.current("acme")
    backend.down = True
    assert await versions.bump("acme") is None  # never raises: the document write already happened
    assert versions.pending == {"acme"}
    assert versions.errors == 1
    backend.down = False
    assert await versions.current("globex") > 0  # retrying first applies the deferred bump
    assert versions.pending == frozenset()
    assert await versions.current("acme") == before + 1


async def test_a_tenant_with_a_pending_bump_gets_no_version_even_when_reads_work() -> None:
    backend = SwitchableBackend()
    versions = KnowledgeVersions(backend, prefix="t")
    before = await versions.current("acme")
    backend.writes_down = True
    assert await versions.bump("acme") is None
    with pytest.raises(CacheUnavailableError, match="invalidation"):
        await versions.current("acme")  # its old version would serve answers from before the change
    assert await versions.current("globex") > 0  # other tenants are unaffected
    assert versions.errors == 3  # the bump and two failed retries
    backend.writes_down = False
    assert await versions.current("acme") == before + 1
    assert not versions.pending
