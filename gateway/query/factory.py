"""The question path of one app: the front router, the route table (every graph compiled once) and the service
that puts them behind the answer caches."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from gateway.cache import CacheLayer, open_semantic_cache
from gateway.guardrails import Guardrails, ScreenedRetriever, ScreenedSearch
from gateway.knowledge import DenseSearch, KnowledgeBase, LocalStoreSearch
from gateway.platform import Platform
from gateway.profiles import Profiles
from gateway.providers import TavilySearch, within
from gateway.query.router_artefact import passage_embedder, question_embedder, train_knowledge_router
from gateway.query.schemas import QueryResponse
from gateway.query.service import AnswerCaches, OnAnswer, QueryService
from gateway.settings import RetrievalSettings, Settings
from pipelines.corrective import CorrectiveContext
from pipelines.direct import DirectContext
from pipelines.shared import Retriever, WebSearch
from pipelines.single_hop import SingleHopContext
from routes.calibration import Calibration
from routes.knowledge_router import KnowledgeRouter
from routes.llm_router import LLMRouter
from routes.probe import PROBE_DEPTH
from routes.router import FrontRouter
from routes.table import PipelineContexts, RoutePolicy, RouteTable


async def open_query_service(
    settings: Settings,
    platform: Platform,
    knowledge: KnowledgeBase,
    guard: Guardrails,
    profiles: Profiles,
    calibration: Calibration,
    stack: AsyncExitStack,
    *,
    on_answer: OnAnswer | None = None,
) -> QueryService:
    """The service every answer path goes through; ``on_answer`` sees every answer as it leaves (the curation
    recorder). The router is trained (or its artefact loaded) in a worker
    thread: it embeds its training cases in bulk with the unwrapped model. ``calibration``: the scorers and
    thresholds fitted for the embedder in use (:func:`gateway.query.calibration.load_calibration`)."""
    router = await build_router(settings, platform, knowledge)
    table = build_route_table(settings, platform, knowledge, calibration, guard)
    return QueryService(
        knowledge,
        router,
        table,
        open_answer_caches(settings, platform.cache, knowledge, calibration, stack),
        telemetry=platform.telemetry,
        on_answer=on_answer,
        guard=guard,
        profiles=profiles,
    )


def open_answer_caches(
    settings: Settings,
    cache: CacheLayer | None,
    knowledge: KnowledgeBase,
    calibration: Calibration,
    stack: AsyncExitStack,
) -> AnswerCaches:
    """The exact and semantic answer caches on the app's cache layer, under a namespace of the settings that shape
    answers (:meth:`~gateway.settings.Settings.answer_fingerprint`)."""
    if cache is None:
        return AnswerCaches()
    namespace = settings.answer_fingerprint()
    # An abstention is an answer that failed its checks (no passage, no supported sentence): never kept as though it
    # were a good one, so the next asker gets a fresh try (a new document, a recovered model).
    exact = cache.answers(QueryResponse, namespace=namespace, cacheable=lambda response: not response.abstained)
    # Answers are stored after they are sent: those under way are stored before Redis closes (opened earlier, so
    # closed later).
    stack.push_async_callback(exact.drain)
    embeddings = knowledge.embeddings
    semantic = open_semantic_cache(cache, settings.semantic_cache, embeddings, calibration, namespace=namespace)
    return AnswerCaches(exact, semantic, cache.versions)


async def build_router(settings: Settings, platform: Platform, knowledge: KnowledgeBase) -> FrontRouter:
    """The router probes the tenant's store by the query vector alone, as it was trained (``DenseSearch``), deep
    enough for the retrieving routes' first search to be computed from its ranking (:func:`probe_depth`)."""
    embeddings = platform.embeddings
    model = await asyncio.to_thread(
        train_knowledge_router, settings, passage_embedder(embeddings), question_embedder(embeddings)
    )
    depth = probe_depth(settings.retrieval, knowledge)
    classifier = settings.router.classifier
    return FrontRouter(KnowledgeRouter(model), LLMRouter(platform.llm), classifier, DenseSearch(knowledge), depth)


def probe_depth(retrieval: RetrievalSettings, knowledge: KnowledgeBase) -> int:
    """How deep the router's probe searches: what its signals read, or the dense ranking a retrieving route's first
    search is computed from (three times its top k when retrieval is hybrid), whichever is deeper.

    Single-hop's first search (``default_top_k``) is always computed from the probe. Multi-hop's deeper one
    (``multi_hop_top_k``) only where tenants are searched in the store (no in-memory matrices, or a store they
    cannot load: a LanceDB scan, a Pinecone call per search). With the matrices, searching again costs that route
    one matrix product on a path of several model calls, while a deeper probe would make passages on every
    ``auto`` request for the one route that could reuse them."""
    routes = [retrieval.default_top_k]
    if knowledge.matrices is None or not knowledge.matrices.searches_in_memory:
        routes.append(retrieval.multi_hop_top_k)
    return max(PROBE_DEPTH, knowledge.ranking_depth(max(routes)))


def build_route_table(
    settings: Settings,
    platform: Platform,
    knowledge: KnowledgeBase,
    calibration: Calibration,
    guard: Guardrails | None = None,
) -> RouteTable:
    """Every graph compiled once, at start-up, with the runtime contexts (the lifespan's clients) its runs get; the
    scorers and the thresholds not set in the environment are ``calibration``'s."""
    corrective, retrieval, llm, telemetry = settings.corrective, settings.retrieval, platform.llm, platform.telemetry
    grounding = settings.grounding.policy(calibration)
    policy = corrective.policy(grounding, calibration)
    search: WebSearch = LocalStoreSearch(knowledge)
    if settings.web_search.tavily_api_key is not None:
        key = settings.web_search.tavily_api_key.get_secret_value()
        search = TavilySearch(platform.http, key, platform.embeddings)
    # Passages reach the model screened for injected instructions (flagged, dropped or refused per tenant).
    retriever: Retriever = knowledge
    if guard is not None:
        retriever, search = ScreenedRetriever(knowledge, guard), ScreenedSearch(search, guard)
    contexts = PipelineContexts(
        direct=DirectContext(llm=llm, telemetry=telemetry),
        single_hop=SingleHopContext(
            llm=llm,
            retriever=retriever,
            grounding=grounding,
            relevance=policy.relevance,
            lower=retrieval.escalate_threshold(calibration),
            upper=policy.upper,
            telemetry=telemetry,
        ),
        corrective=CorrectiveContext(
            llm=llm, retriever=retriever, search=search, embedder=knowledge, policy=policy, telemetry=telemetry
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
        telemetry=telemetry,
        # The corrective budget as a deadline every LLM call (and retry) inside the run respects.
        corrective_scope=lambda: within(corrective.max_seconds),
    )
