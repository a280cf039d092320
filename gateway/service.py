"""The request path as one straight line: validate -> embed once -> route -> run -> respond."""

from __future__ import annotations

import time
from dataclasses import dataclass

import msgspec

from gateway.cache.exact import ExactCache
from gateway.errors import ClientError
from gateway.knowledge import KnowledgeBase
from gateway.schemas import QueryRequest, QueryResponse, RouteResponse, Source, Usage
from pipelines.shared.deps import LLMCall, Passage
from routes.router import FrontRouter
from routes.table import RouteTable
from routes.types import RouteDecision


@dataclass(frozen=True, slots=True)
class QueryLimits:
    max_query_chars: int


class QueryService:
    def __init__(
        self,
        knowledge: KnowledgeBase,
        router: FrontRouter,
        table: RouteTable,
        limits: QueryLimits,
        cache: ExactCache[QueryResponse] | None = None,
    ) -> None:
        self._knowledge = knowledge
        self._router = router
        self._table = table
        self._limits = limits
        self._cache = cache

    def _clean(self, query: str) -> str:
        cleaned = query.strip()
        if not cleaned:
            raise ClientError("The query is empty: send a question in the 'query' field.", field="query")
        if len(cleaned) > self._limits.max_query_chars:
            raise ClientError(
                f"The query has {len(cleaned)} characters; the maximum is {self._limits.max_query_chars}. "
                "Shorten it or raise GATEWAY_MAX_QUERY_CHARS.",
                field="query",
            )
        return cleaned

    async def route(self, query: str) -> RouteDecision:
        cleaned = self._clean(query)
        vector = await self._knowledge.embed_query(cleaned)
        decision, _ = await self._router.decide(cleaned, "auto", vector)
        return decision

    async def answer(self, request: QueryRequest) -> QueryResponse:
        started = time.perf_counter()
        query = self._clean(request.query)
        if self._cache is None:
            return await self._compute(request, query, started)
        outcome = await self._cache.get_or_compute(
            tenant=request.tenant,
            route=request.route,
            query=query,
            params={"top_k": request.top_k, "allow_escalation": request.allow_escalation},
            compute=lambda: self._compute(request, query, started),
        )
        if not outcome.cached:
            return outcome.value
        # A hit costs no model call: report zero new usage so clients never count the cost twice.
        return msgspec.structs.replace(
            outcome.value,
            cached=True,
            latency_ms=round((time.perf_counter() - started) * 1000, 2),
            usage=Usage(llm_calls=0, input_tokens=0, output_tokens=0, cost_usd=0.0),
        )

    async def _compute(self, request: QueryRequest, query: str, started: float) -> QueryResponse:
        vector = await self._knowledge.embed_query(query)
        decision, router_calls = await self._router.decide(query, request.route, vector)
        result = await self._table.run(
            decision.route,
            query=query,
            tenant=request.tenant,
            top_k=request.top_k,
            query_vector=vector,
            allow_escalation=request.allow_escalation,
        )
        calls = [*router_calls, *result.llm_calls]
        return QueryResponse(
            answer=result.answer,
            route=result.route,
            route_confidence=round(decision.confidence, 4),
            route_reason=decision.reason,
            sources=_sources(result.sources),
            cached=False,
            usage=_usage(calls),
            latency_ms=round((time.perf_counter() - started) * 1000, 2),
            steps=(["route_query"] if router_calls else []) + result.steps,
            classifier=decision.classifier,
            classified_route=decision.route,
            abstained=result.abstained,
            evidence=_sources(result.context),
            stop_reason=result.stop_reason,
            escalated_from=result.escalated_from,
        )


def to_route_response(decision: RouteDecision) -> RouteResponse:
    return RouteResponse(
        route=decision.route,
        confidence=round(decision.confidence, 4),
        reason=decision.reason,
        classifier=decision.classifier,
    )


def _sources(passages: list[Passage]) -> list[Source]:
    """One entry per document, with its best chunk's score, best first."""
    best: dict[str, Passage] = {}
    for passage in passages:
        if passage.doc_id not in best or passage.score > best[passage.doc_id].score:
            best[passage.doc_id] = passage
    ordered = sorted(best.values(), key=lambda p: p.score, reverse=True)
    return [Source(id=p.doc_id, title=p.title, score=round(p.score, 4)) for p in ordered]


def _usage(calls: list[LLMCall]) -> Usage:
    return Usage(
        llm_calls=len(calls),
        input_tokens=sum(c.input_tokens for c in calls),
        output_tokens=sum(c.output_tokens for c in calls),
        cost_usd=round(sum(c.cost_usd for c in calls), 8),
    )
