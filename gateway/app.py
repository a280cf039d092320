"""``create_app(settings)``: the Litestar application and the lifespan that owns its clients."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from importlib import resources

import httpx
import numpy as np
from langchain_core.embeddings import Embeddings
from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import Components
from opentelemetry.sdk.trace import TracerProvider

from gateway.access.guard import SECURITY_SCHEMES, access_lifespan, provide_access, provide_principal
from gateway.api.chat import ChatController, provide_chat_service
from gateway.api.documents import DocumentController
from gateway.api.health import HealthController
from gateway.api.metrics import MetricsController
from gateway.api.query import QueryController
from gateway.cache.layer import CacheLayer, open_cache
from gateway.cache.semantic import SemanticCache
from gateway.chunking import Chunker
from gateway.errors import handle_exception
from gateway.knowledge import KnowledgeBase, NewDocument
from gateway.observability.http import trace_requests
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.recorder import Telemetry
from gateway.observability.tracing import build_tracer_provider
from gateway.providers.embeddings import build_embeddings, embedding_dimensions
from gateway.providers.llm import LLMClient, build_chat_model, ping_llm
from gateway.providers.vectorstores.base import VectorStore
from gateway.providers.vectorstores.lance import LanceVectorStore
from gateway.providers.websearch import LocalStoreSearch, TavilySearch
from gateway.service import QueryLimits, QueryService
from gateway.settings import Settings
from gateway.state import ProviderOverrides, Services
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.state import CorrectiveContext
from pipelines.direct.state import DirectContext
from pipelines.shared.deps import WebSearch
from pipelines.shared.generation import GroundingPolicy
from pipelines.single_hop.state import SingleHopContext
from routes.examples import load_examples
from routes.llm_router import LLMRouter
from routes.logistic_router import EmbedTexts, LogisticRouter, load_or_train
from routes.router import FrontRouter
from routes.table import PipelineContexts, RoutePolicy, RouteTable

logger = logging.getLogger("gateway")


async def open_vector_store(settings: Settings, dimensions: int) -> VectorStore:
    if settings.pinecone_api_key is not None:
        from gateway.providers.vectorstores.pinecone_store import PineconeVectorStore

        return await PineconeVectorStore.open(
            api_key=settings.pinecone_api_key.get_secret_value(),
            index_host=settings.pinecone_index_host,
            index_name=settings.pinecone_index,
            dimensions=dimensions,
        )
    return await LanceVectorStore.open(settings.vector_store_path, dimensions)


def _embed_texts(embeddings: Embeddings) -> EmbedTexts:
    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(embeddings.embed_documents(texts), dtype=np.float32)

    return embed


def build_telemetry(settings: Settings, overrides: ProviderOverrides) -> Telemetry:
    """Fresh metrics and tracer provider per app, so apps (and tests) never share counters or spans."""
    metrics = GatewayMetrics() if settings.metrics_enabled else None
    if metrics is not None:
        layers = ["exact", "embedding"] if settings.cache_enabled else []
        if settings.cache_enabled and settings.cache_semantic_enabled:
            layers.append("semantic")
        metrics.initialise(classifier=settings.router_classifier, cache_layers=layers)
    provider = None
    if settings.tracing_enabled:
        provider = build_tracer_provider(otlp=settings.otlp_enabled, extra_exporter=overrides.span_exporter)
    return Telemetry(
        metrics,
        provider,
        include_content=settings.trace_include_content,
        llm_provider_name=settings.llm_provider_name,
    )


async def build_router(settings: Settings, embeddings: Embeddings, llm: LLMClient) -> FrontRouter:
    examples = [e for e in load_examples() if e.split == "train"]
    model = await asyncio.to_thread(
        load_or_train, settings.router_cache_dir, examples, _embed_texts(embeddings), settings.embedding_model
    )
    return FrontRouter(LogisticRouter(model), LLMRouter(llm), settings.router_classifier)


def build_route_table(
    settings: Settings,
    llm: LLMClient,
    knowledge: KnowledgeBase,
    http: httpx.AsyncClient,
    embeddings: Embeddings,
    telemetry: Telemetry | None = None,
) -> RouteTable:
    """Every graph compiled once, at start-up, with the runtime contexts (the lifespan's clients) its runs get."""
    grounding = GroundingPolicy(settings.min_relevance, settings.min_answer_support, settings.answer_max_tokens)
    corrective_policy = CorrectivePolicy(
        upper=settings.crag_upper,
        lower=settings.crag_lower,
        max_graded=settings.crag_max_graded,
        explore_floor=settings.crag_explore_floor,
        strip_threshold=settings.strip_threshold,
        max_strips=settings.max_strips,
        max_rewrites=settings.max_rewrites,
        max_llm_calls=settings.budget_max_llm_calls,
        max_seconds=settings.budget_max_seconds,
        recursion_limit=settings.recursion_limit,
        grounding=grounding,
    )
    observer = telemetry or Telemetry(None, None)
    search: WebSearch = LocalStoreSearch(knowledge)
    if settings.tavily_api_key is not None:
        search = TavilySearch(http, settings.tavily_api_key.get_secret_value(), embeddings)
    contexts = PipelineContexts(
        direct=DirectContext(llm=llm, telemetry=observer),
        single_hop=SingleHopContext(
            llm=llm,
            retriever=knowledge,
            grounding=grounding,
            relevance=corrective_policy.relevance,
            lower=settings.escalate_below,
            upper=settings.crag_upper,
            telemetry=observer,
        ),
        corrective=CorrectiveContext(
            llm=llm,
            retriever=knowledge,
            search=search,
            embedder=knowledge,
            policy=corrective_policy,
            telemetry=observer,
        ),
    )
    return RouteTable(
        contexts,
        policy=RoutePolicy(
            default_top_k=settings.default_top_k,
            max_top_k=settings.max_top_k,
            multi_hop_top_k=settings.multi_hop_top_k,
            escalate_on_incorrect=settings.escalate_on_incorrect,
            recursion_limit=settings.recursion_limit,
        ),
        telemetry=observer,
    )


def open_cache_layer(settings: Settings, telemetry: Telemetry | None = None) -> CacheLayer | None:
    if not settings.cache_enabled:
        return None
    return open_cache(
        settings.redis_url,
        prefix=settings.cache_prefix,
        namespace=settings.answer_fingerprint(),
        timeout_s=settings.cache_timeout_s,
        backoff_s=settings.cache_backoff_s,
        route_ttls=settings.cache_route_ttls,
        default_ttl_s=settings.cache_default_ttl_s,
        lock_ttl_s=settings.cache_lock_ttl_s,
        max_wait_s=settings.cache_max_wait_s,
        memory_max_entries=settings.cache_memory_max_entries,
        memory_max_bytes=settings.cache_memory_max_bytes,
        events=telemetry or Telemetry(None, None),
    )


def open_semantic_cache(settings: Settings, cache: CacheLayer | None, embeddings: Embeddings) -> SemanticCache | None:
    """Shares the layer's backend and namespaced prefix, so a knowledge-version bump reaches it too."""
    if cache is None or not settings.cache_semantic_enabled:
        return None
    namespace = settings.answer_fingerprint()
    return SemanticCache(
        cache.backend,
        embeddings,
        prefix=f"{settings.cache_prefix}:{namespace}",
        threshold=settings.cache_semantic_threshold,
        bands=settings.cache_semantic_bands,
        bits_per_band=settings.cache_semantic_bits_per_band,
        max_candidates=settings.cache_semantic_max_candidates,
        bucket_cap=settings.cache_semantic_bucket_cap,
        timeout_s=settings.cache_timeout_s,
        backoff_s=settings.cache_backoff_s,
        events=cache.events,
    )


def _describe_cache(settings: Settings, cache: CacheLayer | None) -> str:
    if cache is None:
        return "disabled"
    if settings.redis_url:
        return "redis"
    return "in-process LRU (no REDIS_URL: not shared between processes or replicas)"


async def load_sample_kb(knowledge: KnowledgeBase) -> int:
    raw = (resources.files("gateway") / "sample_kb" / "documents.json").read_text(encoding="utf-8")
    docs = [
        NewDocument(id=d["id"], text=d["text"], title=d.get("title", ""), metadata=d.get("metadata", {}))
        for d in json.loads(raw)
    ]
    result = await knowledge.ingest("default", docs)
    return result.chunks


def _lifespan(
    settings: Settings, overrides: ProviderOverrides
) -> Callable[[Litestar], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            telemetry = build_telemetry(settings, overrides)
            stack.callback(_close_telemetry, telemetry)
            app.state.telemetry = telemetry  # read by the tracing middleware
            http = await stack.enter_async_context(httpx.AsyncClient())
            embeddings = overrides.embeddings
            if embeddings is None:
                embeddings = await asyncio.to_thread(build_embeddings, settings)
            dimensions = embedding_dimensions(embeddings)
            store = overrides.vector_store or await open_vector_store(settings, dimensions)
            stack.push_async_callback(store.close)
            chat_model = overrides.chat_model or build_chat_model(settings)
            llm = LLMClient(
                chat_model,
                model_name=settings.llm_model,
                price=settings.price_for(settings.llm_model),
                telemetry=telemetry,
            )
            cache = open_cache_layer(settings, telemetry)
            query_embeddings = embeddings
            if cache is not None:
                stack.push_async_callback(cache.close)
                if settings.embedding_cache_ttl_s > 0:
                    model = f"{settings.embedding_provider}:{settings.embedding_model}"
                    query_embeddings = cache.wrap_embeddings(
                        embeddings, model=model, ttl_s=settings.embedding_cache_ttl_s
                    )
            knowledge = KnowledgeBase(
                query_embeddings,
                store,
                Chunker(settings.chunk_size, settings.chunk_overlap),
                versions=cache.versions if cache is not None else None,
            )
            # Router training embeds in bulk with the sync API: it gets the unwrapped model.
            router = await build_router(settings, embeddings, llm)
            table = build_route_table(settings, llm, knowledge, http, embeddings, telemetry)

            async def llm_check() -> None:
                if overrides.chat_model is None:
                    await ping_llm(http, settings)

            app.state.services = Services(
                settings=settings,
                http=http,
                llm=llm,
                knowledge=knowledge,
                query_service=QueryService(
                    knowledge,
                    router,
                    table,
                    QueryLimits(settings.max_query_chars),
                    cache=cache.responses if cache is not None else None,
                    semantic=open_semantic_cache(settings, cache, query_embeddings),
                    versions=cache.versions if cache is not None else None,
                    telemetry=telemetry,
                ),
                llm_check=llm_check,
                cache=cache,
                telemetry=telemetry,
            )
            if settings.load_sample_kb:
                chunks = await load_sample_kb(knowledge)
                logger.info("sample knowledge base loaded into tenant 'default' (%d chunks)", chunks)
            logger.info(
                "gateway ready: llm=%s at %s, vector store=%s, router=%s, cache=%s",
                settings.llm_model,
                settings.llm_base_url,
                store.name,
                router.classifier_name,
                _describe_cache(settings, cache),
            )
            yield

    return lifespan


def _close_telemetry(telemetry: Telemetry) -> None:
    """Flush queued spans (OTLP batch) and retire this worker's live gauges."""
    if isinstance(telemetry.provider, TracerProvider):
        telemetry.provider.shutdown()
    if telemetry.metrics is not None:
        telemetry.metrics.close()


def provide_services(state: State) -> Services:
    services: Services = state.services
    return services


def provide_query_service(state: State) -> QueryService:
    return provide_services(state).query_service


def provide_knowledge(state: State) -> KnowledgeBase:
    return provide_services(state).knowledge


def create_app(settings: Settings | None = None, overrides: ProviderOverrides | None = None) -> Litestar:
    settings = settings or Settings()
    overrides = overrides or ProviderOverrides()

    return Litestar(
        route_handlers=[QueryController, DocumentController, HealthController, ChatController, MetricsController],
        middleware=[trace_requests],
        lifespan=[access_lifespan(settings), _lifespan(settings, overrides)],
        dependencies={
            "services": Provide(provide_services, sync_to_thread=False),
            "settings": Provide(lambda: settings, sync_to_thread=False, use_cache=True),
            "query_service": Provide(provide_query_service, sync_to_thread=False),
            "knowledge": Provide(provide_knowledge, sync_to_thread=False),
            "principal": Provide(provide_principal, sync_to_thread=False),
            "access": Provide(provide_access, sync_to_thread=False),
            "chat_service": Provide(provide_chat_service, sync_to_thread=False),
        },
        request_max_body_size=settings.max_body_bytes,
        exception_handlers={Exception: handle_exception},
        # Logging is the process's to configure (``python -m gateway``: JSON lines); Litestar's default would
        # replace the root handler with its own text format at start-up.
        logging_config=None,
        openapi_config=OpenAPIConfig(
            title="Adaptive RAG routing gateway",
            version="1.0.0",
            path="/schema",
            render_plugins=[SwaggerRenderPlugin()],
            components=Components(security_schemes=SECURITY_SCHEMES),
        ),
    )
