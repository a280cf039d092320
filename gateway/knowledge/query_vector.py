"""A request's one query vector, begun as soon as the question is known.

Routing an ``auto`` question reads its vector first. Computed where routing starts, the embedding (~1 ms
on the local model's own thread) came after the prompt's screening and the answer cache's lookup
(~0.45 ms of the event loop and a Redis round trip), with the embedding's core idle all that time and the
loop idle during the embedding. Begun when the question arrives, the two overlap: ONNX Runtime's
thread embeds while the loop screens the text and looks the answer up.

It is begun on the question as the client sent it, before screening masks personal data in it, and so
only where the text never leaves the process: the local model, with its query vectors kept in this
process's own LRU (``QueryService(early_vectors=...)``; a remote provider would be sent the unmasked
text, and billed for questions the answer cache then serves). The vector is used only for the very
text that routing reads: a question that screening changed (a masked address) or a follow-up rewritten
is embedded again as it now reads. A question answered without reading it (an answer cache hit, a
refusal) lets it go: nobody waits for it any more (a run ONNX Runtime has begun still finishes, and a vector
found in the process's LRU costs nothing).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any

Embed = Callable[[str], Awaitable[list[float]]]


def _unchanged(error: Exception) -> Exception:
    return error


@dataclass(frozen=True, slots=True)
class StartedEmbedding:
    """A query's embedding already under way, awaited by whoever reads it: ``future`` (the model's own result, the
    local model's float32 array), ``finish`` (what makes it the vector the caller gets, a list of floats) and
    ``errors`` (a failure as the caller's layer reports it).

    Awaiting it awaits ``future`` in the reader's own task and applies ``finish`` there: no task of its own and no
    event-loop step between the model's hand-over and the reader. Begun through a task (``QueryVector.begin``),
    an embedding cost every ``auto`` question a task, a loop step to start it and another to hand it on.
    """

    future: asyncio.Future[Any]
    finish: Callable[[Any], list[float]]
    errors: Callable[[Exception], Exception] = _unchanged

    def reporting(self, errors: Callable[[Exception], Exception]) -> StartedEmbedding:
        """The same embedding, its failures (``finish``'s included) reported as ``errors`` makes them."""
        inner = self.errors
        return dataclasses.replace(self, errors=lambda error: errors(inner(error)))

    def __await__(self) -> Generator[Any, None, list[float]]:
        try:
            return self.finish((yield from self.future.__await__()))
        except Exception as exc:
            reported = self.errors(exc)
            if reported is exc:
                raise
            raise reported from exc
        except BaseException:  # the reader cancelled: a failure that came meanwhile is still read (never "unretrieved")
            _let_go(self.future)
            raise


@dataclass(frozen=True, slots=True)
class _Begun:
    text: str
    task: asyncio.Future[Any]  # the run (a task, or a started embedding's future): let go when nobody reads it
    result: Awaitable[list[float]]


class QueryVector:
    """``await vector.of(text)`` once per request: the vector begun early when it was begun for ``text``, else
    embedded now. ``release()`` when the request ends: an early vector nobody read is let go."""

    def __init__(self, embed: Embed) -> None:
        self._embed = embed
        self._begun: _Begun | None = None

    @classmethod
    async def begin(cls, embed: Embed, text: str) -> QueryVector:
        """Starts embedding ``text`` in a task and yields once to the loop, so that the embedding is handed to the
        model now, before the caller's next steps (screening, lookups) rather than at its first wait. For a model
        that can start without a task, :meth:`started`."""
        vector = cls(embed)
        task = asyncio.ensure_future(embed(text))
        vector._begun = _Begun(text, task, task)
        await asyncio.sleep(0)
        return vector

    @classmethod
    def started(cls, embed: Embed, text: str, embedding: StartedEmbedding) -> QueryVector:
        """``text``'s vector, its embedding already started (``KnowledgeBase.begin_query``)."""
        vector = cls(embed)
        vector._begun = _Begun(text, embedding.future, embedding)
        return vector

    @property
    def early(self) -> bool:
        """Whether a vector was begun and not yet read or let go."""
        return self._begun is not None

    async def of(self, text: str) -> list[float]:
        begun, self._begun = self._begun, None
        if begun is not None:
            if begun.text == text and not begun.task.cancelled():
                return await begun.result
            _let_go(begun.task)
        return await self._embed(text)

    def release(self) -> None:
        """Lets an unread early vector go (a read one belongs to its reader, which may outlive the request)."""
        begun, self._begun = self._begun, None
        if begun is not None:
            _let_go(begun.task)


def _let_go(task: asyncio.Future[Any]) -> None:
    """A task is cancelled if not done (an embedding begun through one). A started embedding's future is not: its run
    cannot be stopped, and its vector is kept in the process's cache as it arrives (``CachedEmbeddings.begin_query``).
    The outcome is retrieved either way, so an embedding error nobody reads is not logged as "never retrieved" (the
    request that needs a vector embeds again and sees the error itself)."""
    if isinstance(task, asyncio.Task) and not task.done():
        task.cancel()
    task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()
