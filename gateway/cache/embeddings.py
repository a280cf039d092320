"""A query-embedding cache in front of any LangChain ``Embeddings``.

Repeated questions (and the router, which embeds every query) skip the model: vectors are stored
as little-endian float32 bytes (2 KB for 512 dimensions, a quarter of JSON floats) under the model
name and a digest of the exact text. Vectors do not depend on the knowledge base, so there is no
version in the key. A cache failure falls through to the model; the model's own errors propagate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from gateway.cache.backend import CacheBackend, CacheUnavailableError, MemoryBackend
from gateway.cache.events import NO_CACHE_EVENTS, CacheEvents
from gateway.cache.keys import DEFAULT_PREFIX, embedding_key
from gateway.knowledge.query_vector import StartedEmbedding

logger = logging.getLogger(__name__)

_FLOAT32_LE = np.dtype("<f4")
ArrayQuery = Callable[[str], Awaitable[np.ndarray[Any, np.dtype[np.float32]]]]
Vector = np.ndarray[Any, np.dtype[np.float32]]
BeginArray = Callable[[str], "asyncio.Future[Vector]"]
DEFAULT_EMBEDDING_TTL_S = 7 * 24 * 3600.0


class CachedEmbeddings(Embeddings):
    """Caches ``aembed_query``; documents and the synchronous methods go straight to ``inner``.

    Document vectors are computed once per ingest and stored in the vector store, so caching them
    would only spend memory; the synchronous methods cannot await the async backend.
    Every query vector is returned rounded to float32, hit or miss, so a question gets the very
    same vector (and therefore the same route and passages) whether or not it was cached.
    """

    def __init__(
        self,
        inner: Embeddings,
        backend: CacheBackend,
        *,
        model: str,
        ttl_s: float = DEFAULT_EMBEDDING_TTL_S,
        prefix: str = DEFAULT_PREFIX,
        events: CacheEvents = NO_CACHE_EVENTS,
    ) -> None:
        self.inner = inner
        self._backend = backend
        self._model = model
        self._ttl_s = ttl_s
        self._prefix = prefix
        dimensions = getattr(inner, "dimensions", None)
        self.dimensions: int | None = dimensions if isinstance(dimensions, int) else None
        self.hits = 0
        self.misses = 0
        self.errors = 0
        self._events = events
        # A model that hands its query vector over as a float32 array (USEEmbeddings): stored and listed from it.
        array_query = getattr(inner, "aembed_query_array", None)
        self._array_query: ArrayQuery | None = array_query if callable(array_query) else None
        # A model that starts a query's run without a task (USEEmbeddings): begin_query, with the process's own LRU.
        begin_array = getattr(inner, "begin_query_array", None)
        self._begin_array: BeginArray | None = begin_array if callable(begin_array) else None

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await self.inner.aembed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        key = embedding_key(self._prefix, self._model, text)
        with self._events.cache_lookup("embedding"):
            cached = await self._read(key)
            self._events.cache_result("embedding", "miss" if cached is None else "hit")
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        embed = self._array_query or self.inner.aembed_query  # an array already float32 (little-endian here): no copy
        vector = np.asarray(await embed(text), dtype=_FLOAT32_LE)
        try:
            await self._backend.set(key, vector.tobytes(), self._ttl_s)
        except CacheUnavailableError as exc:
            self.errors += 1
            self._events.cache_result("embedding", "error")
            logger.debug("embedding cache store failed: %s", exc.detail)
        return vector.tolist()  # type: ignore[no-any-return]

    def begin_query(self, text: str) -> StartedEmbedding | None:
        """``aembed_query`` started now, without a task or a step of the event loop: the cached vector, or the model's
        run under way (its vector stored as it arrives, read or not). None where that cannot be done without awaiting
        (a shared backend, or a model that cannot start a run by itself): the caller embeds with ``aembed_query``."""
        backend, begin = self._backend, self._begin_array
        if begin is None or type(backend) is not MemoryBackend:  # a subclass may read and write otherwise
            return None
        key = embedding_key(self._prefix, self._model, text)
        # Not made a list here: an answer-cache hit never reads it (the list of 512 floats was ~4 % of such a hit's
        # CPU at c=32); the reader's finish makes it one.
        cached = self._vector(key, backend.peek(key))
        loop = asyncio.get_running_loop()
        if cached is not None:
            self._looked_up("hit")
            self.hits += 1
            found: asyncio.Future[Vector] = loop.create_future()
            found.set_result(cached)
            return StartedEmbedding(found, _as_list)
        try:
            run = begin(text)
        except Exception as exc:  # reported where the vector is read, as aembed_query's caller sees it
            run = loop.create_future()
            run.set_exception(exc)
        # Counted once the run is under way: the lookup's metric and span (~0.02 ms of a serving loop, in place) no
        # longer come before the run begins. A memory peek has nothing to time.
        self._looked_up("miss")
        self.misses += 1

        def store(vector: Vector) -> None:
            backend.put(key, np.asarray(vector, dtype=_FLOAT32_LE).tobytes(), self._ttl_s)

        def keep(arrived: asyncio.Future[Vector]) -> None:
            """Kept as it arrives, read or not (an answer-cache hit lets the run go on: its vector is not wasted), one
            loop step on: this callback was added before the reader awaited, so it runs first, and the store would
            come between the vector and the reader's decision."""
            if not arrived.cancelled() and arrived.exception() is None:
                loop.call_soon(store, arrived.result())

        run.add_done_callback(keep)
        return StartedEmbedding(run, _as_list)

    async def _read(self, key: str) -> list[float] | None:
        try:
            raw = await self._backend.get(key)
        except CacheUnavailableError as exc:
            self.errors += 1
            self._events.cache_result("embedding", "error")
            logger.debug("embedding cache read failed: %s", exc.detail)
            return None
        return self._decode(key, raw)

    def _looked_up(self, result: str) -> None:
        with self._events.cache_lookup("embedding"):
            self._events.cache_result("embedding", result)

    def _decode(self, key: str, raw: bytes | None) -> list[float] | None:
        vector = self._vector(key, raw)
        return None if vector is None else vector.tolist()

    def _vector(self, key: str, raw: bytes | None) -> Vector | None:
        """A stored vector read in place (no copy), or None when absent or malformed (counted, logged)."""
        if raw is None:
            return None
        if (
            not raw
            or len(raw) % _FLOAT32_LE.itemsize
            or (self.dimensions is not None and len(raw) != self.dimensions * _FLOAT32_LE.itemsize)
        ):
            self.errors += 1
            self._events.cache_result("embedding", "error")
            logger.warning("embedding cache entry %s has %d bytes; recomputing", key, len(raw))
            return None
        return np.frombuffer(raw, dtype=_FLOAT32_LE)


def _as_list(vector: Vector) -> list[float]:
    return np.asarray(vector, dtype=_FLOAT32_LE).tolist()  # type: ignore[no-any-return]
