"""The long-lived clients of one app instance, opened in the lifespan and closed in its finally.

``ProviderOverrides`` is how tests (and embedders of the gateway) inject fakes, the way httpx
takes ``transport=``: the rest of the wiring stays the production wiring.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from opentelemetry.sdk.trace.export import SpanExporter

from gateway.cache.layer import CacheLayer
from gateway.curation.store import CurationStore
from gateway.knowledge import KnowledgeBase
from gateway.observability.recorder import Telemetry
from gateway.profiles.runtime import Profiles
from gateway.providers.llm import LLMClient
from gateway.providers.redis import ResilientRedis
from gateway.providers.vectorstores.base import VectorStore
from gateway.service import QueryService
from gateway.settings import Settings

Check = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class ProviderOverrides:
    chat_model: BaseChatModel | None = None
    embeddings: Embeddings | None = None
    vector_store: VectorStore | None = None
    # Receives every span synchronously, besides any OTLP export: tests pass the SDK's in-memory exporter.
    span_exporter: SpanExporter | None = None


@dataclass
class Services:
    settings: Settings
    http: httpx.AsyncClient
    llm: LLMClient
    knowledge: KnowledgeBase
    query_service: QueryService
    llm_checks: dict[str, Check]  # "llm", and "llm_fallback" when a fallback is configured
    cache: CacheLayer | None = None
    redis: ResilientRedis | None = None  # the one client the caches and the rate limiter share
    curation_store: CurationStore | None = None
    telemetry: Telemetry = field(default_factory=lambda: Telemetry(None, None))
    profiles: Profiles | None = None

    def readiness_checks(self) -> dict[str, Check]:
        """Dependencies of this pod that every answer needs: when one is down the pod is not ready."""
        return {"vector_store": self.knowledge.store.ping}

    def degradable_checks(self) -> dict[str, Check]:
        """Dependencies the gateway can answer without, reported but never failing readiness.

        Redis: uncached answers, per-process limits (or the rate limiter's own 503 when it fails closed).
        The LLM: cached answers, document writes and search still work, and questions fail fast (503 +
        Retry-After, from the breaker) or go to the fallback. The LLM is shared by every replica, so its
        outage would make them all unready at once: Kubernetes would then route nothing anywhere, cached
        answers included, and clients would get connection errors instead of a Retry-After.
        """
        checks = dict(self.llm_checks)
        if self.redis is not None:
            checks["redis"] = self.redis.ping
        if self.curation_store is not None:
            # Curation records are counted and dropped while it is down; answers never wait on it.
            checks["curation_store"] = self.curation_store.ping
        return checks
