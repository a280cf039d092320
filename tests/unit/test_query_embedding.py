"""A request embeds its query only when something reads the vector, and then once: router, cache and retrieval share it.

A request that forces ``direct`` with the semantic cache off needs no embedding (a quarter of a miss's CPU went into
one). The local model embeds queries off the event loop, one by one on a worker thread of its own
(``USEEmbeddings.aembed_query``): a query whose caller leaves before its run begins is never run, and ``close``
waits for the runs queued or in flight.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
import uuid
from typing import Any

import numpy as np
import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.cache.backend import MemoryBackend
from gateway.cache.embeddings import CachedEmbeddings
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.use_onnx import EmbeddingRunError, USEOnnx
from gateway.providers.use_pieces import PieceLookup
from gateway.settings import Settings
from tests.conftest import grounded_or_direct
from tests.fakes.scripted_chat import ScriptedChatModel
from tests.unit.embedding_support import DelegatingEmbeddings


class CountingEmbeddings(DelegatingEmbeddings):
    """The real model, counting the query embeddings the request path asks for."""

    def __init__(self, inner: USEEmbeddings) -> None:
        super().__init__(inner)
        self.queries: list[str] = []

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


@pytest.mark.parametrize("vector_ttl_s", [0.0, 3600.0])
async def test_an_answer_cache_hit_embeds_nothing(
    settings: Settings, embeddings: USEEmbeddings, vector_ttl_s: float
) -> None:
    """Whether the process keeps query vectors or not: the answer is found before anything reads the vector."""
    cached = settings.replace(cache={"embedding_ttl_s": vector_ttl_s})
    assert cached.cache.enabled
    question = {"query": "When did the Lisbon office open?", "route": "auto"}
    counting = await ask(cached, embeddings, question, question)
    assert counting.queries == [question["query"]]


async def test_the_semantic_cache_embeds_a_forced_direct_request_once(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    semantic = settings.replace(semantic_cache={"enabled": True})
    counting = await ask(semantic, embeddings, {"query": "Say hello in French.", "route": "direct"})
    assert counting.queries == ["Say hello in French."]


async def test_concurrent_queries_each_get_the_vector_the_sync_api_gives(embeddings: USEEmbeddings) -> None:
    """A text's vector is the same bit for bit whichever API asked for it and whatever ran beside it."""
    texts = [
        "Where is the Osaka office?",
        "東京オフィスの住所は？",
        "Which is older, the Tokyo office or the Osaka office?",
        "Where is the Osaka office?",
    ]
    together = await asyncio.gather(*(embeddings.aembed_query(t) for t in texts))
    for text, vector in zip(texts, together, strict=True):
        assert vector == embeddings.embed_query(text)
    assert embeddings.embed_documents(texts) == together
    assert await embeddings.aembed_documents(texts) == together


class Runs:
    """The model's runs, recorded as they end; a run of ``held`` waits on its thread until ``release``."""

    def __init__(self, model: USEOnnx, monkeypatch: pytest.MonkeyPatch, held: str = "") -> None:
        self.ended: list[str] = []
        self.holding = threading.Event()
        self._release = threading.Event()
        self._held = held
        self._encode_one = model.encode_one
        monkeypatch.setattr(model, "encode_one", self)

    def __call__(self, text: str) -> np.ndarray:
        if text == self._held:
            self.holding.set()
            self._release.wait()
        vector = self._encode_one(text)
        self.ended.append(text)
        return vector

    def release(self) -> None:
        self._release.set()


async def test_a_query_whose_caller_left_before_its_run_is_never_run(
    embeddings: USEEmbeddings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runs = Runs(embeddings._model, monkeypatch, held="first")
    first = asyncio.ensure_future(embeddings.aembed_query("first"))
    gone = asyncio.ensure_future(embeddings.aembed_query("gone"))
    await asyncio.to_thread(runs.holding.wait)  # "first" runs on the worker; "gone" is queued behind it
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    runs.release()
    with caplog.at_level(logging.WARNING):
        assert await first == embeddings.embed_query("first")
        embeddings.close()  # every run queued before it is over
    assert runs.ended == ["first", "first"]  # the run, and the comparison's sync call: "gone" never ran
    assert caplog.records == []


async def test_a_caller_that_leaves_during_its_run_stops_nothing_and_logs_nothing(
    embeddings: USEEmbeddings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runs = Runs(embeddings._model, monkeypatch, held="leaving")
    leaving = asyncio.ensure_future(embeddings.aembed_query("leaving"))
    staying = asyncio.ensure_future(embeddings.aembed_query("staying"))
    await asyncio.to_thread(runs.holding.wait)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    runs.release()
    with caplog.at_level(logging.WARNING):
        assert await staying == embeddings.embed_query("staying")
        embeddings.close()
    assert runs.ended[:2] == ["leaving", "staying"]  # the run under way finished, its vector dropped
    assert caplog.records == []


async def test_close_waits_for_the_runs_queued_and_in_flight(
    embeddings: USEEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = Runs(embeddings._model, monkeypatch, held="office 0")
    texts = [f"office {i}" for i in range(5)]
    asking = [asyncio.ensure_future(embeddings.aembed_query(text)) for text in texts]
    await asyncio.to_thread(runs.holding.wait)  # every query's run is queued by now, the first under way
    closing = asyncio.ensure_future(asyncio.to_thread(embeddings.close, 30))
    assert runs.ended == []
    runs.release()
    await closing
    assert runs.ended == texts  # close returned after the last of them
    assert await asyncio.gather(*asking) == [embeddings.embed_query(text) for text in texts]
    assert await embeddings.aembed_query("still serving") == embeddings.embed_query("still serving")


async def test_a_failed_run_reaches_its_caller_and_the_next_run_goes_on(
    embeddings: USEEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = embeddings._model
    session = model._session
    real = session.run

    def failing_once(names: Any, feeds: Any) -> Any:
        monkeypatch.setattr(session, "run", real)
        raise RuntimeError("bad input")  # as ONNX Runtime's own exception types do: RuntimeError subclasses

    monkeypatch.setattr(session, "run", failing_once)
    with pytest.raises(EmbeddingRunError, match="bad input"):
        await embeddings.aembed_query("fails")
    assert model.pieces.pinned == 0  # the failed run's rows were let go
    assert await embeddings.aembed_query("runs") == embeddings.embed_query("runs")
    monkeypatch.setattr(session, "run", failing_once)
    with pytest.raises(EmbeddingRunError):
        embeddings.embed_query("fails too")  # the sync API raises it as well


def test_a_process_ending_with_query_runs_queued_exits_cleanly() -> None:
    """A script whose loop ends with query runs still queued: the runs under way finish, the queued ones of callers
    that left are dropped, and the interpreter exits with status 0."""
    script = (
        "import asyncio\n"
        "from gateway.providers.embeddings import USEEmbeddings\n"
        "model = USEEmbeddings(number_rows=False)\n"
        "async def main():\n"
        "    for i in range(20):\n"
        "        asyncio.ensure_future(model.aembed_query('word ' * 300 + str(i)))\n"
        "    await asyncio.sleep(0)\n"
        "asyncio.run(main())\n"
        "print('leaving')\n"
    )
    ended = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert ended.stdout.strip() == "leaving"
    assert ended.returncode == 0, ended.stderr[-500:]
    assert "Traceback" not in ended.stderr


def _new_pieces_text(model: USEOnnx | None = None) -> str:
    """A text with a fresh random tail; given ``model``, one that has pieces ``model`` does not keep yet (a random
    tail alone only almost surely has: earlier tests keep rows, and the number pieces are kept from the start)."""
    while True:
        text = f"Where is office {uuid.uuid4().hex} of {uuid.uuid4().hex}?"
        if model is None:
            return text
        lookup = model.pieces.lookup(model._tokenize(text))
        model.pieces.settle(lookup, None)  # unpins what the look pinned
        if lookup.missing:
            return text


async def test_a_querys_new_rows_are_kept_by_the_time_its_vector_arrives(embeddings: USEEmbeddings) -> None:
    model = embeddings._model
    text = _new_pieces_text(model)
    ids = model._tokenize(text)
    vector = await embeddings.aembed_query(text)
    lookup = model.pieces.lookup(ids)
    model.pieces.settle(lookup, None)
    assert lookup.missing == []
    assert model.pieces.pinned == 0  # the run's rows were let go with it
    assert vector == embeddings.embed_query(text)


def test_rows_that_cannot_be_kept_are_logged_and_the_vector_still_arrives(
    embeddings: USEEmbeddings, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = embeddings._model
    text = _new_pieces_text(model)
    expected = USEEmbeddings(piece_rows=0).embed_array([text])[0]  # computed from scratch, nothing kept

    settle = model.pieces.settle

    def refuse(lookup: PieceLookup, rows: np.ndarray | None) -> None:
        settle(lookup, None)  # unpinned, then the keeping fails
        raise MemoryError("no room for the rows")

    monkeypatch.setattr(model.pieces, "settle", refuse)
    with caplog.at_level("ERROR", logger="gateway.providers.use_onnx"):
        vector = model.encode_one(text)
    assert "settling an embedding's piece rows failed" in caplog.text
    assert np.array_equal(vector, expected)
    monkeypatch.undo()
    lookup = model.pieces.lookup(model._tokenize(text))
    model.pieces.settle(lookup, None)
    assert lookup.missing  # nothing was kept


async def test_the_query_cache_in_front_of_the_model_gives_its_vectors(embeddings: USEEmbeddings) -> None:
    backend = MemoryBackend()
    cached = CachedEmbeddings(embeddings, backend, model="use", prefix="p")
    text = _new_pieces_text()
    vector = await cached.aembed_query(text)
    assert vector == embeddings.embed_query(text)  # float32 already: the cache's rounding changes nothing
    assert await cached.aembed_query(text) == vector
    assert cached.hits == 1
