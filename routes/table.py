"""The route table: what each route runs, and the policies between routes.

``direct`` runs the direct graph; ``single_hop`` runs plain RAG and, when its LLM-free retrieval
check says *Incorrect*, escalates to the corrective graph instead of answering "I don't know";
``multi_hop`` runs the corrective graph. The route reported is the one that answered.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from langgraph.errors import GraphRecursionError
from langgraph.graph.state import CompiledStateGraph

from pipelines.shared.deps import LLMCall, Passage
from pipelines.shared.telemetry import NO_TELEMETRY, PipelineTelemetry
from routes.types import Route

Graph = CompiledStateGraph[Any, Any, Any, Any]


@dataclass(frozen=True, slots=True)
class RoutePolicy:
    default_top_k: int
    max_top_k: int
    multi_hop_top_k: int
    escalate_on_incorrect: bool = True
    recursion_limit: int = 40


@dataclass(slots=True)
class RouteResult:
    route: Route
    answer: str
    sources: list[Passage]
    abstained: bool
    steps: list[str] = field(default_factory=list)
    llm_calls: list[LLMCall] = field(default_factory=list)
    context: list[Passage] = field(default_factory=list)
    stop_reason: str | None = None
    escalated_from: Route | None = None


class RouteTable:
    def __init__(
        self,
        direct: Graph,
        single_hop: Graph,
        corrective: Graph,
        policy: RoutePolicy,
        telemetry: PipelineTelemetry = NO_TELEMETRY,
    ) -> None:
        self._direct = direct
        self._single_hop = single_hop
        self._corrective = corrective
        self._policy = policy
        self._telemetry = telemetry

    def _k(self, requested: int | None, floor: int) -> int:
        return min(max(requested or floor, 1), self._policy.max_top_k)

    async def run(
        self,
        route: Route,
        *,
        query: str,
        tenant: str,
        top_k: int | None,
        query_vector: list[float] | None,
        allow_escalation: bool = True,
    ) -> RouteResult:
        if route == "direct":
            with self._telemetry.route("direct"):
                return _result(route, await self._direct.ainvoke({"query": query, "tenant": tenant}))
        if route == "multi_hop":
            return await self._run_corrective(query, tenant, self._k(top_k, self._policy.multi_hop_top_k), query_vector)
        with self._telemetry.route("single_hop"):
            state = await self._single_hop.ainvoke(
                {
                    "query": query,
                    "tenant": tenant,
                    "top_k": self._k(top_k, self._policy.default_top_k),
                    "query_vector": query_vector,
                    "allow_escalation": allow_escalation and self._policy.escalate_on_incorrect,
                }
            )
        plain = _result("single_hop", state)
        if not state.get("escalate"):
            return plain
        self._telemetry.escalation("single_hop", "multi_hop", "retrieval_incorrect")
        corrective = await self._run_corrective(
            query, tenant, self._k(top_k, self._policy.multi_hop_top_k), query_vector
        )
        corrective.steps = [*plain.steps, "escalate: single_hop -> multi_hop (retrieval incorrect)", *corrective.steps]
        corrective.llm_calls = [*plain.llm_calls, *corrective.llm_calls]
        corrective.escalated_from = "single_hop"
        return corrective

    async def _run_corrective(
        self, query: str, tenant: str, top_k: int, query_vector: list[float] | None
    ) -> RouteResult:
        initial = {
            "query": query,
            "tenant": tenant,
            "top_k": top_k,
            "query_vector": query_vector,
            "started_at": time.monotonic(),
        }
        try:
            with self._telemetry.route("multi_hop"):
                state = await self._corrective.ainvoke(
                    initial, config={"recursion_limit": self._policy.recursion_limit}
                )
        except GraphRecursionError:
            # Budgets end every loop first; reaching this means a routing bug, so say so plainly.
            return RouteResult(
                route="multi_hop",
                answer="The corrective pipeline hit its step limit before finishing; please rephrase the question.",
                sources=[],
                abstained=True,
                steps=["stop: recursion_limit"],
                stop_reason="recursion_limit",
            )
        return _result("multi_hop", state)


def _result(route: Route, state: dict[str, Any]) -> RouteResult:
    return RouteResult(
        route=route,
        answer=state.get("answer", ""),
        sources=list(state.get("sources", [])),
        abstained=bool(state.get("abstained", False)),
        steps=list(state.get("steps", [])),
        llm_calls=list(state.get("llm_calls", [])),
        context=list(state.get("context", [])),
        stop_reason=state.get("stop_reason"),
    )
