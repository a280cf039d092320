"""The direct graph: one node, ``answer_directly``."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pipelines.direct.prompts import SYSTEM
from pipelines.direct.state import DirectState
from pipelines.shared.deps import ChatClient
from pipelines.shared.telemetry import NO_TELEMETRY, PipelineTelemetry, instrument


def build_graph(llm: ChatClient, telemetry: PipelineTelemetry = NO_TELEMETRY) -> CompiledStateGraph[Any, Any, Any, Any]:
    async def answer_directly(state: DirectState) -> dict[str, Any]:
        reply = await llm.chat([SystemMessage(SYSTEM), HumanMessage(state["query"])], node="answer_directly")
        return {
            "answer": reply.text,
            "sources": [],
            "abstained": False,
            "steps": ["answer_directly"],
            "llm_calls": [reply.call],
        }

    builder = StateGraph(DirectState)
    builder.add_node("answer_directly", instrument(telemetry, "direct", "answer_directly", answer_directly))
    builder.add_edge(START, "answer_directly")
    builder.add_edge("answer_directly", END)
    return builder.compile(name="direct")
