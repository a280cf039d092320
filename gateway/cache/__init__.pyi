from .backend import CacheBackend, CacheUnavailableError, MemoryBackend, RedisBackend
from .contrast import find_contrast
from .embeddings import CachedEmbeddings
from .exact import CacheOutcome, CacheStats, ExactCache
from .keys import KeyParams, exact_key, normalize_query
from .layer import CacheLayer, open_cache, open_semantic_cache, shares_embeddings
from .semantic import QueryCentre, SemanticCache, SimilarityThreshold, semantic_scope
from .single_flight import SingleFlight, StampedeGuard
from .versions import ChangeNotAcknowledgedError, KnowledgeVersions

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
    "QueryCentre",
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
