"""The semantic response cache (opt-in): a paraphrase of a cached question is served the cached answer.

It runs on plain Redis 7 (no RediSearch): candidates come from random-hyperplane LSH. Each entry is
filed under one bucket per band (a sorted set of entry ids scored by expiry, capped, with a TTL);
a lookup reads the query's buckets, keeps the ids that collide in the most bands, fetches at most
``max_candidates`` stored vectors, re-checks the exact cosine in process and then asks the contrast
guard (:mod:`gateway.cache.contrast`) whether the best match really asks the same thing. Lookup cost
is therefore bounded whatever the cache size: ``bands`` bucket reads of ``bucket_cap`` ids, one
MGET of ``max_candidates`` vectors, one GET of the winning payload.

Every key carries the tenant and its knowledge version, the reader's visibility digest
(:meth:`pipelines.shared.visibility.Visibility.key`) and a scope digest of the request options, so tenants never
see each other's answers, a reader is never served a paraphrase's answer computed from documents hidden from them,
and a version bump makes every earlier entry unreachable.
Like the exact cache it never fails a request: any backend error or timeout is a miss.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

import msgspec
import numpy as np
from redis.asyncio import Redis

from gateway.cache.backend import CacheBackend, CacheUnavailableError, RedisBackend
from gateway.cache.contrast import Contrast, find_contrast
from gateway.cache.events import NO_CACHE_EVENTS, CacheEvents
from gateway.cache.keys import DEFAULT_PREFIX, normalize_query, sha256_hex
from gateway.providers import check_tenant
from gateway.settings import SemanticCacheSettings
from pipelines.shared import Visibility

logger = logging.getLogger(__name__)

Vector: TypeAlias = np.ndarray[Any, np.dtype[np.float32]]
EmbedFn: TypeAlias = Callable[[str], Awaitable[Any]]
Guard: TypeAlias = Callable[[str, str], Contrast | None]

DEFAULT_TTL_S = 3600.0
MAX_GUARD_CHECKS = 8  # candidates above the threshold that the guard may examine per lookup


class _Record(msgspec.Struct, array_like=True):
    query: str
    vector: bytes  # float32, L2-normalised


@dataclass(frozen=True, slots=True)
class QueryCentre:
    """Where the embedder's question vectors cluster (the calibration's mean unit question vector), which the LSH
    hashes from; ``vector`` None hashes from the origin. ``tag`` names it in bucket keys, so entries filed under
    another centre (another calibration) are never read as if filed under this one."""

    vector: Vector | None = None
    tag: str = "o"

    @classmethod
    def of(cls, values: tuple[float, ...] | list[float]) -> QueryCentre:
        if not values:
            return cls()
        vector = np.asarray(values, dtype=np.float32)
        return cls(vector, "c" + hashlib.sha256(vector.tobytes()).hexdigest()[:8])


@dataclass(frozen=True, slots=True)
class SimilarityThreshold:
    """The cosine a cached question must reach for its answer to be served, on the embedder's scale.

    Resolved at start-up (``SemanticCacheSettings.similarity_threshold``: the environment's, else the one the
    calibration fitted for the embedder in use), so no settings group holds it and there is no default.
    """

    cosine: float

    def __post_init__(self) -> None:
        if not -1.0 <= self.cosine <= 1.0:
            raise ValueError(f"a similarity threshold is a cosine, in [-1, 1]: {self.cosine}")


@dataclass(frozen=True, slots=True)
class SemanticHit:
    """What a lookup found: the stored payload, how close it was and to which question."""

    payload: bytes
    similarity: float
    matched_query: str
    entry_id: str


@dataclass(slots=True)
class SemanticStats:
    """Counters since start-up; the ``last_*`` fields show what one lookup cost (tests, debugging)."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    rejected: int = 0  # candidates above the threshold refused by the contrast guard
    stores: int = 0
    errors: int = 0  # backend or embedding failures, each degraded to a miss / no store
    candidates: int = 0  # vectors fetched over all lookups
    last_candidates: int = 0  # vectors fetched by the latest lookup (bounded by max_candidates)
    last_ids_seen: int = 0  # distinct entry ids in the latest lookup's buckets (bounded by bands * bucket_cap)
    last_rejection: Contrast | None = None  # why the latest lookup refused its best candidate, if it did


class HyperplaneLSH:
    """Signed random projections, ``bits_per_band`` bits per band: similar vectors share band values.

    Seeded, so every replica (and every restart) files a vector under the same buckets. With a ``centre`` (the
    embedder's mean question vector, fitted by the calibration) each plane passes through it instead of the origin:
    a vector's bits are the signs of its offset from the centre, so an embedder whose vectors fill a narrow cone
    still splits into buckets of a bounded size.
    """

    def __init__(self, dim: int, bands: int, bits_per_band: int, seed: int = 0, centre: Vector | None = None) -> None:
        if dim < 1 or bands < 1 or not 1 <= bits_per_band <= 62:
            raise ValueError("LSH needs dim >= 1, bands >= 1 and 1..62 bits per band")
        if centre is not None and centre.shape != (dim,):
            raise ValueError(f"the LSH centre has {centre.shape[0]} dimensions, the vectors {dim}")
        self.dim, self.bands, self.bits = dim, bands, bits_per_band
        self._planes = np.random.default_rng(seed).standard_normal((bands * bits_per_band, dim)).astype(np.float32)
        self._offsets = np.zeros(bands * bits_per_band, dtype=np.float32) if centre is None else self._planes @ centre
        self._weights = 1 << np.arange(bits_per_band, dtype=np.int64)

    def band_values(self, vector: Vector) -> list[int]:
        signs = (self._planes @ vector > self._offsets).reshape(self.bands, self.bits)
        return [int(v) for v in signs.astype(np.int64) @ self._weights]


def semantic_scope(route: str, params: Mapping[str, Any] | None = None) -> str:
    """The request options that change an answer, as one string: entries are shared only within a scope."""
    return route + ":" + json.dumps(dict(params or {}), sort_keys=True, separators=(",", ":"))


def _normalise(vector: Any) -> Vector:
    array = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


def _embedder(embed: Any) -> EmbedFn:
    """Accept an async ``str -> vector`` function, a ``USEEmbeddings`` or any LangChain ``Embeddings``."""
    if hasattr(embed, "embed_array"):

        async def use(text: str) -> Any:
            return embed.embed_array([text])[0]  # one query is ~3 ms: not worth a thread hop

        return use
    if hasattr(embed, "aembed_query"):
        return embed.aembed_query  # type: ignore[no-any-return]
    if callable(embed):
        return embed  # type: ignore[no-any-return]
    raise TypeError("embed must be an async function, USEEmbeddings or a LangChain Embeddings")


class _Index(Protocol):
    async def members(self, buckets: list[str], limit: int, now_ms: int) -> list[list[str]]: ...
    async def get_many(self, keys: list[str]) -> list[bytes | None]: ...
    async def put(self, values: dict[str, bytes], buckets: list[str], member: str, ttl_s: float, cap: int) -> None: ...


class _RedisIndex:
    """Buckets as sorted sets (member: entry id, score: expiry in ms), on the backend's shared Redis client."""

    def __init__(self, backend: RedisBackend) -> None:
        self._backend = backend

    async def members(self, buckets: list[str], limit: int, now_ms: int) -> list[list[str]]:
        async def call(client: Redis) -> Any:
            pipe = client.pipeline(transaction=False)
            for key in buckets:
                pipe.zrevrangebyscore(key, "+inf", now_ms, start=0, num=limit)
            return await pipe.execute()

        rows = await self._backend.run("semantic members", call)
        return [[m.decode() if isinstance(m, bytes) else str(m) for m in row] for row in rows]

    async def get_many(self, keys: list[str]) -> list[bytes | None]:
        if not keys:
            return []
        values = await self._backend.run("semantic mget", lambda client: client.mget(keys))
        return [value.encode() if isinstance(value, str) else value for value in values]

    async def put(self, values: dict[str, bytes], buckets: list[str], member: str, ttl_s: float, cap: int) -> None:
        ttl_ms = max(1, round(ttl_s * 1000))
        now_ms = _now_ms()

        async def call(client: Redis) -> Any:
            pipe = client.pipeline(transaction=False)
            for key, value in values.items():
                pipe.set(key, value, px=ttl_ms)
            for key in buckets:
                pipe.zadd(key, {member: now_ms + ttl_ms})
                pipe.zremrangebyscore(key, "-inf", now_ms)  # expired members
                pipe.zremrangebyrank(key, 0, -cap - 1)  # keep the `cap` latest-expiring
                pipe.pexpire(key, ttl_ms, nx=True)  # a new bucket gets a TTL…
                pipe.pexpire(key, ttl_ms, gt=True)  # …an old one lives as long as its longest-lived member
            return await pipe.execute()

        await self._backend.run("semantic store", call)


class _BackendIndex:
    """Any ``CacheBackend`` (the in-process ``MemoryBackend``): buckets as JSON lists of [id, expiry]."""

    def __init__(self, backend: CacheBackend) -> None:
        self._backend = backend

    async def _bucket(self, key: str, now_ms: int) -> list[list[Any]]:
        raw = await self._backend.get(key)
        rows: list[list[Any]] = json.loads(raw) if raw else []
        return [row for row in rows if row[1] > now_ms]

    async def members(self, buckets: list[str], limit: int, now_ms: int) -> list[list[str]]:
        return [[row[0] for row in (await self._bucket(key, now_ms))[:limit]] for key in buckets]

    async def get_many(self, keys: list[str]) -> list[bytes | None]:
        return [await self._backend.get(key) for key in keys]

    async def put(self, values: dict[str, bytes], buckets: list[str], member: str, ttl_s: float, cap: int) -> None:
        now_ms = _now_ms()
        for key, value in values.items():
            await self._backend.set(key, value, ttl_s)
        for key in buckets:  # read-modify-write is fine in one process; use Redis across replicas
            rows = [row for row in await self._bucket(key, now_ms) if row[0] != member]
            rows = sorted([[member, now_ms + round(ttl_s * 1000)], *rows], key=lambda r: -int(r[1]))[:cap]
            await self._backend.set(key, json.dumps(rows).encode(), (rows[0][1] - now_ms) / 1000)


class SemanticCache:
    """``lookup`` before computing an answer, ``store`` after: see the module docstring for the layout.

    ``settings`` gives the LSH shape (``bands``, ``bits_per_band``) and the lookup's bounds (``max_candidates``,
    ``bucket_cap``); its ``enabled`` and ``threshold`` are read where the cache is opened
    (:func:`gateway.cache.layer.open_semantic_cache`), which resolves ``threshold``. ``ttl_s`` is the default of
    :meth:`store`, which the query service always overrides with the exact cache's TTL for the route."""

    def __init__(
        self,
        settings: SemanticCacheSettings,
        store: CacheBackend,
        embed: Any = None,
        *,
        threshold: SimilarityThreshold,
        centre: QueryCentre | None = None,
        prefix: str = DEFAULT_PREFIX,
        ttl_s: float = DEFAULT_TTL_S,
        seed: int = 0,
        guard: Guard | None = find_contrast,
        events: CacheEvents = NO_CACHE_EVENTS,
    ) -> None:
        if ttl_s <= 0 or settings.max_candidates < 1 or settings.bucket_cap < 1:
            raise ValueError("invalid semantic cache settings")
        self._index: _Index
        if isinstance(store, RedisBackend):
            self._index = _RedisIndex(store)
        else:
            self._index = _BackendIndex(store)
        self._embed = _embedder(embed) if embed is not None else None
        self._prefix, self.threshold, self.ttl_s = prefix, threshold.cosine, ttl_s
        self._bands, self._bits, self._seed = settings.bands, settings.bits_per_band, seed
        self._centre = centre or QueryCentre()
        self._max_candidates, self._bucket_cap, self._guard = settings.max_candidates, settings.bucket_cap, guard
        self._lsh: dict[int, tuple[HyperplaneLSH, str]] = {}  # by dimensions: the hasher and its centre's tag
        self._events = events
        self.stats = SemanticStats()

    def _base(self, tenant: str, version: int, scope: str, visibility: Visibility) -> str:
        scope_part = sha256_hex(scope)[:12] if scope else "any"
        return f"{self._prefix}:sem:{check_tenant(tenant)}:v{version}:r{visibility.key()}:{scope_part}"

    def bucket_keys(
        self, tenant: str, version: int, vector: Vector, scope: str = "", *, visibility: Visibility
    ) -> list[str]:
        """One key per band: prefix, tenant, version, visibility, scope, LSH shape and the band's value."""
        hashed = self._lsh.get(vector.shape[0])
        if hashed is None:
            hashed = self._lsh[vector.shape[0]] = self._hasher(vector.shape[0])
        lsh, tag = hashed
        shape = f"h{self._bands}x{self._bits}d{lsh.dim}s{self._seed}{tag}"
        head = f"{self._base(tenant, version, scope, visibility)}:{shape}"
        width = (self._bits + 3) // 4
        return [f"{head}:b{band}:{value:0{width}x}" for band, value in enumerate(lsh.band_values(vector))]

    def _hasher(self, dim: int) -> tuple[HyperplaneLSH, str]:
        """The LSH for vectors of ``dim`` dimensions and the centre tag its keys carry: from the calibration's centre
        when it has as many dimensions, else from the origin (logged). A centre of another embedder cannot offset
        these vectors, and the cache must never fail a request over it."""
        centre = self._centre
        if centre.vector is not None and centre.vector.shape != (dim,):
            logger.warning(
                "semantic cache: the calibration's question centre has %d dimensions, the vectors %d: hashing from "
                "the origin (is the calibration for another embedder?)",
                centre.vector.shape[0],
                dim,
            )
            centre = QueryCentre()
        return HyperplaneLSH(dim, self._bands, self._bits, self._seed, centre.vector), centre.tag

    async def _vector(self, query: str, vector: Any) -> Vector | None:
        if vector is not None:
            return _normalise(vector)
        if self._embed is None:
            raise ValueError("pass the query vector or give the cache an embed function")
        try:
            return _normalise(await self._embed(query))
        except Exception as exc:  # the cache must never fail a request, not even through its embedder
            logger.warning("semantic cache skipped: embedding the query failed: %s", exc)
            self._record_error()
            return None

    async def lookup(
        self, tenant: str, version: int, query: str, vector: Any = None, *, visibility: Visibility, scope: str = ""
    ) -> SemanticHit | None:
        """The closest cached question above the threshold that the guard accepts, else None (also on errors).
        Only entries stored for the same ``visibility`` are candidates."""
        self.stats.lookups += 1
        self.stats.last_candidates = self.stats.last_ids_seen = 0
        self.stats.last_rejection = None
        with self._events.cache_lookup("semantic"):
            hit = await self._lookup(tenant, version, query, vector, scope, visibility)
            if hit is None:
                self.stats.misses += 1
            else:
                self.stats.hits += 1
            self._events.cache_result("semantic", "miss" if hit is None else "hit")
        return hit

    async def _lookup(
        self, tenant: str, version: int, query: str, vector: Any, scope: str, visibility: Visibility
    ) -> SemanticHit | None:
        qvec = await self._vector(query, vector)
        if qvec is None:
            return None
        base = self._base(tenant, version, scope, visibility)
        try:
            rows = await self._index.members(
                self.bucket_keys(tenant, version, qvec, scope, visibility=visibility), self._bucket_cap, _now_ms()
            )
            # Ids colliding in more bands are likelier to be close: fetch those first (ties: first seen, i.e.
            # latest-expiring in the first band that holds them).
            votes = Counter(entry for row in rows for entry in row)
            self.stats.last_ids_seen = len(votes)
            ids = [entry for entry, _ in votes.most_common(self._max_candidates)]
            raw = await self._index.get_many([f"{base}:e:{entry}" for entry in ids])
            self.stats.last_candidates = len(ids)
            self.stats.candidates += len(ids)
            scored = sorted(self._score(qvec, ids, raw), reverse=True)
            for similarity, entry, matched in scored[:MAX_GUARD_CHECKS]:
                if similarity < self.threshold:
                    break
                contrast = self._guard(query, matched) if self._guard else None
                if contrast is not None:
                    self.stats.rejected += 1
                    self.stats.last_rejection = contrast
                    logger.debug("semantic candidate %r rejected for %r: %s", matched, query, contrast.reason)
                    continue
                payload = (await self._index.get_many([f"{base}:r:{entry}"]))[0]
                if payload is not None:
                    return SemanticHit(payload, round(similarity, 4), matched, entry)
        except CacheUnavailableError:
            self._record_error()  # the shared Redis client logged the outage
        return None

    def _score(self, qvec: Vector, ids: list[str], raw: list[bytes | None]) -> list[tuple[float, str, str]]:
        scored = []
        for entry, blob in zip(ids, raw, strict=True):
            if blob is None:
                continue  # expired or evicted since it was filed
            try:
                record = msgspec.msgpack.decode(blob, type=_Record)
            except msgspec.DecodeError:
                continue
            stored = np.frombuffer(record.vector, dtype=np.float32)
            if stored.shape == qvec.shape:
                scored.append((float(stored @ qvec), entry, record.query))
        return scored

    async def store(
        self,
        tenant: str,
        version: int,
        query: str,
        vector: Any,
        payload: bytes,
        *,
        visibility: Visibility,
        scope: str = "",
        ttl_s: float | None = None,
    ) -> bool:
        """File ``payload`` (a serialised response, or an exact-cache key) under ``query``; False if it failed."""
        ttl = self.ttl_s if ttl_s is None else ttl_s
        if ttl <= 0:
            return False
        qvec = await self._vector(query, vector)
        if qvec is None:
            return False
        entry = sha256_hex(normalize_query(query))[:16]  # the same question replaces its entry
        base = self._base(tenant, version, scope, visibility)
        record = msgspec.msgpack.encode(_Record(query, qvec.astype(np.float32).tobytes()))
        values = {f"{base}:e:{entry}": record, f"{base}:r:{entry}": payload}
        try:
            buckets = self.bucket_keys(tenant, version, qvec, scope, visibility=visibility)
            await self._index.put(values, buckets, entry, ttl, self._bucket_cap)
        except CacheUnavailableError:
            self._record_error()
            return False
        self.stats.stores += 1
        return True

    def _record_error(self) -> None:
        self.stats.errors += 1
        self._events.cache_result("semantic", "error")


def _now_ms() -> int:
    return int(time.time() * 1000)
