"""Server-sent events for ``stream: true``: ``chat.completion.chunk`` objects, then ``data: [DONE]``.

The answer runs in a task of its own and hands this stream its text as the route clears it: the sentences of a
grounded answer as each passes the support gate, the tokens of a direct one as they come
(:class:`~pipelines.shared.events.AnswerText`, through LangGraph's ``custom`` stream). What the route did not
stream (an answer served from a cache, one decided only at the end of the corrective pipeline, an abstention)
follows sentence by sentence once the answer is final, so a client never sees text the gateway then takes back.
The last chunk carries the ``gateway`` object, as the non-streamed answer does. A failure before the end sends an
OpenAI-style ``{"error": ...}`` event and no ``[DONE]``: the ``openai`` client raises ``APIError`` on it instead of
returning half an answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec

from gateway.chat.errors import stream_error_body
from gateway.chat.service import ChatAnswer, PreparedChat
from pipelines.shared import TextSink, split_sentences

logger = logging.getLogger(__name__)


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


def sentence_chunks(text: str) -> list[str]:
    """``text`` cut after each of its sentences; the pieces add up to ``text`` exactly."""
    pieces: list[str] = []
    at = 0
    for sentence in split_sentences(text):
        end = text.find(sentence.text, at) + len(sentence.text)
        pieces.append(text[at:end])
        at = end
    if at < len(text):
        pieces.append(text[at:])
    return [piece for piece in pieces if piece]


async def stream_chat(
    answer: Callable[[TextSink], Awaitable[ChatAnswer]], prepared: PreparedChat
) -> AsyncIterator[bytes]:
    """``answer`` computes (and charges) the answer, handing the text it clears to the sink it is given."""
    cleared: asyncio.Queue[str | None] = asyncio.Queue()

    async def run() -> ChatAnswer:
        try:
            return await answer(cleared.put_nowait)
        finally:
            cleared.put_nowait(None)

    task = asyncio.create_task(run(), name=f"chat:{prepared.id}")
    writer = ChunkWriter(prepared)
    sent = ""
    try:
        yield writer.chunk({"role": "assistant", "content": ""})
        while (delta := await cleared.get()) is not None:
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
            # Routes stream only text nothing replaces afterwards; if that ever changes, say so loudly rather than
            # silently appending a second answer.
            logger.error("chat stream %s: final answer differs from the streamed text", prepared.id)
        for piece in sentence_chunks(text[len(streamed) :] if text.startswith(streamed) else ""):
            yield writer.chunk({"content": piece})
        yield writer.chunk({}, "stop", gateway=msgspec.to_builtins(final.gateway_info(prepared)))
        if prepared.include_usage:
            yield writer.usage(final)
        yield DONE
    finally:
        if not task.done():
            task.cancel()  # the client went away: stop generating (a shared cache computation is shielded)
