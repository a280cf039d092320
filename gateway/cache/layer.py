"""One call for the app lifespan: the backend and the versions, from which the answer caches and the embeddings
wrapper are made.

They must share one backend and one key prefix, or a version bump would not reach the responses it is meant to
invalidate; making them all from one layer makes that impossible to get wrong. The layer knows nothing of what an
answer is: the query service asks it for an exact cache of its own response type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import msgspec
from langchain_core.embeddings import Embeddings

from gateway.cache.backend import CacheBackend, MemoryBackend, RedisBackend
from gateway.cache.embeddings import DEFAULT_EMBEDDING_TTL_S, CachedEmbeddings
from gateway.cache.events import NO_CACHE_EVENTS, CacheEvents
from gateway.cache.exact import ExactCache
from gateway.cache.semantic import QueryCentre, SemanticCache, SimilarityThreshold
from gateway.cache.versions import KnowledgeVersions
from gateway.providers import ResilientRedis
from gateway.settings import LOCAL_EMBEDDING_PROVIDER, CacheSettings, SemanticCacheSettings
from routes.calibration import Calibration

# The byte bound of a process-local vector LRU, per entry: float32 vectors of up to 2,048 dimensions.
_MAX_VECTOR_BYTES = 2048 * 4

T = TypeVar("T", bound=msgspec.Struct)


@dataclass(frozen=True, slots=True)
class CacheLayer:
    settings: CacheSettings
    backend: CacheBackend
    versions: KnowledgeVersions
    events: CacheEvents = NO_CACHE_EVENTS

    @property
    def prefix(self) -> str:
        return self.settings.prefix

    def answers(
        self, response_type: type[T], *, namespace: str = "", cacheable: Callable[[T], bool] = lambda _value: True
    ) -> ExactCache[T]:
        """An exact cache of ``response_type`` values on the layer's backend, invalidated by its versions.

        ``namespace`` goes into response keys only: pass a fingerprint of the settings that shape answers (model,
        pipeline thresholds) so a deploy that changes them never serves answers made by the old ones, while version
        keys stay shared and a bump from any replica, old or new, still invalidates everything. ``cacheable`` can
        refuse individual values."""
        return ExactCache(
            self.settings,
            self.backend,
            self.versions,
            response_type,
            namespace=namespace,
            events=self.events,
            cacheable=cacheable,
        )

    def wrap_embeddings(
        self,
        inner: Embeddings,
        *,
        model: str,
        ttl_s: float = DEFAULT_EMBEDDING_TTL_S,
        process_entries: int | None = None,
    ) -> CachedEmbeddings:
        """Vectors in the layer's backend, where every replica finds what one computed, or with ``process_entries``
        in an LRU of that many of this process's own (``shares_embeddings`` decides which)."""
        backend = (
            self.backend
            if process_entries is None
            else MemoryBackend(process_entries, process_entries * _MAX_VECTOR_BYTES)
        )
        return CachedEmbeddings(inner, backend, model=model, ttl_s=ttl_s, prefix=self.prefix, events=self.events)


def shares_embeddings(settings: CacheSettings, provider: str) -> bool:
    """Whether query vectors go to the shared backend (Redis) or stay in the process that computed them.

    A shared entry costs every query a round trip to look for it and, on a miss, one to store it. That pays for
    itself when the embedding is a network call to a provider (tens of milliseconds, and billed), not for the
    local model: a query takes it ~2-3 ms of CPU, and two Redis round trips cost a third of that on every unique
    question (an ``auto`` miss went from five round trips to three), while vectors repeat mostly where
    the response cache already answers. So ``auto`` keeps local vectors in the process (a repeat on the same
    replica still skips the model) and shares remote ones.
    """
    if settings.embedding_store == "auto":
        return provider != LOCAL_EMBEDDING_PROVIDER
    return settings.embedding_store == "shared"


def open_cache(
    redis: ResilientRedis | None, settings: CacheSettings, *, events: CacheEvents = NO_CACHE_EVENTS
) -> CacheLayer:
    """The app's shared Redis client when there is one (shared by replicas), else the in-process LRU.

    Opens no connection and owns none: the lifespan that opened ``redis`` closes it, and Redis is dialled on first
    use, so a Redis that is down at start-up degrades the cache instead of failing the gateway's start.
    """
    backend: CacheBackend = (
        RedisBackend(redis)
        if redis is not None
        else MemoryBackend(settings.memory_max_entries, settings.memory_max_bytes)
    )
    versions = KnowledgeVersions(backend, prefix=settings.prefix)
    return CacheLayer(settings=settings, backend=backend, versions=versions, events=events)


def open_semantic_cache(
    layer: CacheLayer | None,
    settings: SemanticCacheSettings,
    embeddings: Embeddings,
    calibration: Calibration,
    *,
    namespace: str = "",
) -> SemanticCache | None:
    """Shares the layer's backend and the responses' namespaced prefix, so a knowledge-version bump reaches it
    too. Its threshold is the environment's or the one ``calibration`` fitted for the embedder in use."""
    if layer is None or not settings.enabled:
        return None
    return SemanticCache(
        settings,
        layer.backend,
        embeddings,
        threshold=SimilarityThreshold(settings.similarity_threshold(calibration)),
        centre=QueryCentre.of(calibration.query_centre),
        prefix=f"{layer.prefix}:{namespace}" if namespace else layer.prefix,
        events=layer.events,
    )
