"""Response, embedding and version caching over Redis or an in-process LRU.

The cache is an optimisation and never a dependency: any backend failure is a miss, and a
tenant's knowledge version is part of every response key, so a document change makes every
answer computed before it unreachable at once.
"""

from gateway.cache.backend import CacheBackend, CacheUnavailableError, MemoryBackend, RedisBackend
from gateway.cache.embeddings import CachedEmbeddings
from gateway.cache.exact import CacheOutcome, CacheStats, ExactCache
from gateway.cache.keys import exact_key, normalize_query
from gateway.cache.layer import CacheLayer, open_cache
from gateway.cache.single_flight import SingleFlight, StampedeGuard
from gateway.cache.versions import KnowledgeVersions

__all__ = [
    "CacheBackend",
    "CacheLayer",
    "CacheOutcome",
    "CacheStats",
    "CacheUnavailableError",
    "CachedEmbeddings",
    "ExactCache",
    "KnowledgeVersions",
    "MemoryBackend",
    "RedisBackend",
    "SingleFlight",
    "StampedeGuard",
    "exact_key",
    "normalize_query",
    "open_cache",
]
