"""In-process vector store: the fake injected by unit tests (and nothing else)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from gateway.providers.vectorstores.base import ChunkRecord, StoredChunks, VectorStore, check_tenant
from gateway.providers.vectorstores.fusion import bm25_scores, index_terms
from pipelines.shared.deps import Passage
from pipelines.shared.visibility import Visibility


class InMemoryVectorStore(VectorStore):
    name = "memory"

    def __init__(self) -> None:
        self._chunks: dict[str, dict[str, list[ChunkRecord]]] = {}

    async def replace_document(self, tenant: str, doc_id: str, chunks: Sequence[ChunkRecord]) -> None:
        docs = self._chunks.setdefault(check_tenant(tenant), {})
        if chunks:
            docs[doc_id] = list(chunks)
        else:
            docs.pop(doc_id, None)

    async def delete_document(self, tenant: str, doc_id: str) -> bool:
        return self._chunks.get(check_tenant(tenant), {}).pop(doc_id, None) is not None

    def _all(self, tenant: str) -> list[ChunkRecord]:
        return [c for doc in self._chunks.get(check_tenant(tenant), {}).values() for c in doc]

    def _visible(self, tenant: str, visibility: Visibility) -> list[ChunkRecord]:
        """The chunks the reader may see, chosen before anything is ranked (BM25's statistics included): the
        search a tenant holding only these chunks would make."""
        return [c for c in self._all(tenant) if visibility.allows(c.access)]

    async def search(self, tenant: str, vector: Sequence[float], k: int, *, visibility: Visibility) -> list[Passage]:
        chunks = self._visible(tenant, visibility)
        scores = _cosines(chunks, vector)
        return _passages(chunks, scores, [int(i) for i in np.argsort(-scores)[:k]])

    async def keyword_search(
        self, tenant: str, terms: Sequence[str], vector: Sequence[float], k: int, *, visibility: Visibility
    ) -> list[Passage]:
        chunks = self._visible(tenant, visibility)
        bm25 = bm25_scores(terms, [index_terms(c.title, c.text).split() for c in chunks])
        order = [i for i in sorted(range(len(chunks)), key=lambda i: -bm25[i]) if bm25[i] > 0][:k]
        return _passages(chunks, _cosines(chunks, vector), order)

    async def linked_search(
        self, tenant: str, keys: Sequence[str], vector: Sequence[float], k: int, *, visibility: Visibility
    ) -> list[Passage]:
        wanted = set(keys)
        chunks = [c for c in self._visible(tenant, visibility) if wanted.intersection(c.about)]
        scores = _cosines(chunks, vector)
        return _passages(chunks, scores, [int(i) for i in np.argsort(-scores)[:k]])

    exports_chunks = True

    async def export_chunks(self, tenant: str) -> StoredChunks | None:
        chunks = self._all(tenant)
        vectors = np.asarray([c.vector for c in chunks], dtype=np.float32).reshape(len(chunks), -1)
        return StoredChunks(
            chunk_ids=[c.chunk_id for c in chunks],
            doc_ids=[c.doc_id for c in chunks],
            titles=[c.title for c in chunks],
            texts=[c.text for c in chunks],
            metadata=[json.dumps(c.metadata, ensure_ascii=False) for c in chunks],
            vectors=vectors,
            about=[c.about for c in chunks],
            access=[c.access for c in chunks],
        )

    async def document_chunks(self, tenant: str, doc_ids: Sequence[str]) -> dict[str, list[ChunkRecord]] | None:
        docs = self._chunks.get(check_tenant(tenant), {})
        return {doc_id: list(docs[doc_id]) for doc_id in doc_ids if docs.get(doc_id)}

    async def ping(self) -> None:
        return None


def _cosines(chunks: list[ChunkRecord], vector: Sequence[float]) -> np.ndarray[Any, np.dtype[np.float32]]:
    if not chunks:
        return np.zeros(0, dtype=np.float32)
    matrix = np.asarray([c.vector for c in chunks], dtype=np.float32)
    query = np.asarray(vector, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * max(float(np.linalg.norm(query)), 1e-12)
    return matrix @ query / np.maximum(norms, 1e-12)  # type: ignore[no-any-return]


def _passages(
    chunks: list[ChunkRecord], scores: np.ndarray[Any, np.dtype[np.float32]], order: list[int]
) -> list[Passage]:
    return [
        Passage(
            chunk_id=chunks[i].chunk_id,
            doc_id=chunks[i].doc_id,
            title=chunks[i].title,
            text=chunks[i].text,
            score=float(scores[i]),
            metadata=dict(chunks[i].metadata),
        )
        for i in order
    ]
