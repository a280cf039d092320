"""Server-sent events for ``stream: true``: ``chat.completion.chunk`` objects, then ``data: [DONE]``.

The answer runs in a task of its own with a :class:`TokenSink` in its context. Nodes whose output
is the final answer as it is generated (the direct route's ``answer_directly``) stream their tokens
live; every other answer (retrieval routes, whose grounding gates can still replace a draft, and
cached answers) streams word by word once it is final, so a client never sees text the gateway
then takes back. A failure before the end sends an OpenAI-style ``{"error": ...}`` event and no
``[DONE]``: the ``openai`` client raises ``APIError`` on it instead of returning half an answer.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec

from gateway.chat.errors import stream_error_body
from gateway.chat.service import ChatAnswer, PreparedChat
from gateway.providers.token_stream import TokenSink, streaming_into

logger = logging.getLogger(__name__)

# Nodes whose raw model output is the answer the client gets: nothing checks it afterwards.
LIVE_NODES = frozenset({"answer_directly"})
_WORDS = re.compile(r"\s*\S+")


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


DONE = b"data: [DONE]\n\n"


class ChunkWriter:
    def __init__(self, prepared: PreparedChat) -> None:
        self._prepared = prepared

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        p = self._prepared
        payload: dict[str, Any] = {
            "id": p.id,
            "object": "chat.completion.chunk",
            "created": p.created,
            "model": p.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
            **extra,
        }
        return _event(payload)

    def usage(self, answer: ChatAnswer) -> bytes:
        p = self._prepared
        return _event(
            {
                "id": p.id,
                "object": "chat.completion.chunk",
                "created": p.created,
                "model": p.model,
                "choices": [],
                "usage": msgspec.to_builtins(answer.usage()),
            }
        )


async def stream_chat(answer: Callable[[], Awaitable[ChatAnswer]], prepared: PreparedChat) -> AsyncIterator[bytes]:
    """``answer`` computes (and charges) the answer; live tokens reach the client while it runs."""
    sink = TokenSink(LIVE_NODES)

    async def run() -> ChatAnswer:
        with streaming_into(sink):
            try:
                return await answer()
            finally:
                sink.close()

    task = asyncio.create_task(run(), name=f"chat:{prepared.id}")
    writer = ChunkWriter(prepared)
    sent = ""
    try:
        yield writer.chunk({"role": "assistant", "content": ""})
        while (delta := await sink.queue.get()) is not None:
            if not sent:
                delta = delta.lstrip()
            if delta:
                sent += delta
                yield writer.chunk({"content": delta})
        try:
            final = await task
        except Exception as exc:
            logger.warning("chat stream %s failed after %d characters: %r", prepared.id, len(sent), exc)
            yield _event(msgspec.to_builtins(stream_error_body(exc)))
            return
        text, streamed = final.response.answer, sent.rstrip()
        if not text.startswith(streamed):
            # Live tokens are only streamed where nothing replaces the answer afterwards; if that ever
            # changes, say so loudly rather than silently appending a second answer.
            logger.error("chat stream %s: final answer differs from the streamed tokens", prepared.id)
        for piece in _WORDS.findall(text[len(streamed) :] if text.startswith(streamed) else ""):
            yield writer.chunk({"content": piece})
        yield writer.chunk({}, "stop", gateway=msgspec.to_builtins(final.gateway_info(prepared)))
        if prepared.include_usage:
            yield writer.usage(final)
        yield DONE
    finally:
        if not task.done():
            task.cancel()  # the client went away: stop generating (a shared cache computation is shielded)
