"""The single-hop graph: ``retrieve`` -> ``generate_answer``."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pipelines.shared.deps import ChatClient, Retriever
from pipelines.shared.generation import GroundingPolicy, generate_grounded
from pipelines.single_hop.state import SingleHopState


def build_graph(
    llm: ChatClient, retriever: Retriever, policy: GroundingPolicy
) -> CompiledStateGraph[Any, Any, Any, Any]:
    async def retrieve(state: SingleHopState) -> dict[str, Any]:
        passages = await retriever.search(
            state["tenant"], state["query"], state["top_k"], vector=state.get("query_vector")
        )
        return {"passages": passages, "steps": [f"retrieve(k={state['top_k']}, found={len(passages)})"]}

    async def generate_answer(state: SingleHopState) -> dict[str, Any]:
        passages = state.get("passages", [])
        result = await generate_grounded(llm, state["query"], passages, policy, node="generate_answer")
        return {
            "answer": result.answer,
            "sources": result.cited,
            "abstained": result.abstained,
            "steps": ["generate_answer" + (f" (abstained: {result.note})" if result.abstained else "")],
            "llm_calls": [result.call] if result.call else [],
        }

    builder = StateGraph(SingleHopState)
    builder.add_node("retrieve", retrieve)
    builder.add_node("generate_answer", generate_answer)
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "generate_answer")
    builder.add_edge("generate_answer", END)
    return builder.compile(name="single_hop")
