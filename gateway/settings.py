"""Every knob of the gateway, read from the environment once at start-up.

Well-known provider variables (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``PINECONE_API_KEY``,
``REDIS_URL``) are honoured under their usual names so production switches providers without a
gateway-specific mapping; everything else is ``GATEWAY_``-prefixed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

LOCAL_MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"


def cache_root() -> Path:
    """Per-user cache shared by every clone: the assembled model and the trained router live here."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rag-gateway"


class ModelPrice(BaseModel):
    """USD per one million tokens."""

    input: float = 0.0
    output: float = 0.0


class ApiKeyConfig(BaseModel):
    """One client's key, as configured: only its SHA-256 hex digest (``python -m gateway.access hash-key``)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    key_sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    tenant: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # the vector stores' TENANT_PATTERN
    scopes: list[Literal["query", "admin"]] = Field(default_factory=lambda: list[Literal["query", "admin"]](["query"]))
    requests_per_minute: int | None = Field(None, ge=1)
    daily_tokens: int | None = Field(None, ge=1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GATEWAY_", extra="ignore", populate_by_name=True)

    # HTTP
    host: str = "127.0.0.1"
    port: int = 8000
    max_query_chars: int = Field(4000, ge=1)
    max_documents_per_request: int = Field(256, ge=1)
    max_document_chars: int = Field(500_000, ge=1)

    # LLM (any OpenAI-compatible endpoint; the default is the local llama.cpp server)
    llm_base_url: str = Field(
        "http://127.0.0.1:8081/v1", validation_alias=AliasChoices("GATEWAY_LLM_BASE_URL", "OPENAI_BASE_URL")
    )
    llm_api_key: SecretStr = Field(
        SecretStr("local-no-key"), validation_alias=AliasChoices("GATEWAY_LLM_API_KEY", "OPENAI_API_KEY")
    )
    llm_model: str = LOCAL_MODEL
    llm_timeout_s: float = Field(120.0, gt=0)
    llm_max_retries: int = Field(1, ge=0)
    llm_temperature: float = 0.0
    llm_max_tokens: int = Field(320, ge=16)
    llm_prices: dict[str, ModelPrice] = Field(default_factory=dict)

    # Embeddings
    embedding_provider: Literal["use", "openai"] = "use"
    embedding_model: str = "use-multilingual-v3"
    embedding_threads: int = Field(1, ge=1)

    # Vector store: embedded LanceDB unless a Pinecone key is set
    vector_store_path: Path = Path(".data/lancedb")
    pinecone_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("GATEWAY_PINECONE_API_KEY", "PINECONE_API_KEY")
    )
    pinecone_index_host: str | None = Field(
        None, validation_alias=AliasChoices("GATEWAY_PINECONE_INDEX_HOST", "PINECONE_INDEX_HOST")
    )
    pinecone_index: str = "rag-gateway"

    # Cache: Redis when REDIS_URL is set (shared by replicas), else an in-process LRU
    redis_url: str | None = Field(None, validation_alias=AliasChoices("GATEWAY_REDIS_URL", "REDIS_URL"))
    cache_enabled: bool = True
    cache_prefix: str = "rag"
    cache_timeout_s: float = Field(0.05, gt=0)
    cache_backoff_s: float = Field(1.0, ge=0)
    cache_default_ttl_s: float = Field(300.0, ge=0)
    cache_route_ttls: dict[str, float] = Field(
        default_factory=lambda: {"direct": 600.0, "single_hop": 3600.0, "multi_hop": 3600.0}
    )
    cache_lock_ttl_s: float = Field(5.0, gt=0)
    cache_max_wait_s: float = Field(30.0, ge=0)
    cache_memory_max_entries: int = Field(10_000, ge=1)
    cache_memory_max_bytes: int = Field(64 * 1024 * 1024, ge=1)
    embedding_cache_ttl_s: float = Field(7 * 24 * 3600.0, ge=0)
    # Semantic cache (opt-in): LSH buckets in plain Redis, exact cosine re-check, contrast guard.
    cache_semantic_enabled: bool = False
    cache_semantic_threshold: float = Field(0.87, ge=0.0, le=1.0)
    cache_semantic_bands: int = Field(24, ge=1)
    cache_semantic_bits_per_band: int = Field(12, ge=1, le=62)
    cache_semantic_max_candidates: int = Field(64, ge=1)
    cache_semantic_bucket_cap: int = Field(32, ge=1)

    # Knowledge ingestion
    chunk_size: int = Field(700, ge=100)
    chunk_overlap: int = Field(100, ge=0)
    load_sample_kb: bool = False

    # Routing and retrieval
    router_classifier: Literal["logistic", "llm"] = "logistic"
    router_cache_dir: Path = Field(default_factory=lambda: cache_root() / "router")
    default_top_k: int = Field(4, ge=1, le=50)
    max_top_k: int = Field(20, ge=1, le=100)
    multi_hop_top_k: int = Field(8, ge=1, le=50)
    # Grounding gates (LLM-free): cosine floor for a passage to reach the generator, and the share of
    # an answer's new words that must occur in its cited passages.
    min_relevance: float = Field(0.18, ge=-1.0, le=1.0)
    min_answer_support: float = Field(0.5, ge=0.0, le=1.0)
    # Grounded answers are one to three sentences: the cap ends a small model's repetition loop early
    # (on CPU every runaway token costs ~0.1 s), not a legitimate answer.
    answer_max_tokens: int = Field(200, ge=16)

    # Corrective pipeline (CRAG + Self-RAG); thresholds are on the fast scorer's probability.
    crag_upper: float = Field(0.5, ge=0.0, le=1.0)
    crag_lower: float = Field(0.2, ge=0.0, le=1.0)
    crag_max_graded: int = Field(2, ge=0)
    crag_explore_floor: float = Field(0.12, ge=0.0, le=1.0)
    strip_threshold: float = Field(0.15, ge=0.0, le=1.0)
    max_strips: int = Field(12, ge=1)
    max_rewrites: int = Field(2, ge=0)
    budget_max_llm_calls: int = Field(10, ge=1)
    budget_max_seconds: float = Field(90.0, gt=0)
    recursion_limit: int = Field(40, ge=10)
    escalate_on_incorrect: bool = True
    # single_hop escalates only when every passage scores below this (a clearly failed retrieval): on the
    # shared SQuAD set 0.12 escalates 13% of questions, 62% of the answerable ones with gold really missed,
    # vs 37% and 35% at crag_lower (0.2).
    escalate_below: float = Field(0.12, ge=0.0, le=1.0)
    tavily_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("GATEWAY_TAVILY_API_KEY", "TAVILY_API_KEY")
    )

    # Readiness probes
    readiness_timeout_s: float = Field(2.0, gt=0)

    # Access (gateway/access): API keys (GATEWAY_API_KEYS, a JSON list of ApiKeyConfig; hashes only).
    # Without keys the gateway is open, which start-up refuses off loopback unless allow_open_access.
    api_keys: list[ApiKeyConfig] = Field(default_factory=list)
    allow_open_access: bool = False
    rate_limit_prefix: str = "ratelimit"
    rate_limit_timeout_s: float = Field(0.1, gt=0)
    # Redis down: False = fall back to per-process limits (answers keep flowing, limits per replica);
    # True = refuse with 503 (limits are never exceeded, availability follows Redis).
    rate_limit_fail_closed: bool = False

    # Request limits (each answered with a clear 4xx)
    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    chat_max_messages: int = Field(64, ge=1)
    chat_max_message_chars: int = Field(16_000, ge=1)
    chat_max_tokens: int = Field(4096, ge=1)
    # Follow-ups: earlier turns (at most this many messages) make the last question self-contained.
    chat_rewrite_followups: bool = True
    chat_history_messages: int = Field(8, ge=1)
    # Observability: Prometheus at /metrics, OpenTelemetry spans (OTLP export via the standard OTEL_* variables)
    metrics_enabled: bool = True
    tracing_enabled: bool = True
    # Force the OTLP exporter on without OTEL_EXPORTER_OTLP_ENDPOINT (it then sends to localhost:4318).
    otlp_enabled: bool = False
    # Privacy by default: queries, prompts and answers go into span attributes only when this is true.
    trace_include_content: bool = False
    # ``gen_ai.provider.name`` of LLM spans: the API flavour of GATEWAY_LLM_BASE_URL.
    llm_provider_name: str = "openai"
    log_format: Literal["json", "text"] = "json"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @property
    def uses_pinecone(self) -> bool:
        return self.pinecone_api_key is not None

    def answer_fingerprint(self) -> str:
        """Digest of the settings that shape answers: cached answers made under other settings never match."""
        shaping = (
            self.llm_model,
            self.llm_temperature,
            self.llm_max_tokens,
            self.embedding_model,
            self.chunk_size,
            self.default_top_k,
            self.multi_hop_top_k,
            self.min_relevance,
            self.min_answer_support,
            self.answer_max_tokens,
            self.crag_upper,
            self.crag_lower,
            self.crag_max_graded,
            self.crag_explore_floor,
            self.strip_threshold,
            self.max_strips,
            self.max_rewrites,
            self.budget_max_llm_calls,
            self.escalate_on_incorrect,
            self.escalate_below,
        )
        return hashlib.sha256(repr(shaping).encode()).hexdigest()[:8]

    def price_for(self, model: str) -> ModelPrice:
        return self.llm_prices.get(model, ModelPrice())
