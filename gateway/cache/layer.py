"""One call for the app lifespan: the backend, versions, response cache and embeddings wrapper together.

They must share one backend and one key prefix, or a version bump would not reach the responses
it is meant to invalidate; building them in one place makes that impossible to get wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from langchain_core.embeddings import Embeddings

from gateway.cache.backend import CacheBackend, MemoryBackend, RedisBackend
from gateway.cache.embeddings import DEFAULT_EMBEDDING_TTL_S, CachedEmbeddings
from gateway.cache.events import NO_CACHE_EVENTS, CacheEvents
from gateway.cache.exact import DEFAULT_TTL_S, ExactCache
from gateway.cache.keys import DEFAULT_PREFIX
from gateway.cache.versions import KnowledgeVersions
from gateway.providers.redis import ResilientRedis
from gateway.schemas import QueryResponse


@dataclass(frozen=True, slots=True)
class CacheLayer:
    backend: CacheBackend
    versions: KnowledgeVersions
    responses: ExactCache[QueryResponse]
    prefix: str
    events: CacheEvents = NO_CACHE_EVENTS

    def wrap_embeddings(
        self, inner: Embeddings, *, model: str, ttl_s: float = DEFAULT_EMBEDDING_TTL_S
    ) -> CachedEmbeddings:
        return CachedEmbeddings(inner, self.backend, model=model, ttl_s=ttl_s, prefix=self.prefix, events=self.events)


def open_cache(
    redis: ResilientRedis | None,
    *,
    prefix: str = DEFAULT_PREFIX,
    namespace: str = "",
    route_ttls: Mapping[str, float] | None = None,
    default_ttl_s: float = DEFAULT_TTL_S,
    lock_ttl_s: float = 5.0,
    max_wait_s: float = 30.0,
    memory_max_entries: int = 10_000,
    memory_max_bytes: int = 64 * 1024 * 1024,
    events: CacheEvents = NO_CACHE_EVENTS,
) -> CacheLayer:
    """The app's shared Redis client when there is one (shared by replicas), else the in-process LRU.

    ``namespace`` goes into response keys only: pass a fingerprint of the settings that shape
    answers (model, pipeline thresholds) so a deploy that changes them never serves answers made
    by the old ones, while version keys stay shared and a bump from any replica, old or new,
    still invalidates everything. Opens no connection and owns none: the lifespan that opened
    ``redis`` closes it, and Redis is dialled on first use, so a Redis that is down at start-up
    degrades the cache instead of failing the gateway's start.
    """
    backend: CacheBackend = (
        RedisBackend(redis) if redis is not None else MemoryBackend(memory_max_entries, memory_max_bytes)
    )
    versions = KnowledgeVersions(backend, prefix=prefix)
    responses = ExactCache(
        backend,
        versions,
        QueryResponse,
        route_ttls=route_ttls,
        default_ttl_s=default_ttl_s,
        prefix=f"{prefix}:{namespace}" if namespace else prefix,
        lock_ttl_s=lock_ttl_s,
        max_wait_s=max_wait_s,
        events=events,
    )
    return CacheLayer(backend=backend, versions=versions, responses=responses, prefix=prefix, events=events)
