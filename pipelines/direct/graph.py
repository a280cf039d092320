"""The direct graph: one node, ``answer_directly``, the model's answer with no retrieval."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from pipelines.direct.prompts import RULES
from pipelines.direct.state import DirectContext, DirectState
from pipelines.shared.events import AnswerText, Generate
from pipelines.shared.state import Update
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


# Timed and traced by the run's telemetry.
ANSWER_DIRECTLY = instrument("direct", "answer_directly", answer_directly)


def build_graph() -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compiled once at start-up; each run gets its :class:`DirectContext` at invoke time."""
    builder = StateGraph(DirectState, context_schema=DirectContext)
    builder.add_node("answer_directly", ANSWER_DIRECTLY)
    builder.add_edge(START, "answer_directly")
    builder.add_edge("answer_directly", END)
    return builder.compile(name="direct")
