"""What LangGraph's loop adds to the ``direct`` route's one node, per way of running the compiled graph.

    python -m tests.benchmarks.direct_graph [--runs 2000] [--rounds 5]

The route table runs ``answer_directly`` on its own and merges its update by hand
(:func:`pipelines.direct.graph.run`) instead of running the one-node graph the other routes' way. This measures
what the graph would cost per request, in this process, on a model client that answers at once (no transport, no
SDK), so each row is the loop around the node and nothing else:

- ``the node, merged by hand``: what the route table runs;
- ``astream tasks + values``: the route table's way of running single_hop and corrective (the ``tasks`` stream for
  its step timings, ``values`` for the final state), on the graph compiled once;
- the same compiled with ``checkpointer=False``, or run with ``durability="exit"``;
- ``astream tasks + values + custom``: a streamed request's run;
- ``ainvoke`` (``values`` alone) and ``astream updates``: the cheapest ways LangGraph offers to run it at all.

CPU is this process's ``time.process_time()`` per run, after a warm-up, in rounds with the variants interleaved
so drift hits all of them alike; it prints each variant's median, its range over the rounds, and its median less
the node's. Run it on a quiet machine; compare rows, not absolute figures between machines.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StreamMode

from pipelines.direct.graph import ANSWER_DIRECTLY, build_graph, run
from pipelines.direct.state import DirectContext, DirectState
from pipelines.shared.deps import ChatReply, LLMCall, SchemaT, TextSink

QUESTION = "What is the capital of France? Answer in one word."
TENANT = "default"

Run = Callable[[], Awaitable[object]]


class InstantChat:
    """A model that answers at once: what is left is the run around the node."""

    async def chat(
        self, messages: list[BaseMessage], *, node: str, max_tokens: int | None = None, on_text: TextSink | None = None
    ) -> ChatReply:
        if on_text is not None:
            on_text("Paris")
        return ChatReply("Paris", LLMCall(node, "instant", 10, 1, 0.0, 0.0))

    async def structured(
        self, messages: list[BaseMessage], schema: type[SchemaT], *, node: str
    ) -> tuple[SchemaT, LLMCall]:
        raise NotImplementedError("the direct node asks for no structured output")


def without_checkpointer() -> CompiledStateGraph[Any, Any, Any, Any]:
    """:func:`pipelines.direct.graph.build_graph`'s graph, compiled with ``checkpointer=False``."""
    builder = StateGraph(DirectState, context_schema=DirectContext)
    builder.add_node("answer_directly", ANSWER_DIRECTLY)
    builder.add_edge(START, "answer_directly")
    builder.add_edge("answer_directly", END)
    return builder.compile(checkpointer=False, name="direct")


def variants() -> dict[str, Run]:
    context = DirectContext(llm=InstantChat())
    live = DirectContext(llm=InstantChat(), live=True)
    graph = build_graph()
    bare = without_checkpointer()

    def initial() -> dict[str, Any]:
        return {"query": QUESTION, "tenant": TENANT}

    def streamed(
        compiled: CompiledStateGraph[Any, Any, Any, Any],
        modes: Sequence[StreamMode],
        ctx: DirectContext = context,
        **options: Any,
    ) -> Run:
        async def consume() -> object:
            last: object = None
            async for chunk in compiled.astream(initial(), context=ctx, stream_mode=list(modes), **options):
                last = chunk
            return last

        return consume

    async def alone() -> object:
        return await run(QUESTION, TENANT, context)

    return {
        "the node, merged by hand (the route table's bypass)": alone,
        "astream tasks + values (how the table runs the other graphs)": streamed(graph, ["tasks", "values"]),
        "the same, compiled with checkpointer=False": streamed(bare, ["tasks", "values"]),
        'the same, durability="exit"': streamed(graph, ["tasks", "values"], durability="exit"),
        "astream tasks + values + custom (a streamed request)": streamed(graph, ["tasks", "values", "custom"], live),
        "ainvoke (values alone)": lambda: graph.ainvoke(initial(), context=context),
        "astream updates alone": streamed(graph, ["updates"]),
    }


async def cpu_per_run(call: Run, runs: int) -> float:
    """Microseconds of this process's CPU per run, after a warm-up."""
    for _ in range(min(200, runs)):
        await call()
    started = time.process_time()
    for _ in range(runs):
        await call()
    return 1e6 * (time.process_time() - started) / runs


async def measure(runs: int, rounds: int) -> dict[str, list[float]]:
    calls = variants()
    figures: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            figures[name].append(await cpu_per_run(call, runs))
    return figures


def render(figures: dict[str, list[float]]) -> str:
    lines = ["| variant | CPU µs per run (median) | range over rounds | added to the node |", "|---|---:|---:|---:|"]
    base = statistics.median(next(iter(figures.values())))
    for name, values in figures.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {median:.0f} | {min(values):.0f}–{max(values):.0f} | {median - base:+.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000, help="runs per variant per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    # durability="exit" on a graph without a checkpointer: LangGraph warns once per run that it changes nothing.
    warnings.filterwarnings("ignore", message=".*durability.*")
    print(render(asyncio.run(measure(args.runs, args.rounds))))


if __name__ == "__main__":
    main()
