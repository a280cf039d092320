from .database.engine import PROVIDER, Database, open_database
from .database.tables import (
    answer_records,
    assistant_profiles,
    document_changes,
    eval_cases,
    eval_runs,
    eval_suites,
    feedback,
    resolutions,
    route_calibrations,
    route_outcomes,
)
from .deadline import within
from .e5 import E5_DIMENSIONS, E5Embeddings
from .embeddings import (
    DEFAULT_USE_MODEL,
    USE_DIMENSIONS,
    USEEmbeddings,
    build_embeddings,
    embed_queries,
    embedding_dimensions,
)
from .llm import FALLBACK, PRIMARY, LLMClient, build_chat_model, open_llm_client, ping_llm
from .openai_embeddings import OpenAICompatibleEmbeddings
from .redis import NO_DEPENDENCY_EVENTS, DependencyEvents, RedisUnavailableError, ResilientRedis, open_redis
from .upstream_http import upstream_client
from .vectorstores.base import TENANT_PATTERN, ChunkRecord, StoredChunks, VectorStore, check_tenant, common_access
from .vectorstores.factory import open_vector_store
from .vectorstores.fusion import query_terms
from .websearch import TavilySearch

__all__ = [
    "DEFAULT_USE_MODEL",
    "E5_DIMENSIONS",
    "FALLBACK",
    "NO_DEPENDENCY_EVENTS",
    "PRIMARY",
    "PROVIDER",
    "TENANT_PATTERN",
    "USE_DIMENSIONS",
    "ChunkRecord",
    "Database",
    "DependencyEvents",
    "E5Embeddings",
    "LLMClient",
    "OpenAICompatibleEmbeddings",
    "RedisUnavailableError",
    "ResilientRedis",
    "StoredChunks",
    "TavilySearch",
    "USEEmbeddings",
    "VectorStore",
    "answer_records",
    "assistant_profiles",
    "build_chat_model",
    "build_embeddings",
    "check_tenant",
    "common_access",
    "document_changes",
    "embed_queries",
    "embedding_dimensions",
    "eval_cases",
    "eval_runs",
    "eval_suites",
    "feedback",
    "open_database",
    "open_llm_client",
    "open_redis",
    "open_vector_store",
    "ping_llm",
    "query_terms",
    "resolutions",
    "route_calibrations",
    "route_outcomes",
    "upstream_client",
    "within",
]
