"""Live answer tokens from inside a pipeline to the HTTP response that streams them.

Pipelines stay unaware of streaming: the chat endpoint opens a :class:`TokenSink` around one
request, naming the graph nodes whose model output *is* the final answer (``answer_directly``),
and :func:`call_model` streams those calls from the model and forwards each text delta. The
sink travels in a context variable, which asyncio copies into every task a request starts
(LangGraph nodes, the cache's single flight), so no signature in between changes. Calls of any
other node, and every call outside a sink, are plain ``ainvoke`` calls as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage


class Rewriter(Protocol):
    """Changes text that arrives in pieces (the guardrails' placeholders back to their values)."""

    def feed(self, delta: str) -> str: ...

    def flush(self) -> str: ...


class TokenSink:
    """An unbounded queue of text deltas for one request; ``close`` puts the ``None`` that ends it."""

    def __init__(self, live_nodes: frozenset[str]) -> None:
        self.live_nodes = live_nodes
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.streamed: list[str] = []
        self.rewriter: Rewriter | None = None

    def wants(self, node: str) -> bool:
        return node in self.live_nodes

    def put(self, text: str) -> None:
        if self.rewriter is not None:
            text = self.rewriter.feed(text)
        if text:
            self.streamed.append(text)
            self.queue.put_nowait(text)

    def close(self) -> None:
        if self.rewriter is not None:
            tail = self.rewriter.flush()
            if tail:
                self.streamed.append(tail)
                self.queue.put_nowait(tail)
        self.queue.put_nowait(None)

    @property
    def text(self) -> str:
        return "".join(self.streamed)


_sink: ContextVar[TokenSink | None] = ContextVar("gateway_token_sink", default=None)


@contextmanager
def streaming_into(sink: TokenSink) -> Iterator[TokenSink]:
    token = _sink.set(sink)
    try:
        yield sink
    finally:
        _sink.reset(token)


def rewrite_live(rewriter: Rewriter) -> None:
    """Pass this request's live tokens through ``rewriter`` (no-op outside a streamed request)."""
    sink = _sink.get()
    if sink is not None:
        sink.rewriter = rewriter


def active_sink(node: str) -> TokenSink | None:
    sink = _sink.get()
    return sink if sink is not None and sink.wants(node) else None


async def call_model(
    runnable: Any, messages: list[BaseMessage], node: str, params: Mapping[str, Any] | None = None
) -> AIMessage:
    """``ainvoke``, or, when this node's output streams to a client, ``astream`` merged into one message; ``params``:
    the call's own parameters, as ``ainvoke``'s keyword arguments.

    Chunks are summed the way LangChain merges them, so the result carries the usage metadata of
    the final chunk (``stream_usage``) exactly like an ``ainvoke`` result would.
    """
    sink = active_sink(node)
    if sink is None:
        message: AIMessage = await runnable.ainvoke(messages, **(params or {}))
        return message
    merged: AIMessageChunk | None = None
    async for chunk in runnable.astream(messages, **(params or {})):
        merged = chunk if merged is None else merged + chunk
        text = _chunk_text(chunk)
        if text:
            sink.put(text)
    if merged is None:
        return AIMessage(content="")
    return AIMessage(
        content=merged.content,
        usage_metadata=merged.usage_metadata,
        response_metadata=merged.response_metadata,
        id=merged.id,
    )


def _chunk_text(chunk: AIMessageChunk) -> str:
    content = chunk.content
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
