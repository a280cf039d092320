"""A query-embedding cache in front of any LangChain ``Embeddings``.

Repeated questions (and the router, which embeds every query) skip the model: vectors are stored
as little-endian float32 bytes (2 KB for 512 dimensions, a quarter of JSON floats) under the model
name and a digest of the exact text. Vectors do not depend on the knowledge base, so there is no
version in the key. A cache failure falls through to the model; the model's own errors propagate.
"""

from __future__ import annotations

import logging

import numpy as np
from langchain_core.embeddings import Embeddings

from gateway.cache.backend import CacheBackend, CacheUnavailableError
from gateway.cache.events import NO_CACHE_EVENTS, CacheEvents
from gateway.cache.keys import DEFAULT_PREFIX, embedding_key

logger = logging.getLogger(__name__)

_FLOAT32_LE = np.dtype("<f4")
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
        vector = np.asarray(await self.inner.aembed_query(text), dtype=_FLOAT32_LE)
        try:
            await self._backend.set(key, vector.tobytes(), self._ttl_s)
        except CacheUnavailableError as exc:
            self.errors += 1
            self._events.cache_result("embedding", "error")
            logger.debug("embedding cache store failed: %s", exc.detail)
        return vector.tolist()  # type: ignore[no-any-return]

    async def _read(self, key: str) -> list[float] | None:
        try:
            raw = await self._backend.get(key)
        except CacheUnavailableError as exc:
            self.errors += 1
            self._events.cache_result("embedding", "error")
            logger.debug("embedding cache read failed: %s", exc.detail)
            return None
        return self._decode(key, raw)

    def _decode(self, key: str, raw: bytes | None) -> list[float] | None:
        """A stored vector, or None when absent or malformed (counted, logged)."""
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
        return np.frombuffer(raw, dtype=_FLOAT32_LE).tolist()  # type: ignore[no-any-return]
