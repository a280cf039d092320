"""The knowledge base: documents in, tenant-scoped passages out.

Chunks are embedded together with their document title, because titles carry the entity a
chunk is about ("Osaka office"), which the chunk body often only refers to as "the office".

Search is hybrid by default: the store's dense and keyword (BM25) rankings, each ``HYBRID_DEPTH``
times deeper than asked, fused by reciprocal rank (:mod:`gateway.providers.vectorstores.fusion`).
Measured with ``python -m tests.benchmarks.retrieval_recall`` (supporting-passage recall@4/@8,
dense vs hybrid, HotpotQA and JSQuAD).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.embeddings import Embeddings

from gateway.cache.versions import KnowledgeVersions
from gateway.chunking import Chunker
from gateway.errors import ProviderError
from gateway.providers.vectorstores.base import ChunkRecord, VectorStore
from gateway.providers.vectorstores.fusion import query_terms, reciprocal_rank_fusion
from pipelines.shared.deps import Passage

HYBRID_DEPTH = 3


@dataclass(frozen=True, slots=True)
class NewDocument:
    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class IngestResult:
    upserted: int
    chunks: int


class KnowledgeBase:
    """Implements the pipelines' ``Retriever`` over an embeddings model and a vector store."""

    def __init__(
        self,
        embeddings: Embeddings,
        store: VectorStore,
        chunker: Chunker,
        versions: KnowledgeVersions | None = None,
        *,
        hybrid: bool = True,
    ) -> None:
        self._embeddings = embeddings
        self.store = store
        self._chunker = chunker
        self._versions = versions
        self.hybrid = hybrid

    async def _bump(self, tenant: str) -> None:
        """After a write (even a partial one): answers computed before it must never be served again."""
        if self._versions is not None:
            await self._versions.bump(tenant)

    async def ingest(self, tenant: str, documents: Sequence[NewDocument]) -> IngestResult:
        planned: list[tuple[NewDocument, list[str]]] = [(d, self._chunker.split(d.text)) for d in documents]
        texts = [_embedding_text(doc.title, chunk) for doc, chunks in planned for chunk in chunks]
        vectors = await self._embed_documents(texts)
        try:
            total = await self._store_all(tenant, planned, vectors)
        finally:
            await self._bump(tenant)
        return IngestResult(upserted=len(planned), chunks=total)

    async def _store_all(
        self, tenant: str, planned: list[tuple[NewDocument, list[str]]], vectors: list[list[float]]
    ) -> int:
        position = 0
        total = 0
        for doc, chunks in planned:
            records = [
                ChunkRecord(
                    doc_id=doc.id,
                    index=i,
                    title=doc.title or doc.id,
                    text=chunk,
                    vector=vectors[position + i],
                    metadata=doc.metadata,
                )
                for i, chunk in enumerate(chunks)
            ]
            position += len(chunks)
            total += len(records)
            await self.store.replace_document(tenant, doc.id, records)
        return total

    async def delete(self, tenant: str, doc_id: str) -> bool:
        try:
            return await self.store.delete_document(tenant, doc_id)
        finally:
            await self._bump(tenant)

    async def search(self, tenant: str, query: str, k: int, *, vector: list[float] | None = None) -> list[Passage]:
        if vector is None:
            vector = await self.embed_query(query)
        if not self.hybrid:
            return await self.store.search(tenant, vector, k)
        depth = k * HYBRID_DEPTH
        dense = await self.store.search(tenant, vector, depth)
        keyword = await self.store.keyword_search(tenant, query_terms(query), vector, depth)
        return reciprocal_rank_fusion([dense, keyword], k)

    async def embed_texts(self, texts: list[str]) -> list[list[float]]:
        """Embeds strips and other short texts for scoring (not for storage)."""
        return await self._embed_documents(texts)

    async def embed_query(self, text: str) -> list[float]:
        try:
            return await self._embeddings.aembed_query(text)
        except ProviderError:
            raise
        except Exception as exc:  # any embeddings backend: translate at the boundary
            raise ProviderError(f"embedding failed: {exc}", provider="embeddings") from exc

    async def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        try:
            return await self._embeddings.aembed_documents(texts)
        except Exception as exc:
            raise ProviderError(f"embedding failed: {exc}", provider="embeddings") from exc


def _embedding_text(title: str, chunk: str) -> str:
    return f"{title}\n{chunk}" if title else chunk
