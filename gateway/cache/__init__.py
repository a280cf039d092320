"""Response, embedding and version caching over Redis or an in-process LRU.

The cache is an optimisation and never a dependency: any backend failure is a miss, and a
tenant's knowledge version is part of every response key, so a document change makes every
answer computed before it unreachable at once.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from gateway.cache.backend import CacheBackend, CacheUnavailableError, MemoryBackend, RedisBackend
from gateway.cache.contrast import find_contrast
from gateway.cache.embeddings import CachedEmbeddings
from gateway.cache.exact import CacheOutcome, CacheStats, ExactCache
from gateway.cache.keys import KeyParams, exact_key, normalize_query
from gateway.cache.layer import CacheLayer, open_cache, open_semantic_cache, shares_embeddings
from gateway.cache.semantic import SemanticCache, SimilarityThreshold, semantic_scope
from gateway.cache.single_flight import SingleFlight, StampedeGuard
from gateway.cache.versions import ChangeNotAcknowledgedError, KnowledgeVersions

__all__ = [
    "CacheBackend",
    "CacheLayer",
    "CacheOutcome",
    "CacheStats",
    "CacheUnavailableError",
    "CachedEmbeddings",
    "ChangeNotAcknowledgedError",
    "ExactCache",
    "KeyParams",
    "KnowledgeVersions",
    "MemoryBackend",
    "RedisBackend",
    "SemanticCache",
    "SimilarityThreshold",
    "SingleFlight",
    "StampedeGuard",
    "exact_key",
    "find_contrast",
    "normalize_query",
    "open_cache",
    "open_semantic_cache",
    "semantic_scope",
    "shares_embeddings",
]
