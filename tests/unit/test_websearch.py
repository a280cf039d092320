"""Search-more providers: Tavily through an injected httpx transport, and the local fallback."""

from __future__ import annotations

import json

import httpx
import pytest

from gateway.errors import ProviderError, ProviderUnavailableError
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.service import KnowledgeBase, LocalStoreSearch, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.websearch import TAVILY_URL, TavilySearch
from pipelines.shared.visibility import Visibility
from tests.fakes.memory_store import InMemoryVectorStore


def tavily(handler: httpx.MockTransport, embeddings: USEEmbeddings) -> TavilySearch:
    return TavilySearch(httpx.AsyncClient(transport=handler), "tvly-test", embeddings)


async def test_tavily_results_become_passages_scored_by_cosine(embeddings: USEEmbeddings) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            json={
                "results": [
                    {
                        "title": "Peru",
                        "url": "https://ex.org/peru",
                        "content": "Lima is the capital of Peru.",
                        "score": 0.9,
                    },
                    {"title": "Cats", "url": "https://ex.org/cats", "content": "Cats sleep a lot.", "score": 0.1},
                    {"title": "Empty", "url": "https://ex.org/empty", "content": ""},
                ]
            },
        )

    results = await tavily(httpx.MockTransport(handler), embeddings).search(
        "acme", "What is the capital of Peru?", 3, visibility=Visibility.everything()
    )
    assert str(seen[0].url) == TAVILY_URL
    assert seen[0].headers["authorization"] == "Bearer tvly-test"
    assert json.loads(seen[0].content)["max_results"] == 3
    assert [p.doc_id for p in results] == ["https://ex.org/peru", "https://ex.org/cats"]
    assert results[0].score > results[1].score  # cosine to the query, not Tavily's own score
    assert results[0].metadata == {"source": "tavily"}


async def test_tavily_errors_are_translated(embeddings: USEEmbeddings) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("no route", request=request)

    with pytest.raises(ProviderUnavailableError) as down:
        await tavily(httpx.MockTransport(refuse), embeddings).search("acme", "q", 3, visibility=Visibility.everything())
    assert down.value.provider == "web_search"
    assert isinstance(down.value.__cause__, httpx.ConnectError)

    with pytest.raises(ProviderError, match="HTTP 432"):
        await tavily(httpx.MockTransport(lambda r: httpx.Response(432, json={})), embeddings).search(
            "acme", "q", 3, visibility=Visibility.everything()
        )


async def test_local_fallback_searches_the_tenant_store(embeddings: USEEmbeddings) -> None:
    knowledge = KnowledgeBase(embeddings, InMemoryVectorStore(), Chunker(500, 50))
    await knowledge.ingest("acme", [NewDocument(id="k3", title="K3", text="The K3 carries 300 kg.")])
    search = LocalStoreSearch(knowledge)
    assert search.name == "local"
    assert [p.doc_id for p in await search.search("acme", "K3 payload", 3, visibility=Visibility.everything())] == [
        "k3"
    ]
    assert await search.search("globex", "K3 payload", 3, visibility=Visibility.everything()) == []
