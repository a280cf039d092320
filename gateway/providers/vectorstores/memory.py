"""In-process vector store: the fake injected by unit tests (and nothing else)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gateway.providers.vectorstores.base import ChunkRecord, VectorStore, check_tenant
from pipelines.shared.deps import Passage


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

    async def search(self, tenant: str, vector: Sequence[float], k: int) -> list[Passage]:
        chunks = [c for doc in self._chunks.get(check_tenant(tenant), {}).values() for c in doc]
        if not chunks:
            return []
        matrix = np.asarray([c.vector for c in chunks], dtype=np.float32)
        query = np.asarray(vector, dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1) * max(float(np.linalg.norm(query)), 1e-12)
        scores = matrix @ query / np.maximum(norms, 1e-12)
        order = np.argsort(-scores)[:k]
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

    async def ping(self) -> None:
        return None
