"""A request embeds its query only when something reads the vector, and then once: router, cache and retrieval share it.

Issue 17: a request that forces ``direct`` with the semantic cache off needs no embedding, and a quarter of a
miss's CPU went into one. Query embeddings are batched when requests arrive together
(:mod:`gateway.providers.batching`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.providers.batching import QueryBatcher
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.scripted_chat import ScriptedChatModel
from gateway.settings import Settings
from gateway.state import ProviderOverrides
from tests.conftest import grounded_or_direct


class CountingEmbeddings(Embeddings):
    """The real model, counting the query embeddings the request path asks for."""

    def __init__(self, inner: USEEmbeddings) -> None:
        self.inner = inner
        self.dimensions = inner.dimensions
        self.queries: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await self.inner.aembed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return await self.inner.aembed_query(text)


async def ask(settings: Settings, embeddings: USEEmbeddings, *requests: dict[str, Any]) -> CountingEmbeddings:
    counting = CountingEmbeddings(embeddings)
    app = create_app(
        settings, ProviderOverrides(chat_model=ScriptedChatModel(responder=grounded_or_direct), embeddings=counting)
    )
    async with AsyncTestClient(app) as client:
        for body in requests:
            response = await client.post("/v1/query", json=body)
            assert response.status_code == 200, response.text
    return counting


async def test_a_forced_direct_request_never_calls_the_embedder(settings: Settings, embeddings: USEEmbeddings) -> None:
    assert not settings.semantic_cache.enabled
    counting = await ask(
        settings,
        embeddings,
        {"query": "Say hello in French.", "route": "direct"},
        {"query": "Hi there", "route": "direct"},
    )
    assert counting.queries == []


async def test_every_other_request_embeds_once_for_router_and_retrieval(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    queries = ["When did the Lisbon office open?", "Where is the Osaka office?", "Which office is older?"]
    counting = await ask(
        settings,
        embeddings,
        *(
            {"query": query, "route": route}
            for query, route in zip(queries, ["auto", "single_hop", "multi_hop"], strict=True)
        ),
    )
    # The corrective pipeline embeds other texts too (its draft answers, for checks): the question itself, once.
    assert [text for text in counting.queries if text in queries] == queries


async def test_the_semantic_cache_embeds_a_forced_direct_request_once(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    semantic = settings.replace(semantic_cache={"enabled": True})
    counting = await ask(semantic, embeddings, {"query": "Say hello in French.", "route": "direct"})
    assert counting.queries == ["Say hello in French."]


async def test_concurrent_queries_go_in_one_batch_after_the_first() -> None:
    batches: list[list[str]] = []
    release = asyncio.Event()
    loop = asyncio.get_running_loop()

    def encode(texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        batches.append(list(texts))
        if len(batches) == 1:  # the first batch is computing while the others arrive
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result(5)
        return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

    batcher = QueryBatcher(encode)
    first = asyncio.ensure_future(batcher.embed("a"))
    await asyncio.sleep(0.05)
    rest = [asyncio.ensure_future(batcher.embed(text)) for text in ("bb", "ccc", "dddd")]
    await asyncio.sleep(0.05)
    release.set()
    vectors = await asyncio.gather(first, *rest)
    assert batches == [["a"], ["bb", "ccc", "dddd"]]
    assert [v[0] for v in vectors] == [1.0, 2.0, 3.0, 4.0]  # each caller gets its own row
    assert (batcher.batches, batcher.embedded) == (2, 4)
    batcher.close()


async def test_an_encoder_error_reaches_every_caller_of_its_batch_and_the_next_batch_runs() -> None:
    def encode(texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        if "bad" in texts:
            raise RuntimeError("encoder failed")
        return np.ones((len(texts), 2), dtype=np.float32)

    batcher = QueryBatcher(encode, max_batch=2)
    results = await asyncio.gather(*(batcher.embed(t) for t in ("bad", "x", "y")), return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["RuntimeError", "RuntimeError", "ndarray"]
    batcher.close()


async def test_a_caller_that_leaves_does_not_stop_the_others() -> None:
    def encode(texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        return np.ones((len(texts), 2), dtype=np.float32)

    batcher = QueryBatcher(encode)
    leaving = asyncio.ensure_future(batcher.embed("gone"))
    staying = asyncio.ensure_future(batcher.embed("here"))
    leaving.cancel()
    assert (await staying).tolist() == [1.0, 1.0]
    batcher.close()


async def test_batched_query_vectors_match_the_single_query_model(embeddings: USEEmbeddings) -> None:
    """Batching changes the order of float32 sums, not the vectors: the router and retrieval see the same thing."""
    texts = [
        "Where is the Osaka office?",
        "東京オフィスの住所は？",
        "Which is older, the Tokyo office or the Osaka office?",
    ]
    batched = await asyncio.gather(*(embeddings.aembed_query(t) for t in texts))
    for text, vector in zip(texts, batched, strict=True):
        single = np.asarray(embeddings.embed_query(text))
        assert float(np.dot(single, vector)) == pytest.approx(1.0, abs=1e-5)
        assert np.abs(single - np.asarray(vector)).max() < 1e-5
