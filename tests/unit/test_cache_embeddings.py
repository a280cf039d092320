"""The query-embedding cache: float32 bytes per model and text, and a model call whenever the cache fails."""

from __future__ import annotations

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from gateway.cache.backend import CacheUnavailableError, MemoryBackend
from gateway.cache.embeddings import CachedEmbeddings
from gateway.cache.keys import embedding_key


class CountingEmbeddings(Embeddings):
    """Deterministic 4-d vectors from the text, with float64 precision the cache has to round."""

    dimensions = 4

    def __init__(self) -> None:
        self.query_calls = 0
        self.document_calls = 0

    def _vector(self, text: str) -> list[float]:
        seed = sum(map(ord, text))
        return [seed / 3.0, 1 / 7, -len(text) / 11.0, 0.1]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return self._vector(text)


class DownBackend(MemoryBackend):
    async def get(self, key: str) -> bytes | None:
        raise CacheUnavailableError("cache get timed out after 50 ms")

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        raise CacheUnavailableError("cache set timed out after 50 ms")


@pytest.fixture
def inner() -> CountingEmbeddings:
    return CountingEmbeddings()


async def test_a_repeated_query_is_embedded_once(inner: CountingEmbeddings) -> None:
    cached = CachedEmbeddings(inner, MemoryBackend(), model="m")
    first = await cached.aembed_query("Where is the Osaka office?")
    second = await cached.aembed_query("Where is the Osaka office?")
    assert inner.query_calls == 1
    assert first == second  # float32-rounded on the miss too, so hit and miss agree exactly
    assert first == pytest.approx(inner._vector("Where is the Osaka office?"), rel=1e-6)
    assert (cached.hits, cached.misses, cached.errors) == (1, 1, 0)


async def test_vectors_are_stored_as_little_endian_float32(inner: CountingEmbeddings) -> None:
    backend = MemoryBackend()
    cached = CachedEmbeddings(inner, backend, model="m", prefix="p", ttl_s=60)
    vector = await cached.aembed_query("hello")
    raw = await backend.get(embedding_key("p", "m", "hello"))
    assert raw is not None
    assert len(raw) == 4 * 4
    assert np.frombuffer(raw, dtype="<f4").tolist() == vector
    assert backend.ttl_remaining(embedding_key("p", "m", "hello")) == pytest.approx(60, abs=1)


async def test_models_and_exact_texts_do_not_share_vectors(inner: CountingEmbeddings) -> None:
    backend = MemoryBackend()
    await CachedEmbeddings(inner, backend, model="a").aembed_query("Hello")
    await CachedEmbeddings(inner, backend, model="b").aembed_query("Hello")
    await CachedEmbeddings(inner, backend, model="a").aembed_query("hello")
    assert inner.query_calls == 3


async def test_a_failing_cache_falls_through_to_the_model(inner: CountingEmbeddings) -> None:
    cached = CachedEmbeddings(inner, DownBackend(), model="m")
    assert await cached.aembed_query("q") == await cached.aembed_query("q")
    assert inner.query_calls == 2
    assert cached.errors == 4  # a failed read and a failed store per call


async def test_a_corrupt_entry_is_recomputed(inner: CountingEmbeddings) -> None:
    backend = MemoryBackend()
    cached = CachedEmbeddings(inner, backend, model="m", prefix="p")
    await backend.set(embedding_key("p", "m", "q"), b"\x00" * 8, 60)  # 2 floats, the model makes 4
    vector = await cached.aembed_query("q")
    assert len(vector) == 4
    assert (inner.query_calls, cached.errors) == (1, 1)
    assert await cached.aembed_query("q") == vector  # overwritten with a good entry


async def test_model_errors_propagate() -> None:
    class Broken(CountingEmbeddings):
        def embed_query(self, text: str) -> list[float]:
            raise RuntimeError("model crashed")

    with pytest.raises(RuntimeError, match="model crashed"):
        await CachedEmbeddings(Broken(), MemoryBackend(), model="m").aembed_query("q")


async def test_documents_and_sync_calls_go_straight_to_the_model(inner: CountingEmbeddings) -> None:
    backend = MemoryBackend()
    cached = CachedEmbeddings(inner, backend, model="m")
    assert cached.dimensions == 4
    assert await cached.aembed_documents(["a", "b"]) == [inner._vector("a"), inner._vector("b")]
    assert cached.embed_documents(["a"]) == [inner._vector("a")]
    assert cached.embed_query("a") == inner._vector("a")
    assert len(backend) == 0
    assert inner.document_calls == 2


def test_dimensions_are_unknown_when_the_inner_model_does_not_say() -> None:
    class Anonymous(CountingEmbeddings):
        dimensions = None  # type: ignore[assignment]

    assert CachedEmbeddings(Anonymous(), MemoryBackend(), model="m").dimensions is None
