"""The request path reads its query vector through LangChain's ``Embeddings`` and nothing else: any model serves it,
a cache hit never embeds, concurrent identical questions embed once, a request that leaves takes its embedding with
it, and an embedder's failure reaches the client as a provider error."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from litestar import Litestar
from litestar.testing import AsyncTestClient

from gateway.access.identity import Reader
from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.query.schemas import QueryRequest
from gateway.query.service import QueryService
from gateway.settings import Settings
from tests.conftest import grounded_or_direct
from tests.fakes.scripted_chat import ScriptedChatModel

QUESTION = "When did the Lisbon office open?"


class ScriptedEmbeddings(Embeddings):
    """A plain ``Embeddings`` (the interface's methods only, no ``dimensions``): LangChain's deterministic 64-d fake
    vectors. Its async queries are recorded, held while ``gate`` is clear, and fail while ``failure`` is set."""

    def __init__(self) -> None:
        self._vectors = DeterministicFakeEmbedding(size=64)
        self.asked: list[str] = []
        self.embedded: list[str] = []
        self.cancelled: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.failure: Exception | None = None
        self.reached = asyncio.Event()  # set once a query has reached the model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._vectors.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._vectors.embed_query(text)

    async def aembed_query(self, text: str) -> list[float]:
        self.asked.append(text)
        self.reached.set()
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled.append(text)
            raise
        if self.failure is not None:
            raise self.failure
        vector = await super().aembed_query(text)  # the interface's default: the sync method in a worker thread
        self.embedded.append(text)
        return vector


@pytest.fixture
def scripted_settings(settings: Settings, tmp_path: Path) -> Settings:
    """The test settings with another model's name: the router is trained on the scripted vectors, apart from the
    session's artefacts of the real model."""
    return settings.replace(embeddings={"model": "scripted-64"}, router_artefact={"cache_dir": tmp_path / "router"})


def app(settings: Settings, embeddings: ScriptedEmbeddings) -> Litestar:
    model = ScriptedChatModel(responder=grounded_or_direct)
    return create_app(settings, ProviderOverrides(chat_model=model, embeddings=embeddings))


@asynccontextmanager
async def serving(settings: Settings, embeddings: ScriptedEmbeddings) -> AsyncIterator[AsyncTestClient[Any]]:
    """Over HTTP: the test client serves the app on an event loop of its own, so nothing here may wait for it."""
    async with AsyncTestClient(app(settings, embeddings)) as client:
        yield client


@asynccontextmanager
async def service(settings: Settings, embeddings: ScriptedEmbeddings) -> AsyncIterator[QueryService]:
    """The app's query service on the test's own event loop (the app's lifespan entered here), for tests that hold
    the embedder and watch the requests meanwhile."""
    started = app(settings, embeddings)
    async with started.lifespan():
        yield started.state.query_service


async def ask(client: AsyncTestClient[Any], body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    response = await client.post("/v1/query", json=body)
    assert response.status_code == status, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_any_embeddings_serves_the_query_path_and_a_cache_hit_never_embeds(scripted_settings: Settings) -> None:
    embeddings = ScriptedEmbeddings()
    async with serving(scripted_settings, embeddings) as client:
        first = await ask(client, {"query": QUESTION, "route": "auto"})
        second = await ask(client, {"query": QUESTION, "route": "auto"})
        forced = await ask(client, {"query": "Say hello in French.", "route": "direct"})
    assert (first["cached"], second["cached"], forced["cached"]) == (False, True, False)
    assert embeddings.asked == [QUESTION]  # the answer-cache hit and the forced direct embedded nothing
    assert embeddings.embedded == [QUESTION]


async def test_concurrent_identical_questions_embed_once(scripted_settings: Settings) -> None:
    """The answer cache computes concurrent identical misses once, and with them the one embedding."""
    embeddings = ScriptedEmbeddings()
    async with service(scripted_settings, embeddings) as queries:
        embeddings.gate.clear()
        asking = [
            asyncio.ensure_future(queries.answer(QueryRequest(query=QUESTION), reader=Reader.unrestricted()))
            for _ in range(4)
        ]
        await embeddings.reached.wait()  # the first request reaches the model and is held there
        embeddings.gate.set()
        answers = await asyncio.gather(*asking)
    assert embeddings.asked == [QUESTION]
    assert len({answer.answer for answer in answers}) == 1
    assert sum(not answer.cached for answer in answers) == 1


async def test_an_embedders_failure_reaches_the_client_as_a_provider_error(scripted_settings: Settings) -> None:
    embeddings = ScriptedEmbeddings()
    async with serving(scripted_settings, embeddings) as client:
        embeddings.failure = RuntimeError("the embedder is out of memory")
        problem = await ask(client, {"query": QUESTION, "route": "auto"}, status=502)
        embeddings.failure = None
        answered = await ask(client, {"query": QUESTION, "route": "auto"})
    assert problem["status"] == 502
    assert "embedding failed" in problem["detail"]
    assert "out of memory" in problem["detail"]
    assert answered["cached"] is False  # the failure was not cached


async def test_a_request_that_leaves_takes_its_embedding_with_it(
    scripted_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """Without an answer cache (whose computation outlives a caller that leaves, to store the answer), a cancelled
    request cancels its embedding: nothing runs on after it and nothing is logged."""
    embeddings = ScriptedEmbeddings()
    uncached = scripted_settings.replace(cache={"enabled": False})
    async with service(uncached, embeddings) as queries:
        embeddings.gate.clear()
        caplog.clear()  # the app's start-up warnings
        running = asyncio.all_tasks()  # the app's own, and this test's
        with caplog.at_level(logging.WARNING):
            answering = asyncio.ensure_future(
                queries.answer(QueryRequest(query=QUESTION), reader=Reader.unrestricted())
            )
            await embeddings.reached.wait()
            answering.cancel()
            with pytest.raises(asyncio.CancelledError):
                await answering
            embeddings.gate.set()
            assert asyncio.all_tasks() - running == set()
        assert [record for record in caplog.records if record.levelno >= logging.WARNING] == []
    assert embeddings.cancelled == [QUESTION]
    assert embeddings.embedded == []
