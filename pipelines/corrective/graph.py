"""The corrective graph: CRAG (evaluate, refine, rewrite, search more) + Self-RAG (IsSup, IsUse).

    retrieve -> evaluate -+-> refine -> generate -> check_grounded -+-> check_useful -+-> finish
                 ^  ^     |                ^             |           |                 |
                 |  |     +-> rewrite_query <------------+-----------+-----------------+
                 |  +-- search_more <--+      (regenerate once, then cautious_answer)
                 +-- search_hop <-- plan_hop <-- evaluate   (multi-hop: the next sub-question, up to max_hops)

``answer_plainly`` runs once, after the first evaluation (its routing is that evaluation's, taken again): plain
RAG's answer on the same retrieval, the floor ``finish`` returns unless a later answer rests on evidence it lacked
(:mod:`.floor`); ``generate`` takes it again when handed the same passages.

``plan_hop`` (IRCoT / self-ask, :mod:`.hops`) runs after an evaluation with evidence and before any
answer: the model names the next sub-question or finds the evidence sufficient (then ``refine``, or
``rewrite_query`` when the evaluator kept nothing to answer from).

Every loop is bounded three ways: ``max_rewrites``, the per-request LLM-call and time budget, and
LangGraph's recursion limit. The nodes are in :mod:`.nodes`, their routing decisions in
:mod:`.routing`; the reason a run stopped is kept in ``stop_reason``.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pipelines.corrective import nodes
from pipelines.corrective.routing import follow
from pipelines.corrective.state import CorrectiveContext, CorrectiveState
from pipelines.shared import instrument

NODES = (
    nodes.retrieve,
    nodes.evaluate,
    nodes.answer_plainly,
    nodes.plan_hop,
    nodes.search_hop,
    nodes.rewrite_query,
    nodes.search_more,
    nodes.refine,
    nodes.generate,
    nodes.check_grounded,
    nodes.check_useful,
    nodes.cautious_answer,
    nodes.finish,
)


def build_graph() -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compiled once at start-up; each run gets its :class:`CorrectiveContext` at invoke time."""
    builder = StateGraph(CorrectiveState, context_schema=CorrectiveContext)
    for node in NODES:
        builder.add_node(node.__name__, instrument("corrective", node.__name__, node))
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "evaluate")
    after_evaluation = ["plan_hop", "rewrite_query", "refine", "cautious_answer", "finish"]
    builder.add_conditional_edges("evaluate", follow, ["answer_plainly", *after_evaluation])
    builder.add_conditional_edges("answer_plainly", follow, after_evaluation)
    builder.add_conditional_edges("plan_hop", follow, ["search_hop", "refine", "rewrite_query"])
    builder.add_edge("search_hop", "evaluate")
    builder.add_edge("rewrite_query", "search_more")
    builder.add_edge("search_more", "evaluate")
    builder.add_conditional_edges("refine", follow, ["generate", "cautious_answer"])
    builder.add_edge("generate", "check_grounded")
    builder.add_conditional_edges(
        "check_grounded", follow, ["check_useful", "generate", "rewrite_query", "cautious_answer", "finish"]
    )
    builder.add_conditional_edges("check_useful", follow, ["rewrite_query", "finish"])
    builder.add_edge("cautious_answer", "finish")
    builder.add_edge("finish", END)
    return builder.compile(name="corrective")
