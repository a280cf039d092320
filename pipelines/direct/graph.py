"""The direct route: one node, ``answer_directly``, run on its own or as a one-node graph.

The route table runs the node through :func:`run`, not through the compiled graph the other routes run: LangGraph's
loop (channels, a task per step, the callback and config plumbing around them) adds ~0.8 ms of CPU to the node's
16 µs in process, whichever public way the graph is run (``python -m tests.benchmarks.direct_graph``), and
~1.3 ms to a served ``direct`` miss of ~9 ms (``tests.benchmarks.miss_ab``; figures in
``tests/benchmarks/RESULTS.md``), for a graph with one node and no branch that has nothing to schedule.
:func:`build_graph` is the same node as a LangGraph graph, for tools that take a graph;
``tests/unit/test_pipelines.py`` checks both give the same state and stream the same text.
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
from pipelines.shared import AnswerText, Generate, Update, advanced, instrument


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
    ``writer`` receives what a live run streams, as LangGraph's ``custom`` stream mode would.

    The bypass of the graph's loop: running every route through its compiled graph was worth at most 0.1 ms of
    CPU a request, and the loop costs ~0.8 ms in process whatever the stream modes, checkpointer or durability,
    ~1.3 ms per served miss (the module says where the figures come from)."""
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
