"""A first chat question's vector begun before Litestar routes the request, for exactly the requests whose handler
would begin it (issue 17), and started without a task where the model can (``StartedEmbedding``)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest
from litestar.testing import AsyncTestClient

from gateway.access.guard import RequireScope
from gateway.access.keys import hash_key
from gateway.app import create_app
from gateway.cache.backend import MemoryBackend
from gateway.cache.embeddings import CachedEmbeddings
from gateway.chunking import Chunker
from gateway.errors import ProviderError
from gateway.knowledge import KnowledgeBase
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.scripted_chat import ScriptedChatModel
from gateway.query_vector import QueryVector, StartedEmbedding
from gateway.settings import ApiKeyConfig, Settings
from gateway.state import ProviderOverrides
from tests.conftest import grounded_or_direct
from tests.unit.embedding_support import DelegatingEmbeddings
from tests.unit.observability_support import traced_app

QUESTION = "When did the Lisbon office open?"


class Witness(DelegatingEmbeddings):
    """The real model, writing into ``seen`` each query it is asked to start (next to the key hook's entries)."""

    def __init__(self, inner: USEEmbeddings, seen: list[str]) -> None:
        super().__init__(inner)
        self.seen = seen

    async def aembed_query(self, text: str) -> list[float]:
        return (await self.aembed_query_array(text)).tolist()  # type: ignore[no-any-return]

    async def aembed_query_array(self, text: str) -> Any:
        return await self.begin_query_array(text)

    def begin_query_array(self, text: str) -> asyncio.Future[Any]:
        self.seen.append(f"embed:{text}")
        return self.inner.begin_query_array(text)


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What happened, in order: each query embedding started, and each run of the chat routes' key hook."""
    order: list[str] = []
    hook = RequireScope.__call__

    async def witnessed(self: RequireScope, connection: Any) -> None:
        order.append("hook")
        await hook(self, connection)

    monkeypatch.setattr(RequireScope, "__call__", witnessed)
    return order


KEYS = {
    "open-key": ApiKeyConfig(name="open", key_sha256=hash_key("open-key"), tenant="default"),
    "limited-key": ApiKeyConfig(
        name="limited", key_sha256=hash_key("limited-key"), tenant="default", daily_tokens=10**6
    ),
}


@asynccontextmanager
async def client(settings: Settings, embeddings: USEEmbeddings, seen: list[str]) -> AsyncIterator[AsyncTestClient[Any]]:
    keyed = settings.replace(access={"api_keys": list(KEYS.values())})
    overrides = ProviderOverrides(
        chat_model=ScriptedChatModel(responder=grounded_or_direct), embeddings=Witness(embeddings, seen)
    )
    async with AsyncTestClient(create_app(keyed, overrides)) as test_client:
        seen.clear()  # start-up's embeddings (the sample knowledge base, the router) are not requests'
        yield test_client


def chat(model: str = "gateway-auto", question: str = QUESTION, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": question}], **extra}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_first_question_is_embedded_once_begun_before_the_key_hook(
    settings: Settings, embeddings: USEEmbeddings, seen: list[str]
) -> None:
    async with client(settings, embeddings, seen) as test_client:
        response = await test_client.post("/v1/chat/completions", json=chat(), headers=bearer("open-key"))
        assert response.status_code == 200, response.text
        assert seen == [f"embed:{QUESTION}", "hook"]  # one embedding, begun first, and read by the handler
        again = await test_client.post(
            "/v1/chat/completions", json=chat(question="Where is the Osaka office?"), headers=bearer("open-key")
        )
        assert again.status_code == 200, again.text
    assert seen[2:] == ["embed:Where is the Osaka office?", "hook"]


@pytest.mark.parametrize(
    ("key", "body", "status", "expected"),
    [
        ("limited-key", chat(), 200, ["hook", f"embed:{QUESTION}"]),  # a key with a budget: after the hook admits it
        ("wrong-key", chat(), 401, ["hook"]),  # refused: nothing spent on it
        ("open-key", chat(model="gateway-nope"), 404, ["hook"]),
        ("open-key", chat(model="gateway-direct"), 200, ["hook"]),  # reads no vector
        ("open-key", chat(stream=True), 200, ["hook", f"embed:{QUESTION}"]),  # begun once its stream has begun
        ("open-key", chat(question="   "), 400, ["hook"]),
    ],
)
async def test_a_request_the_handler_would_not_begin_early_is_not_begun_early(
    settings: Settings,
    embeddings: USEEmbeddings,
    seen: list[str],
    key: str,
    body: dict[str, Any],
    status: int,
    expected: list[str],
) -> None:
    async with client(settings, embeddings, seen) as test_client:
        response = await test_client.post("/v1/chat/completions", json=body, headers=bearer(key))
    assert response.status_code == status, response.text
    assert seen == expected


async def test_open_mode_begins_early_and_a_rate_limited_key_after_the_hook(
    settings: Settings, embeddings: USEEmbeddings, seen: list[str]
) -> None:
    overrides = ProviderOverrides(
        chat_model=ScriptedChatModel(responder=grounded_or_direct), embeddings=Witness(embeddings, seen)
    )
    async with AsyncTestClient(create_app(settings, overrides)) as open_client:  # no keys: open mode, on loopback
        seen.clear()
        response = await open_client.post("/v1/chat/completions", json=chat())
        assert response.status_code == 200, response.text
    assert seen == [f"embed:{QUESTION}", "hook"]
    paced = ApiKeyConfig(name="paced", key_sha256=hash_key("paced-key"), tenant="default", requests_per_minute=600)
    seen.clear()
    async with AsyncTestClient(create_app(settings.replace(access={"api_keys": [paced]}), overrides)) as keyed_client:
        seen.clear()
        response = await keyed_client.post("/v1/chat/completions", json=chat(), headers=bearer("paced-key"))
        assert response.status_code == 200, response.text
    assert seen == ["hook", f"embed:{QUESTION}"]


async def test_a_body_nested_past_the_decoders_depth_is_answered_as_a_problem_not_a_crash(
    settings: Settings, embeddings: USEEmbeddings, seen: list[str]
) -> None:
    deep = b'{"model": "gateway-auto", "messages": [], "x": ' + b"[" * 2000 + b"]" * 2000 + b"}"
    async with client(settings, embeddings, seen) as test_client:
        response = await test_client.post(
            "/v1/chat/completions", content=deep, headers={**bearer("open-key"), "Content-Type": "application/json"}
        )
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "nests arrays or objects too deeply" in response.json()["error"]["message"]
    assert seen == ["hook"]


async def test_a_body_that_is_not_json_is_refused_as_before_and_nothing_is_begun(
    settings: Settings, embeddings: USEEmbeddings, seen: list[str]
) -> None:
    async with client(settings, embeddings, seen) as test_client:
        response = await test_client.post(
            "/v1/chat/completions",
            content=b'{"model": "gateway-auto", "messages": [',
            headers={**bearer("open-key"), "Content-Type": "application/json"},
        )
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/json")
    assert seen == ["hook"]


async def test_a_follow_up_is_embedded_as_rewritten_not_as_sent(
    settings: Settings, embeddings: USEEmbeddings, seen: list[str]
) -> None:
    messages = [
        {"role": "user", "content": "Where is the Osaka office?"},
        {"role": "assistant", "content": "In Umeda."},
        {"role": "user", "content": "When did it open?"},
    ]
    async with client(settings, embeddings, seen) as test_client:
        response = await test_client.post(
            "/v1/chat/completions", json={"model": "gateway-auto", "messages": messages}, headers=bearer("open-key")
        )
    assert response.status_code == 200, response.text
    assert seen[0] == "hook"
    assert "embed:When did it open?" not in seen  # the raw follow-up is never embedded


class Model:
    """A model that starts a run by itself: ``runs`` counts the runs, ``pending`` holds their futures."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.pending: list[asyncio.Future[Any]] = []

    def begin_query_array(self, text: str) -> asyncio.Future[Any]:
        self.runs.append(text)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        return future

    # Embeddings' abstract interface, unused here
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError

    def embed_query(self, text: str) -> list[float]:
        raise NotImplementedError


def cached(model: Model, backend: Any = None) -> CachedEmbeddings:
    return CachedEmbeddings(model, MemoryBackend(100) if backend is None else backend, model="m")  # type: ignore[arg-type]


async def test_a_started_embedding_runs_now_and_is_kept_as_it_arrives() -> None:
    model = Model()
    embeddings = cached(model)
    started = embeddings.begin_query("q")
    assert started is not None
    assert model.runs == ["q"]  # under way before anything was awaited
    model.pending[0].set_result(np.array([0.5, 0.25], dtype=np.float32))
    assert await started == [0.5, 0.25]
    await asyncio.sleep(0)  # the run's done callback, which leaves the store to the next step
    await asyncio.sleep(0)  # the store
    assert embeddings.misses == 1
    hit = embeddings.begin_query("q")
    assert hit is not None
    assert hit.future.done()
    assert await hit == [0.5, 0.25]
    assert model.runs == ["q"]  # served from the process's vectors
    assert embeddings.hits == 1


async def test_a_reader_waiting_for_a_started_vector_gets_it_before_it_is_stored() -> None:
    """The store of an arriving vector waits one loop step, so the reader's step (routing, up to its model call)
    comes first; the vector is kept right after it."""
    model = Model()
    backend = MemoryBackend(100)
    embeddings = cached(model, backend)
    started = embeddings.begin_query("q")
    assert started is not None
    stored_when_read: list[int] = []

    async def reader() -> list[float]:
        vector = await started
        stored_when_read.append(len(backend))
        return vector

    reading = asyncio.ensure_future(reader())
    await asyncio.sleep(0)  # the reader now waits for the vector
    model.pending[0].set_result(np.array([0.5, 0.25], dtype=np.float32))
    assert await reading == [0.5, 0.25]
    assert stored_when_read == [0]
    await asyncio.sleep(0)
    assert len(backend) == 1
    hit = embeddings.begin_query("q")
    assert hit is not None
    assert hit.future.done()
    assert model.runs == ["q"]


async def test_a_started_embedding_is_none_where_it_would_have_to_await() -> None:
    model = Model()
    shared = cached(model, backend=object())  # stands for Redis: a vector there is read only by awaiting
    assert shared.begin_query("q") is None
    assert model.runs == []


async def test_a_failed_run_reaches_the_reader_as_the_knowledge_base_reports_it() -> None:
    model = Model()
    knowledge = KnowledgeBase(cached(model), None, Chunker(200, 20))  # type: ignore[arg-type]
    started = knowledge.begin_query("q")
    assert started is not None
    model.pending[0].set_exception(RuntimeError("encoder failed"))
    with pytest.raises(ProviderError, match="embedding failed: encoder failed"):
        await started


async def test_a_vector_started_and_not_read_runs_on_and_is_kept() -> None:
    """An answer-cache hit lets its question's vector go: the run cannot be stopped, so its vector is kept."""
    model = Model()
    embeddings = cached(model)
    started = embeddings.begin_query("q")
    assert started is not None

    async def never(text: str) -> list[float]:
        raise AssertionError("embedded again")

    vector = QueryVector.started(never, "q", started)
    assert vector.early
    vector.release()
    assert not vector.early
    assert not started.future.cancelled()
    model.pending[0].set_result(np.array([1.0, 0.0], dtype=np.float32))
    await asyncio.sleep(0)  # the run's hand-over: its done callback leaves the store to the next step
    await asyncio.sleep(0)  # kept
    hit = embeddings.begin_query("q")
    assert hit is not None
    assert hit.future.done()
    assert await hit == [1.0, 0.0]
    assert model.runs == ["q"]


async def test_a_failed_run_nobody_reads_is_not_reported_unretrieved(caplog: pytest.LogCaptureFixture) -> None:
    model = Model()
    started = cached(model).begin_query("q")
    assert started is not None
    QueryVector.started(AssertionError, "q", started).release()  # type: ignore[arg-type]
    model.pending[0].set_exception(RuntimeError("encoder failed"))
    await asyncio.sleep(0)
    del started, model
    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_a_started_embeddings_failure_is_reported_by_each_layer_in_turn() -> None:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(RuntimeError("down"))
    started = (
        StartedEmbedding(future, list)
        .reporting(lambda error: ValueError(f"inner {error}"))
        .reporting(lambda error: ProviderError(f"outer {error}", provider="embeddings"))
    )
    with pytest.raises(ProviderError, match="outer inner down") as raised:
        await started
    assert isinstance(raised.value.__cause__, RuntimeError)


async def test_the_local_models_started_vector_is_its_awaited_one_bit_for_bit(embeddings: USEEmbeddings) -> None:
    texts = ["Where is the Osaka office?", "東京オフィスの住所は？"]
    started = [embeddings.begin_query_array(text) for text in texts]
    for text, future in zip(texts, started, strict=True):
        assert (await future).tolist() == await embeddings.aembed_query(text) == embeddings.embed_query(text)


async def test_an_early_vector_leaves_no_trace_of_its_own(settings: Settings, embeddings: USEEmbeddings) -> None:
    """Its lookup of the process's vectors happens before the request's span opens: counted, not a root trace."""
    async with traced_app(settings, embeddings) as (test_client, _, exporter):
        response = await test_client.post("/v1/chat/completions", json=chat())
        assert response.status_code == 200, response.text
        trace_id = response.json()["gateway"]["trace_id"]
        for _ in range(100):
            if any(s.name == "POST /v1/chat/completions" for s in exporter.get_finished_spans()):
                break
            await asyncio.sleep(0.02)
        spans = exporter.get_finished_spans()
    assert spans
    assert {format(s.context.trace_id, "032x") for s in spans if s.context} == {trace_id}
