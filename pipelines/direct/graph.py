"""The direct route: one node, ``answer_directly``, run on its own or as a one-node graph.

The route table runs the node through :func:`run`: LangGraph's loop (channels, a task per step, the
callback and config plumbing around them) costs ~1.3 ms of CPU per run against the node's own 25 µs
(``python -m tests.benchmarks.llm_layers``), a tenth of what a whole request costs LiteLLM's proxy, and a graph
with one node and no branch has nothing for it to schedule. :func:`build_graph` is the same node as a
LangGraph graph, for tools that take a graph; ``tests/unit/test_pipelines.py`` checks both give the same state.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import StreamWriter

from pipelines.direct.prompts import RULES
from pipelines.direct.state import DirectContext, DirectState
from pipelines.shared.events import AnswerText, Generate
from pipelines.shared.state import Update, advanced
from pipelines.shared.telemetry import instrument


async def answer_directly(state: DirectState, runtime: Runtime[DirectContext]) -> Update:
    """The model's answer, streamed token by token in a live run: there is no evidence to check it against."""
    ctx = runtime.context
    messages = [SystemMessage(ctx.assistant.system_prompt(RULES, state.query)), HumanMessage(state.query)]
    writer = runtime.stream_writer
    on_text = (lambda delta: writer(AnswerText(delta))) if ctx.live else None
    reply = await ctx.llm.chat(messages, node="answer_directly", on_text=on_text)
    return {
        "answer": reply.text,
        "sources": [],
        "abstained": False,
        "events": [Generate(mode="direct")],
        "llm_calls": [reply.call],
    }


# The node as both paths run it: timed and traced by the run's telemetry.
ANSWER_DIRECTLY = instrument("direct", "answer_directly", answer_directly)


async def run(query: str, tenant: str, context: DirectContext, writer: StreamWriter | None = None) -> DirectState:
    """The direct route's final state: its one node on a fresh state, the update merged as LangGraph merges it.
    ``writer`` receives what a live run streams, as LangGraph's ``custom`` stream mode would."""
    state = DirectState(query=query, tenant=tenant)
    runtime = Runtime(context=context) if writer is None else Runtime(context=context, stream_writer=writer)
    return advanced(state, await ANSWER_DIRECTLY(state, runtime))


def build_graph() -> CompiledStateGraph[Any, Any, Any, Any]:
    """The same node as a compiled graph; each run gets its :class:`DirectContext` at invoke time."""
    builder = StateGraph(DirectState, context_schema=DirectContext)
    builder.add_node("answer_directly", ANSWER_DIRECTLY)
    builder.add_edge(START, "answer_directly")
    builder.add_edge("answer_directly", END)
    return builder.compile(name="direct")
