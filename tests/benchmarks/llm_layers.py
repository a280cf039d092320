"""What each layer of one model call costs in CPU, peeled one at a time.

    python -m tests.benchmarks.llm_layers [--calls 1000] [--rounds 3]

A ``direct`` miss spends about half of its CPU inside the model call. This measures that call layer by
layer, in this process, against the shared kit's zero-latency fake upstream (``shared/perf/run_fake.sh``,
started and stopped here), so each row's difference from the one above it is what that layer adds:

- ``httpx POST``: the request the SDK would send, sent with httpx directly (the transport alone);
- ``AsyncOpenAI create``: the OpenAI SDK (request transform, httpx, response models);
- ``ChatOpenAI ainvoke``: LangChain around the SDK (callback manager, message conversion, a worker
  thread hop for every result, raw-response parsing);
- ``… on the gateway's client``: the same model on the app's upstream client (:mod:`gateway.providers.upstream_http`),
  the client the rows below are built on;
- ``LLMClient.chat``: this gateway's adapter (breaker, retries, deadline, usage accounting, metrics);
- ``direct node`` and ``direct graph``: the ``answer_directly`` node as the route table runs it, and
  the same node run by LangGraph's loop (what one graph step costs).

CPU is this process's ``time.process_time()`` per call (the fake upstream runs in its own process), the
median of ``--rounds`` rounds with the variants interleaved so drift hits all of them alike. Run it on a
quiet machine; compare rows, not absolute figures between machines.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import openai
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.runtime import Runtime
from openai.types.chat import ChatCompletionMessageParam
from pydantic import SecretStr

from gateway.providers.llm import LLMClient
from gateway.providers.upstream_http import upstream_client
from gateway.settings import ModelPrice
from pipelines.direct.graph import ANSWER_DIRECTLY, build_graph
from pipelines.direct.state import DirectContext, DirectState
from tests.benchmarks.miss_cost import DEFAULT_KIT, Kit, free_port

MODEL = "fake-gpt"
QUESTION = "What is the capital of France? Answer in one word."
SYSTEM = "You are the company's helpful assistant. Answer briefly."

Call = Callable[[], Awaitable[object]]


async def cpu_per_call(call: Call, calls: int) -> float:
    """Milliseconds of this process's CPU per call, after a warm-up."""
    for _ in range(min(50, calls)):
        await call()
    started = time.process_time()
    for _ in range(calls):
        await call()
    return 1000 * (time.process_time() - started) / calls


def variants(base_url: str, upstream: httpx.AsyncClient) -> dict[str, Call]:
    wire: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
    ]
    body = {"model": MODEL, "messages": wire, "temperature": 0.0, "stream": False}
    http = httpx.AsyncClient(timeout=30)
    sdk = openai.AsyncOpenAI(base_url=base_url, api_key="fake-key", max_retries=0, timeout=30)
    chat = ChatOpenAI(model=MODEL, base_url=base_url, api_key=SecretStr("fake-key"), max_retries=0, timeout=30)
    on_upstream = ChatOpenAI(
        model=MODEL,
        base_url=base_url,
        api_key=SecretStr("fake-key"),
        max_retries=0,
        timeout=30,
        http_async_client=upstream,
    )
    messages = [SystemMessage(SYSTEM), HumanMessage(QUESTION)]
    client = LLMClient(on_upstream, model_name=MODEL, price=ModelPrice())
    context = DirectContext(llm=client)
    graph = build_graph()

    async def post() -> object:
        response = await http.post(f"{base_url}/chat/completions", json=body)
        return response.json()

    async def create() -> object:
        return await sdk.chat.completions.create(model=MODEL, messages=wire, temperature=0.0)

    async def node() -> object:
        return await ANSWER_DIRECTLY(DirectState(query=QUESTION, tenant="default"), Runtime(context=context))

    async def step() -> object:
        return await graph.ainvoke({"query": QUESTION, "tenant": "default"}, context=context)

    return {
        "httpx POST": post,
        "AsyncOpenAI create": create,
        "ChatOpenAI ainvoke": lambda: chat.ainvoke(messages),
        "ChatOpenAI ainvoke on the gateway's client": lambda: on_upstream.ainvoke(messages),
        "LLMClient.chat": lambda: client.chat(messages, node="answer_directly"),
        "direct node": node,
        "direct graph (LangGraph loop)": step,
    }


async def measure(base_url: str, calls: int, rounds: int) -> dict[str, list[float]]:
    async with upstream_client(30) as upstream:
        return await _measure(variants(base_url, upstream), calls, rounds)


async def _measure(calls_of: dict[str, Call], calls: int, rounds: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {name: [] for name in calls_of}
    for _ in range(rounds):
        for name, call in calls_of.items():
            figures[name].append(await cpu_per_call(call, calls))
    return figures


def render(figures: dict[str, list[float]]) -> str:
    lines = ["| layer | CPU ms per call (median) | added by this layer |", "|---|---:|---:|"]
    previous: float | None = None
    for name, values in figures.items():
        median = statistics.median(values)
        added = "" if previous is None else f"{median - previous:+.3f}"
        lines.append(f"| {name} | {median:.3f} | {added} |")
        previous = median
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kit", type=Path, default=DEFAULT_KIT)
    parser.add_argument("--perfkit", type=Path, default=Path(tempfile.gettempdir()) / "perfkit")
    args = parser.parse_args()
    kit = Kit(args.kit.resolve(), args.perfkit)
    if not kit.python.exists():
        raise SystemExit(f"no tools venv at {kit.python}: run {kit.directory / 'setup.sh'} tools")
    with kit.upstream(free_port()) as base_url:
        figures = asyncio.run(measure(base_url, args.calls, args.rounds))
    print(render(figures))


if __name__ == "__main__":
    main()
