"""The single-hop graph: ``retrieve`` -> ``assess_retrieval`` -> ``generate_answer`` (or escalate).

``assess_retrieval`` is CRAG's evaluator without the LLM: when every retrieved passage scores below
the lower threshold the plain route cannot answer, so the graph ends with ``escalate`` set and the
route table hands the request to the corrective pipeline instead of answering "I don't know".
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from pipelines.shared import Assess, Generate, Retrieve, Update, fast_verdict, generate_grounded, instrument
from pipelines.single_hop.state import SingleHopContext, SingleHopState


async def retrieve(state: SingleHopState, runtime: Runtime[SingleHopContext]) -> Update:
    retriever = runtime.context.retriever
    passages = await retriever.search(
        state.tenant, state.query, state.top_k, visibility=state.visibility, vector=state.query_vector
    )
    return {"passages": passages, "events": [Retrieve(k=state.top_k, found=len(passages))]}


async def assess_retrieval(state: SingleHopState, runtime: Runtime[SingleHopContext]) -> Update:
    ctx = runtime.context
    verdict = fast_verdict(ctx.relevance, state.query, state.passages, ctx.lower, ctx.upper)
    # An empty tenant has nothing for a rewritten query to find: abstain rather than escalate.
    escalate = verdict == "incorrect" and bool(state.passages) and state.allow_escalation
    ctx.telemetry.verdict("single_hop", verdict)
    return {"verdict": verdict, "escalate": escalate, "events": [Assess(verdict=verdict)]}


def after_assess(state: SingleHopState) -> Literal["generate_answer", "__end__"]:
    return "__end__" if state.escalate else "generate_answer"


async def generate_answer(state: SingleHopState, runtime: Runtime[SingleHopContext]) -> Update:
    ctx = runtime.context
    result = await generate_grounded(
        ctx.llm,
        state.query,
        state.passages,
        ctx.grounding,
        node="generate_answer",
        assistant=ctx.assistant,
        live=runtime.stream_writer if ctx.live else None,
    )
    return {
        "answer": result.answer,
        "sources": result.cited,
        "context": result.context,
        "abstained": result.abstained,
        "events": [Generate(abstention=result.note if result.abstained else None), *result.withheld],
        "llm_calls": [result.call] if result.call else [],
    }


def build_graph() -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compiled once at start-up; each run gets its :class:`SingleHopContext` at invoke time."""
    builder = StateGraph(SingleHopState, context_schema=SingleHopContext)
    for name, node in [
        ("retrieve", retrieve),
        ("assess_retrieval", assess_retrieval),
        ("generate_answer", generate_answer),
    ]:
        builder.add_node(name, instrument("single_hop", name, node))
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "assess_retrieval")
    builder.add_conditional_edges("assess_retrieval", after_assess)
    builder.add_edge("generate_answer", END)
    return builder.compile(name="single_hop")
