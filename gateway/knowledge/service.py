"""The knowledge base: documents in, tenant-scoped passages out.

Chunks are embedded together with their document title, because titles carry the entity a
chunk is about ("Osaka office"), which the chunk body often only refers to as "the office".

Every write is fenced by knowledge-version bumps (``gateway.cache.versions`` explains why): one
before touching the store, so a cache that cannot record the change refuses it with nothing
written, and one after, without which the change is not acknowledged (503, retry).

Search is hybrid by default: the store's dense and keyword (BM25) rankings, each ``HYBRID_DEPTH``
times deeper than asked, fused by reciprocal rank (:mod:`gateway.providers.vectorstores.fusion`).
Measured with ``python -m tests.benchmarks.retrieval_recall`` (supporting-passage recall@4/@8,
dense vs hybrid, HotpotQA and JSQuAD).

The dense half is answered from the tenant's in-memory matrix when it is warm
(:mod:`gateway.knowledge.matrices`: the same exact cosine ranking, about a millisecond instead of a scan of
the store), and a dense ranking the router's probe already made is reused rather than searched again
(:meth:`KnowledgeBase.search_reusing`): a request searches the vectors once for routing and retrieval.

Every search takes the reader's ``Visibility`` and hands it to the store or the matrix, which filter inside their
search (:mod:`gateway.providers.vectorstores.base`): the dense, keyword and linked halves of one request all rank
only what its reader may see. A document's access tags go on every chunk of it; an upsert that changes nothing of
a document but its access writes its chunks again with the vectors they have (read back from the store), so
re-permissioning a library costs no embedding, and still moves the tenant's knowledge version like any change.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from langchain_core.embeddings import Embeddings

from gateway.cache import CacheUnavailableError, KnowledgeVersions
from gateway.errors import ProviderError
from gateway.knowledge.chunking import Chunker, Piece
from gateway.knowledge.files.sections import Section
from gateway.knowledge.matrices import TenantMatrices
from gateway.providers import ChunkRecord, VectorStore, query_terms
from pipelines.shared import UNSET, Passage, Visibility, about_keys, mention_keys, reciprocal_rank_fusion

logger = logging.getLogger(__name__)

T = TypeVar("T")
HYBRID_DEPTH = 3
# Hybrid fusion keeps the first chunk of its two searches, dense and keyword, in whatever it returns: each search is
# there for what the other misses (reciprocal_rank_fusion's keep_first_of). The linked passages are not a search of
# the question and get no such place.
SEARCHES = 2
# The passages whose links a search follows: the head of its own ranking, where the first hop's passage is.
LINK_SEEDS = 4
# Keys one linked search sends at most (a store's filter list stays small; HotpotQA's seeds mention ~60 names).
MAX_LINK_KEYS = 512


@dataclass(frozen=True, slots=True)
class NewDocument:
    """A document to index: plain ``text``, or a file's ``sections`` (then chunked section by section)."""

    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    sections: tuple[Section, ...] = ()
    # Its access tags, every chunk's (``gateway.knowledge.permissions.document_tags``): UNSET when it names none.
    access: tuple[str, ...] = (UNSET,)


@dataclass(frozen=True, slots=True)
class IngestResult:
    upserted: int
    chunks: int
    chunks_by_document: dict[str, int] = field(default_factory=dict)
    # Documents whose only change was their access: their chunks were re-tagged, not embedded again.
    retagged: tuple[str, ...] = ()


# Told which documents of a tenant changed, after the write (the curation store's ``stale`` diagnosis).
OnChange = Callable[[str, Sequence[str]], Awaitable[None]]


class KnowledgeBase:
    """Implements the pipelines' ``Retriever`` over an embeddings model and a vector store."""

    def __init__(
        self,
        embeddings: Embeddings,
        store: VectorStore,
        chunker: Chunker,
        versions: KnowledgeVersions | None = None,
        on_change: OnChange | None = None,
        *,
        hybrid: bool = True,
        links: bool = False,
        matrices: TenantMatrices | None = None,
    ) -> None:
        self._embeddings = embeddings
        self.store = store
        self._chunker = chunker
        self._versions = versions
        self._on_change = on_change
        self.hybrid = hybrid
        self.links = links
        self.matrices = matrices

    async def _change(self, tenant: str, write: Callable[[], Awaitable[T]]) -> T:
        """Run a store write between two bumps; it returns only when the change is acknowledged.

        The bump before makes a Redis that is already down refuse the change with nothing written;
        the bump after is the one that invalidates (a query that read the store before the write is
        keyed to an earlier version). A write that fails half-way still bumps, best effort, and
        its own error is what the client sees.
        """
        if self._versions is None:
            return await write()
        await self._versions.acknowledge(tenant)
        try:
            result = await write()
        except BaseException:
            await self._versions.bump(tenant)
            raise
        await self._versions.acknowledge(tenant)
        return result

    def _pieces(self, document: NewDocument) -> list[Piece]:
        if document.sections:
            return self._chunker.split_sections(document.sections)
        return [Piece(text) for text in self._chunker.split(document.text)]

    async def ingest(self, tenant: str, documents: Sequence[NewDocument]) -> IngestResult:
        """Index ``documents``, each replacing its earlier chunks, as one change of the tenant's knowledge.

        A document whose chunks would be what the store holds but for their access tags keeps its stored vectors
        (re-tagged, not embedded again); the others are embedded."""
        planned = [(d, self._records(d, self._pieces(d))) for d in documents]
        reused = await self._retaggable(tenant, planned)
        texts = [
            _embedding_text(doc.title, piece)
            for doc, records in planned
            if doc.id not in reused
            for piece in (p for p, _ in records)
        ]
        vectors = iter(await self._embed_documents(texts))
        writes: list[tuple[str, list[ChunkRecord]]] = []
        for doc, records in planned:
            stored = reused.get(doc.id)
            if stored is not None:
                writes.append(
                    (doc.id, [replace(r, vector=old.vector) for (_, r), old in zip(records, stored, strict=True)])
                )
            else:
                writes.append((doc.id, [replace(r, vector=next(vectors)) for _, r in records]))
        total = await self._change(tenant, lambda: self._store_all(tenant, writes))
        if self._on_change is not None:
            await self._on_change(tenant, [doc.id for doc, _ in planned])
        by_document = {doc.id: len(records) for doc, records in planned}
        return IngestResult(
            upserted=len(planned), chunks=total, chunks_by_document=by_document, retagged=tuple(sorted(reused))
        )

    @staticmethod
    def _records(doc: NewDocument, pieces: list[Piece]) -> list[tuple[Piece, ChunkRecord]]:
        """The document's chunks as they will be stored, their vectors still to come."""
        about = tuple(sorted(about_keys(doc.title or doc.id)))
        return [
            (
                piece,
                ChunkRecord(
                    doc_id=doc.id,
                    index=i,
                    title=doc.title or doc.id,
                    text=piece.text,
                    vector=(),
                    metadata={**doc.metadata, "section": piece.heading} if piece.heading else doc.metadata,
                    about=about,
                    access=doc.access,
                ),
            )
            for i, piece in enumerate(pieces)
        ]

    async def _retaggable(
        self, tenant: str, planned: list[tuple[NewDocument, list[tuple[Piece, ChunkRecord]]]]
    ) -> dict[str, list[ChunkRecord]]:
        """The stored chunks of each planned document that differs from what is stored in its access alone."""
        try:
            stored = await self.store.document_chunks(tenant, [doc.id for doc, _ in planned])
        except ProviderError as exc:
            # Embedding everything again is what an upsert did before re-tagging existed: slower, never wrong.
            logger.warning("stored chunks of tenant %r not read back (embedding all): %s", tenant, exc)
            return {}
        if not stored:
            return {}
        found: dict[str, list[ChunkRecord]] = {}
        for doc, records in planned:
            held = stored.get(doc.id)
            if held and _only_access_differs([r for _, r in records], held):
                found[doc.id] = held
        return found

    async def version(self, tenant: str) -> int | None:
        """The tenant's knowledge version (what a change moves on), None where no cache keeps versions."""
        if self._versions is None:
            return None
        try:
            return await self._versions.current(tenant)
        except CacheUnavailableError:
            return None  # the change itself was acknowledged; only this read failed

    async def _store_all(self, tenant: str, writes: list[tuple[str, list[ChunkRecord]]]) -> int:
        total = 0
        for doc_id, records in writes:
            total += len(records)
            await self.store.replace_document(tenant, doc_id, records)
        return total

    async def delete(self, tenant: str, doc_id: str) -> bool:
        """True when the document existed. A retry after a 503 may answer False: the first attempt deleted it."""
        deleted = await self._change(tenant, lambda: self.store.delete_document(tenant, doc_id))
        if deleted and self._on_change is not None:
            await self._on_change(tenant, [doc_id])
        return deleted

    async def document_access(self, tenant: str, doc_ids: Sequence[str]) -> dict[str, frozenset[str]]:
        """The current access tags of each of ``doc_ids`` the tenant holds, as its chunks carry them (a document it
        does not hold is left out; so is every one where the store cannot read tags back). What an export of
        document ids (curation's training pairs) asks before it puts an id in a row of a restricted asker."""
        wanted = list(dict.fromkeys(doc_ids))
        if not wanted:
            return {}
        found = await self.store.document_access(tenant, wanted)
        if found is None:
            logger.warning("vector store %s cannot report documents' access: none reads as readable", self.store.name)
            return {}
        return found

    async def readable(self, tenant: str, doc_ids: Sequence[str], visibility: Visibility) -> set[str]:
        """Those of ``doc_ids`` that ``visibility`` may read now, by their chunks' current access. An unrestricted
        visibility reads every id as given (no lookup: whatever the tenant holds or held); a restricted one only the
        documents the tenant still holds and their tags allow."""
        if visibility.unrestricted:
            return set(doc_ids)
        tags = await self.document_access(tenant, doc_ids)
        return {doc_id for doc_id, held in tags.items() if visibility.allows(held)}

    async def search(
        self, tenant: str, query: str, k: int, *, visibility: Visibility, vector: list[float] | None = None
    ) -> list[Passage]:
        if vector is None:
            vector = await self.embed_query(query)
        if not self.hybrid:
            return await self._dense(tenant, vector, k, visibility)
        dense = await self._dense(tenant, vector, k * HYBRID_DEPTH, visibility)
        return await self._fuse(tenant, query, k, vector, dense, visibility)

    def ranking_depth(self, k: int) -> int:
        """How deep a dense ranking must be for ``search(k)`` to be computed from it."""
        return k * HYBRID_DEPTH if self.hybrid else k

    async def search_reusing(
        self,
        tenant: str,
        query: str,
        k: int,
        *,
        visibility: Visibility,
        vector: list[float] | None,
        dense: Sequence[Passage],
        depth: int,
    ) -> list[Passage] | None:
        """``search`` computed from a dense ranking already made for this query and this ``visibility``
        (``dense``, searched ``depth`` deep: the router's probe), or None when that ranking is too shallow. Dense
        retrieval is its head; hybrid retrieval fuses it with the keyword hits, so only the keyword half touches
        the store."""
        need = self.ranking_depth(k)
        if need > depth:
            return None
        ranking = list(dense[:need])
        if not self.hybrid:
            return ranking
        if vector is None:
            vector = await self.embed_query(query)
        return await self._fuse(tenant, query, k, vector, ranking, visibility)

    async def dense_search(
        self, tenant: str, query: str, k: int, *, visibility: Visibility, vector: list[float] | None = None
    ) -> list[Passage]:
        """The query vector alone, whatever ``hybrid`` says: the ranking the router's probe signals were trained
        on (its training tenants are searched by cosine), so routing reads the store as it learnt to."""
        if vector is None:
            vector = await self.embed_query(query)
        return await self._dense(tenant, vector, k, visibility)

    async def _dense(self, tenant: str, vector: list[float], k: int, visibility: Visibility) -> list[Passage]:
        if self.matrices is not None:
            found = await self.matrices.search(tenant, vector, k, visibility=visibility)
            if found is not None:
                return found
        return await self.store.search(tenant, vector, k, visibility=visibility)

    async def _fuse(
        self, tenant: str, query: str, k: int, vector: list[float], dense: list[Passage], visibility: Visibility
    ) -> list[Passage]:
        terms = query_terms(query)
        keyword = await self.store.keyword_search(tenant, terms, vector, k * HYBRID_DEPTH, visibility=visibility)
        if not self.links:
            return reciprocal_rank_fusion([dense, keyword], k, keep_first_of=SEARCHES)
        seeds = reciprocal_rank_fusion([dense, keyword], LINK_SEEDS, keep_first_of=SEARCHES)
        # The walk's ranking starts where it starts (a walk restarting at the seeds gives them the most weight), then
        # the passages they link to. Without the seeds, a passage the links reach and both searches rank lowly
        # outranked them (the written KB's bridge questions lost a third of their recall@4); with the targets ahead
        # of them, or given a reserved slot, single-hop questions lost their fourth passage to a linked one.
        linked = seeds + await self.linked(tenant, vector, seeds, k * HYBRID_DEPTH, visibility=visibility)
        return reciprocal_rank_fusion([dense, keyword, linked], k, keep_first_of=SEARCHES)

    async def linked(
        self, tenant: str, vector: list[float], seeds: Sequence[Passage], k: int, *, visibility: Visibility
    ) -> list[Passage]:
        """The passages ``seeds`` link to (they mention what those passages are about) that ``visibility`` allows,
        best cosine to ``vector`` first: a second hop found without asking the model to name its entity. Only the
        visible passages are followed: a link never leads a reader to a document they may not read."""
        keys: set[str] = set()
        own: set[str] = set()
        for seed in seeds:
            keys |= mention_keys(seed.text)
            own |= about_keys(seed.title)
        keys -= own
        if not keys:
            return []
        # Longest first: a long name is more specific than the single words inside it.
        wanted = sorted(keys, key=lambda key: (-len(key), key))[:MAX_LINK_KEYS]
        if self.matrices is not None:
            found = await self.matrices.linked_search(tenant, wanted, vector, k, visibility=visibility)
            if found is not None:
                return found
        try:
            return await self.store.linked_search(tenant, wanted, vector, k, visibility=visibility)
        except ProviderError as exc:
            # The links add to a search that already has its two rankings: without them it is the hybrid search.
            logger.warning("entity links not followed for tenant %r: %s", tenant, exc)
            return []

    async def embed_texts(self, texts: list[str]) -> list[list[float]]:
        """Embeds strips and other short texts for scoring (not for storage)."""
        return await self._embed_documents(texts)

    @property
    def embeddings(self) -> Embeddings:
        """The model queries are embedded with (behind the vector cache, where there is one)."""
        return self._embeddings

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


def _only_access_differs(planned: list[ChunkRecord], stored: list[ChunkRecord]) -> bool:
    """Whether ``planned`` are ``stored`` with other access tags: same chunks, same text, title, metadata and links.
    The embedded text is the title, the heading (in the metadata) and the text, so the stored vectors still fit."""
    if len(planned) != len(stored):
        return False
    same = all(
        (p.index, p.title, p.text, p.metadata, p.about) == (s.index, s.title, s.text, s.metadata, s.about)
        for p, s in zip(planned, stored, strict=True)
    )
    return same and any(tuple(p.access) != tuple(s.access) for p, s in zip(planned, stored, strict=True))


def _embedding_text(title: str, piece: Piece) -> str:
    """The title and the heading path name what a chunk's text often only refers to ("they are retried")."""
    return "\n".join(part for part in (title, piece.heading, piece.text) if part)


@dataclass(frozen=True, slots=True)
class DenseSearch:
    """A ``Retriever`` over the knowledge base's dense ranking only (:meth:`KnowledgeBase.dense_search`)."""

    knowledge: KnowledgeBase

    async def search(
        self, tenant: str, query: str, k: int, *, visibility: Visibility, vector: list[float] | None = None
    ) -> list[Passage]:
        return await self.knowledge.dense_search(tenant, query, k, visibility=visibility, vector=vector)


class LocalStoreSearch:
    """CRAG's search-more step where there is no web search: the tenant's store searched again, with the rewritten
    query. A different query finds different chunks, which is what the step is for."""

    name = "local"

    def __init__(self, knowledge: KnowledgeBase) -> None:
        self._knowledge = knowledge

    async def search(self, tenant: str, query: str, k: int, *, visibility: Visibility) -> list[Passage]:
        """Over what the reader may see, as every retrieval of the request."""
        return await self._knowledge.search(tenant, query, k, visibility=visibility)
