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
from pydantic import SecretStr
from threadpoolctl import threadpool_limits

from gateway.access.guard import SECURITY_SCHEMES, open_access, provide_access, provide_principal
from gateway.api import early_vector
from gateway.api.chat import CHAT_ACCESS, ChatController, provide_chat_scope
from gateway.api.documents import DocumentController
from gateway.api.health import HealthController
from gateway.api.metrics import MetricsController
from gateway.api.query import QueryController
from gateway.cache.backend import RedisBackend
from gateway.cache.layer import CacheLayer, open_cache, open_semantic_cache, shares_embeddings
from gateway.cache.versions import ChangeNotAcknowledgedError
from gateway.chunking import Chunker
from gateway.curation.api import CurationController, EvalSuiteController, FeedbackController, provide_curation
from gateway.curation.lifecycle import KnowledgeChanges, open_curation_store, start_curation
from gateway.curation.pages import ReviewController, template_config
from gateway.errors import handle_exception
from gateway.guardrails.service import Guardrails, ScreenedRetriever, ScreenedSearch
from gateway.knowledge import DenseSearch, KnowledgeBase, NewDocument
from gateway.observability.http import trace_requests
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.recorder import Telemetry
from gateway.observability.tracing import build_tracer_provider
from gateway.profiles.api import ProfileController, provide_profiles
from gateway.profiles.lifecycle import open_profiles
from gateway.providers.deadline import within
from gateway.providers.embeddings import USEEmbeddings, build_embeddings, embedding_dimensions
from gateway.providers.llm import FALLBACK, PRIMARY, LLMClient, open_llm_client, ping_llm
from gateway.providers.redis import ResilientRedis, open_redis
from gateway.providers.upstream_http import upstream_client
from gateway.providers.vectorstores.base import VectorStore
from gateway.providers.vectorstores.lance import LanceVectorStore
from gateway.providers.websearch import LocalStoreSearch, TavilySearch
from gateway.router_artefact import train_knowledge_router
from gateway.service import QueryService
from gateway.settings import RetrievalSettings, Settings, VectorStoreSettings
from gateway.state import Check, ProviderOverrides, Services
from gateway.tenant_matrix import TenantMatrices
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.state import CorrectiveContext
from pipelines.direct.state import DirectContext
from pipelines.shared.deps import Retriever, WebSearch
from pipelines.shared.generation import GroundingPolicy
from pipelines.single_hop.state import SingleHopContext
from routes.knowledge_router import KnowledgeRouter
from routes.llm_router import LLMRouter
from routes.logistic_router import EmbedTexts
from routes.probe import PROBE_DEPTH
from routes.router import FrontRouter
from routes.table import PipelineContexts, RoutePolicy, RouteTable

logger = logging.getLogger("gateway")


async def open_vector_store(settings: VectorStoreSettings, dimensions: int) -> VectorStore:
    if settings.pinecone_api_key is not None:
        from gateway.providers.vectorstores.pinecone_store import PineconeVectorStore

        return await PineconeVectorStore.open(
            api_key=settings.pinecone_api_key.get_secret_value(),
            index_host=settings.pinecone_index_host,
            index_name=settings.pinecone_index,
            dimensions=dimensions,
        )
    return await LanceVectorStore.open(settings.path, dimensions)


def _embed_texts(embeddings: Embeddings) -> EmbedTexts:
    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(embeddings.embed_documents(texts), dtype=np.float32)

    return embed


def build_telemetry(settings: Settings, overrides: ProviderOverrides) -> Telemetry:
    """Fresh metrics and tracer provider per app, so apps (and tests) never share counters or spans."""
    observability = settings.observability
    metrics = GatewayMetrics() if observability.metrics_enabled else None
    if metrics is not None:
        layers = ["exact", "embedding"] if settings.cache.enabled else []
        if settings.cache.enabled and settings.semantic_cache.enabled:
            layers.append("semantic")
        dependencies = ["redis"] if settings.redis.url else []
        upstreams = [PRIMARY, FALLBACK] if settings.llm_endpoint.has_fallback else [PRIMARY]
        metrics.initialise(
            classifier=settings.router.classifier,
            cache_layers=layers,
            dependencies=dependencies,
            llm_upstreams=upstreams,
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


async def build_router(
    settings: Settings, embeddings: Embeddings, llm: LLMClient, knowledge: KnowledgeBase
) -> FrontRouter:
    """The router probes the tenant's store by the query vector alone, as it was trained (``dense_search``),
    deep enough for the retrieving routes' first search to be computed from its ranking (``QueryService``)."""
    model = await asyncio.to_thread(train_knowledge_router, settings, _embed_texts(embeddings))
    depth = probe_depth(settings.retrieval, knowledge)
    classifier = settings.router.classifier
    return FrontRouter(KnowledgeRouter(model), LLMRouter(llm), classifier, DenseSearch(knowledge), depth)


def probe_depth(retrieval: RetrievalSettings, knowledge: KnowledgeBase) -> int:
    """How deep the router's probe searches: what its signals read, or the dense ranking a retrieving route's first
    search is computed from (three times its top k when retrieval is hybrid), whichever is deeper.

    Single-hop's first search (``default_top_k``) is always computed from the probe. The multi-hop route's deeper one
    (``multi_hop_top_k``) is only where tenants are searched in the store: no in-memory matrices, or a store they
    cannot load (a LanceDB scan, a Pinecone call per search). With the matrices (the default), searching again costs
    that route one matrix product on a path of several model calls, while the probe made every passage it searched
    for on every ``auto`` request, ~3 µs each in a serving gateway: 12 passages more than the signals read, for the
    one route that could reuse them (issue 17). A tenant too large for the matrices' budget, or not loaded yet, is
    then searched in the store twice by a multi-hop request."""
    routes = [retrieval.default_top_k]
    if knowledge.matrices is None or not knowledge.matrices.searches_in_memory:
        routes.append(retrieval.multi_hop_top_k)
    return max(PROBE_DEPTH, knowledge.ranking_depth(max(routes)))


def build_route_table(
    settings: Settings,
    llm: LLMClient,
    knowledge: KnowledgeBase,
    http: httpx.AsyncClient,
    embeddings: Embeddings,
    telemetry: Telemetry | None = None,
    guard: Guardrails | None = None,
) -> RouteTable:
    """Every graph compiled once, at start-up, with the runtime contexts (the lifespan's clients) its runs get."""
    gates, corrective, retrieval = settings.grounding, settings.corrective, settings.retrieval
    grounding = GroundingPolicy(gates.min_relevance, gates.min_answer_support, gates.answer_max_tokens)
    corrective_policy = CorrectivePolicy(
        upper=corrective.crag_upper,
        lower=corrective.crag_lower,
        max_graded=corrective.crag_max_graded,
        explore_floor=corrective.crag_explore_floor,
        strip_threshold=corrective.strip_threshold,
        max_strips=corrective.max_strips,
        max_rewrites=corrective.max_rewrites,
        max_hops=corrective.max_hops,
        trust_correct_grounded=corrective.trust_correct_grounded,
        trust_planner_sufficient=corrective.trust_planner_sufficient,
        grade_planned_rounds=corrective.grade_planned_rounds,
        answer_passages=corrective.answer_passages,
        hop_passages=corrective.hop_passages,
        max_llm_calls=corrective.budget_max_llm_calls,
        max_seconds=corrective.budget_max_seconds,
        recursion_limit=corrective.recursion_limit,
        grounding=grounding,
    )
    observer = telemetry or Telemetry(None, None)
    search: WebSearch = LocalStoreSearch(knowledge)
    if settings.web_search.tavily_api_key is not None:
        search = TavilySearch(http, settings.web_search.tavily_api_key.get_secret_value(), embeddings)
    # Passages reach the model screened for injected instructions (flagged, dropped or refused per tenant).
    retriever: Retriever = knowledge
    if guard is not None:
        retriever, search = ScreenedRetriever(knowledge, guard), ScreenedSearch(search, guard)
    contexts = PipelineContexts(
        direct=DirectContext(llm=llm, telemetry=observer),
        single_hop=SingleHopContext(
            llm=llm,
            retriever=retriever,
            grounding=grounding,
            relevance=corrective_policy.relevance,
            lower=retrieval.escalate_below,
            upper=corrective.crag_upper,
            telemetry=observer,
        ),
        corrective=CorrectiveContext(
            llm=llm,
            retriever=retriever,
            search=search,
            embedder=knowledge,
            policy=corrective_policy,
            telemetry=observer,
        ),
    )
    return RouteTable(
        contexts,
        policy=RoutePolicy(
            default_top_k=retrieval.default_top_k,
            max_top_k=retrieval.max_top_k,
            multi_hop_top_k=retrieval.multi_hop_top_k,
            escalate_on_incorrect=retrieval.escalate_on_incorrect,
            recursion_limit=corrective.recursion_limit,
        ),
        telemetry=observer,
        # The corrective budget as a deadline every LLM call (and retry) inside the run respects.
        corrective_scope=lambda: within(corrective.budget_max_seconds),
    )


def llm_checks(settings: Settings, llm: LLMClient, http: httpx.AsyncClient, *, pinged: bool) -> dict[str, Check]:
    """Readiness of each LLM upstream: its breaker is not open, and its ``/models`` answers (``pinged``: not
    for an injected primary model, which has no endpoint)."""
    endpoint, limit = settings.llm_endpoint, settings.server.readiness_timeout_s
    targets = {"llm": (PRIMARY, endpoint.base_url, endpoint.api_key, pinged)}
    if endpoint.has_fallback:
        url, key = endpoint.fallback_base_url or endpoint.base_url, endpoint.fallback_api_key or endpoint.api_key
        targets["llm_fallback"] = (FALLBACK, url, key, True)

    def check_of(upstream: str, url: str, key: SecretStr, ping: bool) -> Check:
        async def check() -> None:
            llm.check_breaker(upstream)
            if ping:
                await ping_llm(http, url, key, limit)

        return check

    return {name: check_of(*target) for name, target in targets.items()}


def open_cache_layer(
    settings: Settings, redis: ResilientRedis | None, telemetry: Telemetry | None = None
) -> CacheLayer | None:
    if not settings.cache.enabled:
        return None
    return open_cache(
        redis,
        settings.cache,
        namespace=settings.answer_fingerprint(),
        events=telemetry or Telemetry(None, None),
    )


def _describe_cache(cache: CacheLayer | None) -> str:
    if cache is None:
        return "disabled"
    if isinstance(cache.backend, RedisBackend):
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
            redis = open_redis(settings.redis, longest_call_s=settings.access.rate_limit_timeout_s, events=telemetry)
            if redis is not None:
                stack.push_async_callback(redis.aclose)
            app.state.access = open_access(
                settings.access, settings.server.host, redis
            )  # read by the controllers' key checks, before any handler
            http = await stack.enter_async_context(httpx.AsyncClient())
            embeddings = overrides.embeddings
            if embeddings is None:
                embeddings = await asyncio.to_thread(build_embeddings, settings.embeddings, settings.llm_endpoint)
            if isinstance(embeddings, USEEmbeddings):  # last out: no run of its may outlive the app
                stack.push_async_callback(asyncio.to_thread, embeddings.close)
            dimensions = embedding_dimensions(embeddings)
            store = overrides.vector_store or await open_vector_store(settings.vector_store, dimensions)
            stack.push_async_callback(store.close)
            endpoint = settings.llm_endpoint
            upstream_http = await stack.enter_async_context(upstream_client(endpoint.transport, endpoint.timeout_s))
            llm = open_llm_client(
                settings.llm, endpoint, telemetry=telemetry, chat_model=overrides.chat_model, http_client=upstream_http
            )
            cache = open_cache_layer(settings, redis, telemetry)
            if cache is not None:  # answers are stored after they are sent: those under way, before Redis closes
                stack.push_async_callback(cache.responses.drain)
            curation_store = await open_curation_store(settings, stack)
            changes = KnowledgeChanges(curation_store) if curation_store is not None else None
            query_embeddings = embeddings
            kept_vectors = cache is not None and settings.cache.embedding_ttl_s > 0
            shared_vectors = kept_vectors and shares_embeddings(settings.cache, settings.embeddings.provider)
            if cache is not None and kept_vectors:
                model = f"{settings.embeddings.provider}:{settings.embeddings.model}"
                query_embeddings = cache.wrap_embeddings(
                    embeddings,
                    model=model,
                    ttl_s=settings.cache.embedding_ttl_s,
                    process_entries=None if shared_vectors else settings.cache.embedding_max_entries,
                )
            versions = cache.versions if cache is not None else None
            matrices = None
            if versions is not None and settings.vector_store.probe_index_max_mb > 0:
                matrices = TenantMatrices(store, versions, settings.vector_store.probe_index_max_mb * 1024 * 1024)
                stack.push_async_callback(matrices.aclose)
                # One BLAS thread for the app's life: the probe's product is too small to share out (tenant_matrix).
                stack.enter_context(threadpool_limits(limits=1, user_api="blas"))
            knowledge = KnowledgeBase(
                query_embeddings,
                store,
                Chunker(settings.chunking.size, settings.chunking.overlap),
                versions=versions,
                on_change=changes,
                hybrid=settings.retrieval.hybrid_search,
                matrices=matrices,
            )
            curation = None
            if curation_store is not None and changes is not None:
                curation = await start_curation(settings, curation_store, knowledge, llm, telemetry, changes, stack)
            # Router training embeds in bulk with the sync API: it gets the unwrapped model.
            router = await build_router(settings, embeddings, llm, knowledge)
            guard = await asyncio.to_thread(Guardrails.from_settings, settings.guard, telemetry)  # a name model loads
            table = build_route_table(settings, llm, knowledge, http, embeddings, telemetry, guard)
            profiles = await open_profiles(
                settings, curation_store, llm, stack, chat_model=overrides.chat_model, http_client=upstream_http
            )

            query_service = QueryService(
                knowledge,
                router,
                table,
                cache=cache.responses if cache is not None else None,
                semantic=open_semantic_cache(
                    cache, settings.semantic_cache, query_embeddings, namespace=settings.answer_fingerprint()
                ),
                versions=cache.versions if cache is not None else None,
                telemetry=telemetry,
                on_answer=curation.recorder.observe if curation is not None else None,
                guard=guard,
                profiles=profiles,
                # Before screening only where the question never leaves the process, and where an answer-cache hit
                # lets nothing go to waste: its vector is kept in this process (gateway.query_vector).
                early_vectors=settings.embeddings.local and not shared_vectors and (cache is None or kept_vectors),
            )
            if curation is not None:
                curation.attach(query_service)
            app.state.curation = curation
            app.state.services = Services(
                settings=settings,
                http=http,
                llm=llm,
                knowledge=knowledge,
                query_service=query_service,
                llm_checks=llm_checks(settings, llm, http, pinged=overrides.chat_model is None),
                cache=cache,
                redis=redis,
                curation_store=curation_store,
                telemetry=telemetry,
                profiles=profiles,
            )
            if settings.server.load_sample_kb:
                try:
                    chunks = await load_sample_kb(knowledge)
                except ChangeNotAcknowledgedError as exc:  # a demo convenience must not stop a start-up
                    logger.warning("sample knowledge base not (fully) loaded: %s", exc.detail)
                else:
                    logger.info("sample knowledge base loaded into tenant 'default' (%d chunks)", chunks)
            logger.info(
                "gateway ready: llm=%s at %s, vector store=%s, router=%s, cache=%s",
                settings.llm.model,
                settings.llm_endpoint.base_url,
                store.name,
                router.classifier_name,
                _describe_cache(cache),
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

    app = Litestar(
        route_handlers=[
            QueryController,
            DocumentController,
            HealthController,
            ChatController,
            MetricsController,
            FeedbackController,
            CurationController,
            EvalSuiteController,
            ReviewController,
            ProfileController,
        ],
        template_config=template_config(),
        middleware=[trace_requests],
        lifespan=[_lifespan(settings, overrides)],
        dependencies={
            "services": Provide(provide_services, sync_to_thread=False),
            "settings": Provide(lambda: settings, sync_to_thread=False, use_cache=True),
            "query_service": Provide(provide_query_service, sync_to_thread=False),
            "knowledge": Provide(provide_knowledge, sync_to_thread=False),
            "principal": Provide(provide_principal, sync_to_thread=False),
            "access": Provide(provide_access, sync_to_thread=False),
            "chat_scope": Provide(provide_chat_scope, sync_to_thread=False),
            "curation": Provide(provide_curation, sync_to_thread=False),
            "profiles": Provide(provide_profiles, sync_to_thread=False),
        },
        request_max_body_size=settings.limits.max_body_bytes,
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
    early_vector.install(app, CHAT_ACCESS)  # in front of the router: a chat question's vector begun first
    return app
