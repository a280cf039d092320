"""The single-hop graph: ``retrieve`` -> ``assess_retrieval`` -> ``generate_answer`` (or escalate).

``assess_retrieval`` is CRAG's evaluator without the LLM: when every retrieved passage scores below
the lower threshold the plain route cannot answer, so the graph ends with ``escalate`` set and the
route table hands the request to the corrective pipeline instead of answering "I don't know".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pipelines.shared.deps import ChatClient, Retriever
from pipelines.shared.generation import GroundingPolicy, generate_grounded
from pipelines.shared.relevance import RelevanceModel, fast_verdict
from pipelines.shared.telemetry import NO_TELEMETRY, PipelineTelemetry, instrument
from pipelines.single_hop.state import SingleHopState


@dataclass(frozen=True)
class SingleHopDeps:
    llm: ChatClient
    retriever: Retriever
    grounding: GroundingPolicy
    relevance: RelevanceModel
    lower: float
    upper: float
    telemetry: PipelineTelemetry = NO_TELEMETRY


def build_graph(deps: SingleHopDeps) -> CompiledStateGraph[Any, Any, Any, Any]:
    async def retrieve(state: SingleHopState) -> dict[str, Any]:
        passages = await deps.retriever.search(
            state["tenant"], state["query"], state["top_k"], vector=state.get("query_vector")
        )
        return {"passages": passages, "steps": [f"retrieve(k={state['top_k']}, found={len(passages)})"]}

    async def assess_retrieval(state: SingleHopState) -> dict[str, Any]:
        passages = state.get("passages", [])
        verdict = fast_verdict(deps.relevance, state["query"], passages, deps.lower, deps.upper)
        # An empty tenant has nothing for a rewritten query to find: abstain rather than escalate.
        escalate = verdict == "incorrect" and bool(passages) and state.get("allow_escalation", False)
        deps.telemetry.verdict("single_hop", verdict)
        return {"verdict": verdict, "escalate": escalate, "steps": [f"assess_retrieval: {verdict}"]}

    def after_assess(state: SingleHopState) -> Literal["generate_answer", "__end__"]:
        return "__end__" if state.get("escalate") else "generate_answer"

    async def generate_answer(state: SingleHopState) -> dict[str, Any]:
        passages = state.get("passages", [])
        result = await generate_grounded(deps.llm, state["query"], passages, deps.grounding, node="generate_answer")
        return {
            "answer": result.answer,
            "sources": result.cited,
            "context": result.context,
            "abstained": result.abstained,
            "steps": ["generate_answer" + (f" (abstained: {result.note})" if result.abstained else "")],
            "llm_calls": [result.call] if result.call else [],
        }

    builder = StateGraph(SingleHopState)
    for name, node in [
        ("retrieve", retrieve),
        ("assess_retrieval", assess_retrieval),
        ("generate_answer", generate_answer),
    ]:
        builder.add_node(name, instrument(deps.telemetry, "single_hop", name, node))
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "assess_retrieval")
    builder.add_conditional_edges("assess_retrieval", after_assess)
    builder.add_edge("generate_answer", END)
    return builder.compile(name="single_hop")
