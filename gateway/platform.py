"""The shared clients every domain is built on, opened once per app and closed in reverse order.

Each domain's factory takes what it owns from here and from its own settings group; nothing else reaches into
another domain's clients. ``ProviderOverrides`` (:mod:`gateway.overrides`) swaps a client for a fake the way
httpx takes ``transport=``: the rest of the wiring stays the production wiring.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import dataclass

import httpx
from langchain_core.embeddings import Embeddings
from opentelemetry.sdk.trace import TracerProvider

from gateway.cache import CacheLayer, RedisBackend, open_cache
from gateway.observability import GatewayMetrics, Telemetry, build_tracer_provider
from gateway.overrides import ProviderOverrides
from gateway.providers import (
    FALLBACK,
    PRIMARY,
    LLMClient,
    ResilientRedis,
    USEEmbeddings,
    VectorStore,
    build_embeddings,
    embedding_dimensions,
    open_llm_client,
    open_redis,
    open_vector_store,
    upstream_client,
)
from gateway.settings import Settings


@dataclass(frozen=True)
class Platform:
    telemetry: Telemetry
    redis: ResilientRedis | None  # the one client the caches and the rate limiter share
    http: httpx.AsyncClient  # web search, readiness pings and the identity provider's keys
    upstream_http: httpx.AsyncClient  # every model call
    embeddings: Embeddings  # the model itself; queries go through the knowledge base's cached wrapper
    store: VectorStore
    llm: LLMClient
    cache: CacheLayer | None

    def describe_cache(self) -> str:
        if self.cache is None:
            return "disabled"
        if isinstance(self.cache.backend, RedisBackend):
            return "redis"
        return "in-process LRU (no REDIS_URL: not shared between processes or replicas)"


async def open_platform(settings: Settings, overrides: ProviderOverrides, stack: AsyncExitStack) -> Platform:
    """Every shared client, each closed by ``stack`` (the embedder last: no run of its may outlive the app)."""
    telemetry = build_telemetry(settings, overrides)
    stack.callback(close_telemetry, telemetry)
    redis = open_redis(settings.redis, longest_call_s=settings.access.rate_limit_timeout_s, events=telemetry)
    if redis is not None:
        stack.push_async_callback(redis.aclose)
    http = await stack.enter_async_context(httpx.AsyncClient())
    endpoint = settings.llm_endpoint
    # Opened before the embedder, which calls a server on it too, and so closed after it.
    upstream_http = await stack.enter_async_context(upstream_client(endpoint.timeout_s))
    embeddings = overrides.embeddings
    if embeddings is None:
        embedding_endpoint = settings.embedding_endpoint.resolved(endpoint)
        embeddings = await asyncio.to_thread(
            build_embeddings, settings.embeddings, embedding_endpoint, http_client=upstream_http, events=telemetry
        )
    if isinstance(embeddings, USEEmbeddings):
        stack.push_async_callback(asyncio.to_thread, embeddings.close)
    store = overrides.vector_store
    if store is None:
        # A server's dimension may need a probe, which blocks: off the event loop.
        dimensions = await asyncio.to_thread(embedding_dimensions, embeddings)
        store = await open_vector_store(settings.vector_store, dimensions)
    stack.push_async_callback(store.close)
    llm = open_llm_client(
        settings.llm, endpoint, telemetry=telemetry, chat_model=overrides.chat_model, http_client=upstream_http
    )
    cache = None
    if settings.cache.enabled:
        cache = open_cache(redis, settings.cache, events=telemetry)
    return Platform(telemetry, redis, http, upstream_http, embeddings, store, llm, cache)


def build_telemetry(settings: Settings, overrides: ProviderOverrides) -> Telemetry:
    """Fresh metrics and tracer provider per app, so apps (and tests) never share counters or spans."""
    observability = settings.observability
    metrics = GatewayMetrics() if observability.metrics_enabled else None
    if metrics is not None:
        layers = ["exact", "embedding"] if settings.cache.enabled else []
        if settings.cache.enabled and settings.semantic_cache.enabled:
            layers.append("semantic")
        metrics.initialise(
            classifier=settings.router.classifier,
            cache_layers=layers,
            dependencies=["redis"] if settings.redis.url else [],
            llm_upstreams=[PRIMARY, FALLBACK] if settings.llm_endpoint.has_fallback else [PRIMARY],
        )
    provider = None
    if observability.tracing_enabled:
        provider = build_tracer_provider(otlp=observability.otlp_enabled, extra_exporter=overrides.span_exporter)
    return Telemetry(
        metrics,
        provider,
        include_content=observability.trace_include_content,
        llm_provider_name=observability.llm_provider_name,
    )


def close_telemetry(telemetry: Telemetry) -> None:
    """Flush queued spans (OTLP batch) and retire this worker's live gauges."""
    if isinstance(telemetry.provider, TracerProvider):
        telemetry.provider.shutdown()
    if telemetry.metrics is not None:
        telemetry.metrics.close()
