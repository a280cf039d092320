"""A request embeds its query only when something reads the vector, and then once: router, cache and retrieval share it.

Issue 17: a request that forces ``direct`` with the semantic cache off needs no embedding, and a quarter of a
miss's CPU went into one. A query is embedded on ONNX Runtime's own thread (``USEOnnx.encode_async``), beside the
event loop.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import Future
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


async def test_an_answer_cache_hit_embeds_nothing_when_vectors_are_not_kept(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    """Without the process's vector cache a vector begun early for a question the answer cache then serves would be
    a whole run for nothing: early vectors are off there, and the hit embeds nothing."""
    uncached = settings.replace(cache={"embedding_ttl_s": 0})
    assert uncached.cache.enabled
    question = {"query": "When did the Lisbon office open?", "route": "auto"}
    counting = await ask(uncached, embeddings, question, question)
    assert counting.queries == [question["query"]]


async def test_the_semantic_cache_embeds_a_forced_direct_request_once(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    semantic = settings.replace(semantic_cache={"enabled": True})
    counting = await ask(semantic, embeddings, {"query": "Say hello in French.", "route": "direct"})
    assert counting.queries == ["Say hello in French."]


async def test_concurrent_queries_each_get_the_vector_the_sync_api_gives(embeddings: USEEmbeddings) -> None:
    """Every run goes through ONNX Runtime's thread, one after the other: a text's vector is the same bit for bit
    whichever API asked for it and whatever ran beside it."""
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


def test_a_run_goes_on_while_its_caller_runs_python_and_reports_from_another_thread(
    embeddings: USEEmbeddings,
) -> None:
    """``encode_async`` returns at once and the run needs nothing more from the caller's thread: the caller here never
    waits or blocks (it spins), yet the vector arrives, handed over on ONNX Runtime's thread."""
    arrived = threading.Event()
    seen: list[tuple[int, np.ndarray | None, BaseException | None]] = []

    def done(vector: np.ndarray | None, error: BaseException | None) -> None:
        seen.append((threading.get_ident(), vector, error))
        arrived.set()

    embeddings._model.encode_async("Where is the Osaka office? " * 20, done)
    deadline = time.monotonic() + 30
    while not arrived.is_set() and time.monotonic() < deadline:
        pass  # Python holding the GIL, as an event loop serving requests does
    assert arrived.is_set()
    (thread, vector, error) = seen[0]
    assert thread != threading.get_ident()
    assert error is None
    assert vector is not None
    assert vector.tolist() == embeddings.embed_query("Where is the Osaka office? " * 20)


async def test_a_failed_run_reaches_its_caller_and_the_next_run_goes_on(
    embeddings: USEEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = embeddings._model
    real = model._start  # the native session's run_async

    def failing_once(names: Any, feeds: Any, callback: Any, data: Any, options: Any) -> None:
        monkeypatch.setattr(model, "_start", real)
        callback([], data, "bad input")  # as ONNX Runtime reports a failed run: no results, its status message

    monkeypatch.setattr(model, "_start", failing_once)
    with pytest.raises(EmbeddingRunError, match="bad input"):
        await embeddings.aembed_query("fails")
    assert await embeddings.aembed_query("runs") == embeddings.embed_query("runs")
    monkeypatch.setattr(model, "_start", failing_once)
    with pytest.raises(EmbeddingRunError):
        embeddings.embed_query("fails too")  # the sync API raises it as well


async def test_a_caller_that_leaves_does_not_stop_the_others(embeddings: USEEmbeddings) -> None:
    leaving = asyncio.ensure_future(embeddings.aembed_query("gone"))
    staying = asyncio.ensure_future(embeddings.aembed_query("here"))
    await asyncio.sleep(0)  # both runs started
    leaving.cancel()
    assert await staying == embeddings.embed_query("here")
    with pytest.raises(asyncio.CancelledError):
        await leaving


def test_a_process_ending_with_runs_in_flight_exits_cleanly() -> None:
    """ONNX Runtime's thread calling back into a finalizing interpreter aborts the process (SIGABRT): the model
    waits for its runs at exit, so a script (or a gateway whose last requests left) ends with status 0."""
    script = (
        "from gateway.providers.use_onnx import USEOnnx\n"
        "model = USEOnnx(quantize=False)\n"
        "for i in range(20):\n"
        "    model.encode_async('word ' * 300 + str(i), lambda vector, error: None)\n"
        "print('leaving', model._running > 0)\n"
    )
    ended = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert ended.stdout.strip() == "leaving True"  # runs were in flight as the interpreter began to exit
    assert ended.returncode == 0, ended.stderr[-500:]


def test_close_waits_until_no_run_is_in_flight(embeddings: USEEmbeddings) -> None:
    arrived: list[bool] = []
    for i in range(5):
        embeddings._model.encode_async(f"Where is office {i}? " * 30, lambda vector, error: arrived.append(True))
    embeddings.close()
    assert embeddings._model._running == 0
    assert len(arrived) == 5


def test_a_failing_hand_over_is_logged_not_raised_into_onnx_runtimes_thread(
    embeddings: USEEmbeddings, caplog: pytest.LogCaptureFixture
) -> None:
    def done(vector: np.ndarray | None, error: BaseException | None) -> None:
        raise ValueError("a bug in a caller's callback")

    with caplog.at_level("ERROR", logger="gateway.providers.use_onnx"):
        embeddings._model.encode_async("Where is the Osaka office?", done)
        assert embeddings._model.wait_idle(30)
    assert "handing an embedding over failed" in caplog.text
    assert embeddings.embed_query("still serving") == embeddings.embed_query("still serving")


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


def test_the_vector_is_handed_over_before_its_new_rows_are_kept(embeddings: USEEmbeddings) -> None:
    """The caller waits for the vector, nobody for the rows: the rows are kept after the hand-over."""
    model = embeddings._model
    text = _new_pieces_text(model)
    ids = model._tokenize(text)
    missing_at_hand_over: list[list[int]] = []

    def done(vector: np.ndarray | None, error: BaseException | None) -> None:
        assert error is None
        assert vector is not None
        lookup = model.pieces.lookup(ids)
        missing_at_hand_over.append(list(lookup.missing))
        model.pieces.settle(lookup, None)

    model.encode_async(text, done)
    assert model.wait_idle(30)
    assert missing_at_hand_over[0], "the text's new pieces were kept before its vector was handed over"
    after = model.pieces.lookup(ids)
    model.pieces.settle(after, None)
    assert after.missing == []
    assert model.pieces.pinned == 0  # the run's rows were let go with it
    assert np.array_equal(model.encode([text])[0], embeddings.embed_array([text])[0])


async def test_a_querys_new_rows_are_kept_on_the_loop_once_the_query_has_gone_on(embeddings: USEEmbeddings) -> None:
    """On the async path the rows are settled by the event loop a few steps after the vector arrives, not on ONNX
    Runtime's thread while the loop waits for the GIL to take the vector."""
    model = embeddings._model
    assert model.wait_idle(30)  # nothing left over from earlier tests' loops
    text = _new_pieces_text()
    ids = model._tokenize(text)

    def missing_now() -> list[int]:
        lookup = model.pieces.lookup(ids)
        model.pieces.settle(lookup, None)
        return lookup.missing

    vector = await embeddings.aembed_query_array(text)
    assert missing_now()  # the query goes on first
    for _ in range(2000):  # a few loop steps (the hand-over to the loop may wait for the GIL on this test's loop)
        if not missing_now():
            break
        await asyncio.sleep(0.001)
    assert missing_now() == []
    assert model.pieces.pinned == 0
    assert np.array_equal(vector, model.encode([text])[0])


async def test_a_query_wakes_the_loop_once_and_its_rows_wait_before_the_hand_over(
    embeddings: USEEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One post to the loop from ONNX Runtime's thread per query, for the vector and the rows together: the rows are
    queued before it."""
    model = embeddings._model
    assert model.wait_idle(30)
    loop = asyncio.get_running_loop()
    posted: list[int] = []
    post = loop.call_soon_threadsafe

    def counting(callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
        posted.append(len(model._unsettled))  # the rows waiting when the loop is woken
        return post(callback, *args, context=context)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    vector = await embeddings.aembed_query_array(_new_pieces_text())
    assert posted == [1]
    assert vector.shape == (512,)


def test_rows_whose_keeper_never_settles_them_are_settled_when_the_model_goes_idle(embeddings: USEEmbeddings) -> None:
    """A keeper may never run what it was handed (an event loop that stopped first): waiting for the model settles
    it, so no row stays pinned and the computed rows are kept."""
    model = embeddings._model
    text = _new_pieces_text(model)
    ids = model._tokenize(text)
    arrived: Future[np.ndarray] = Future()
    model.encode_async(text, lambda vector, error: arrived.set_result(vector), defer_rows=True)
    arrived.result(timeout=30)
    waiting = model.pieces.lookup(ids)  # queued before the vector was handed over, and nothing settles them
    model.pieces.settle(waiting, None)
    assert waiting.missing
    assert model.wait_idle(30)
    lookup = model.pieces.lookup(ids)
    model.pieces.settle(lookup, None)
    assert lookup.missing == []
    assert model.pieces.pinned == 0


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
    arrived: list[np.ndarray] = []
    with caplog.at_level("ERROR", logger="gateway.providers.use_onnx"):
        model.encode_async(text, lambda vector, error: arrived.append(vector) if vector is not None else None)
        assert model.wait_idle(30)
    assert "settling an embedding's piece rows failed" in caplog.text
    assert len(arrived) == 1
    assert np.array_equal(arrived[0], expected)
    monkeypatch.undo()
    lookup = model.pieces.lookup(model._tokenize(text))
    model.pieces.settle(lookup, None)
    assert lookup.missing  # nothing was kept


async def test_the_query_cache_stores_the_array_the_model_hands_over(embeddings: USEEmbeddings) -> None:
    """The cache reads the model's float32 array (no list round trip) and returns and stores the same values."""
    backend = MemoryBackend()
    cached = CachedEmbeddings(embeddings, backend, model="use", prefix="p")
    text = _new_pieces_text()
    vector = await cached.aembed_query(text)
    assert vector == embeddings.embed_query(text)
    assert await cached.aembed_query(text) == vector
    assert cached.hits == 1
