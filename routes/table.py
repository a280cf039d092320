"""The route table: what each route runs, and the policies between routes.

Kept apart from the HTTP layer so that the mapping from a decision to a pipeline (and, with the
corrective pipeline, escalation between routes) reads in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langgraph.graph.state import CompiledStateGraph

from pipelines.shared.deps import LLMCall, Passage
from routes.types import Route

Graph = CompiledStateGraph[Any, Any, Any, Any]


@dataclass(frozen=True, slots=True)
class RoutePolicy:
    default_top_k: int
    max_top_k: int
    multi_hop_top_k: int


@dataclass(slots=True)
class RouteResult:
    route: Route
    answer: str
    sources: list[Passage]
    abstained: bool
    steps: list[str] = field(default_factory=list)
    llm_calls: list[LLMCall] = field(default_factory=list)


class RouteTable:
    def __init__(self, direct: Graph, single_hop: Graph, policy: RoutePolicy) -> None:
        self._direct = direct
        self._single_hop = single_hop
        self._policy = policy

    async def run(
        self, route: Route, *, query: str, tenant: str, top_k: int | None, query_vector: list[float] | None
    ) -> RouteResult:
        if route == "direct":
            state = await self._direct.ainvoke({"query": query, "tenant": tenant})
            return _result(route, state, [])
        k = min(top_k or self._policy.default_top_k, self._policy.max_top_k)
        prefix: list[str] = []
        if route == "multi_hop":
            # Until the corrective pipeline lands, multi-hop is plain RAG with a wider net.
            k = min(max(top_k or 0, self._policy.multi_hop_top_k), self._policy.max_top_k)
            prefix = [f"multi_hop_fallback: single_hop(k={k}), corrective pipeline not installed"]
        state = await self._single_hop.ainvoke(
            {"query": query, "tenant": tenant, "top_k": k, "query_vector": query_vector}
        )
        return _result(route, state, prefix)


def _result(route: Route, state: dict[str, Any], prefix: list[str]) -> RouteResult:
    return RouteResult(
        route=route,
        answer=state.get("answer", ""),
        sources=list(state.get("sources", [])),
        abstained=bool(state.get("abstained", False)),
        steps=[*prefix, *state.get("steps", [])],
        llm_calls=list(state.get("llm_calls", [])),
    )
