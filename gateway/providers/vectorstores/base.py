"""The vector store contract: tenant-scoped upsert-by-document, delete, search.

Tenants map to a store's own isolation unit (a LanceDB table, a Pinecone namespace), so a search
can never see another tenant's chunks whatever filter a caller forgets.

Inside a tenant, each chunk carries its document's access tags (:mod:`pipelines.shared.visibility`) and every
search takes the reader's ``Visibility``: a store filters *inside* its search (a pre-filter, a metadata filter, a
mask before the top-k), never after it, so a restricted reader gets ``k`` passages they may read rather than
whatever of the tenant-wide top ``k`` survives, and recall for them is what it would be in a tenant holding only
their documents.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from pipelines.shared import UNSET, Passage, Visibility

TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_TENANT_RE = re.compile(TENANT_PATTERN)


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """One chunk of a document, ready to store."""

    doc_id: str
    index: int
    title: str
    text: str
    vector: Sequence[float]
    metadata: dict[str, Any] = field(default_factory=dict)
    # What the chunk is about (its document title's keys, :func:`pipelines.shared.links.about_keys`): where a
    # link from a passage that mentions one of them leads. Stored beside the vector so links survive restarts.
    about: tuple[str, ...] = ()
    # The document's access tags: group names, ``TENANT_OPEN``, or ``UNSET`` (the tenant's policy decides).
    access: tuple[str, ...] = (UNSET,)

    @property
    def chunk_id(self) -> str:
        return f"{self.doc_id}#{self.index}"


@dataclass(frozen=True, slots=True)
class StoredChunks:
    """Every chunk of one tenant, column by column: what :mod:`gateway.knowledge.matrices` keeps in memory.

    ``vectors`` is one float32 row per chunk, as stored; ``metadata`` is the stored JSON text (the matrix parses
    each distinct text once, and a nested one again whenever its chunk is returned)."""

    chunk_ids: list[str]
    doc_ids: list[str]
    titles: list[str]
    texts: list[str]
    metadata: list[str]  # JSON objects
    vectors: np.ndarray[Any, np.dtype[np.float32]]
    # Each chunk's ``about`` keys (the entity links' targets); empty where the store keeps none.
    about: list[tuple[str, ...]] = field(default_factory=list)
    # Each chunk's access tags; empty where the store keeps none (every chunk then reads as ``UNSET``).
    access: list[tuple[str, ...]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.chunk_ids)


def common_access(tags: Iterable[Sequence[str]]) -> frozenset[str]:
    """The tags every one of a document's chunks carries (a chunk stored without tags reads as ``UNSET``)."""
    common: frozenset[str] | None = None
    for each in tags:
        held = frozenset(each or (UNSET,))
        common = held if common is None else common & held
    return common or frozenset()


def check_tenant(tenant: str) -> str:
    """Tenants become table names and namespaces: refuse anything that could escape them."""
    if not _TENANT_RE.fullmatch(tenant):
        raise ValueError(f"invalid tenant id {tenant!r}")
    return tenant


class VectorStore(ABC):
    """Stores chunks with their vectors; cosine similarity in [−1, 1] as ``Passage.score``."""

    name: str

    @abstractmethod
    async def replace_document(self, tenant: str, doc_id: str, chunks: Sequence[ChunkRecord]) -> None:
        """Make ``chunks`` the only chunks of ``doc_id`` (insert, or replace a previous version)."""

    @abstractmethod
    async def delete_document(self, tenant: str, doc_id: str) -> bool:
        """Remove every chunk of ``doc_id``; False when the tenant had no such document."""

    @abstractmethod
    async def search(self, tenant: str, vector: Sequence[float], k: int, *, visibility: Visibility) -> list[Passage]:
        """The ``k`` chunks ``visibility`` allows of highest cosine to ``vector``, best first."""

    async def keyword_search(
        self, tenant: str, terms: Sequence[str], vector: Sequence[float], k: int, *, visibility: Visibility
    ) -> list[Passage]:
        """BM25 over the chunks' tokens (:mod:`.fusion`), best first; ``score`` is still the cosine to ``vector``.

        Stores without a keyword index return nothing, and retrieval is dense alone (see
        :mod:`.pinecone_store` for what a Pinecone deployment does instead).
        """
        return []

    async def linked_search(
        self, tenant: str, keys: Sequence[str], vector: Sequence[float], k: int, *, visibility: Visibility
    ) -> list[Passage]:
        """The chunks ``visibility`` allows about any of ``keys`` (their stored ``about``), best cosine to ``vector``
        first: where the links of the passages a search found lead (:mod:`pipelines.shared.links`). Stores that keep
        no ``about`` (tables written before it existed) return nothing, and retrieval follows no links."""
        return []

    # Whether ``export_chunks`` lists a tenant (the in-memory matrices can then search it): read at start-up, where the
    # router's probe depth is chosen (``gateway.app.probe_depth``).
    exports_chunks: ClassVar[bool] = False

    async def export_chunks(self, tenant: str) -> StoredChunks | None:
        """Every chunk of ``tenant`` with its vector, for an exact in-memory search; None when this store
        cannot list a tenant cheaply (Pinecone): its searches then always go to the store."""
        return None

    async def document_chunks(self, tenant: str, doc_ids: Sequence[str]) -> dict[str, list[ChunkRecord]] | None:
        """The stored chunks of each of ``doc_ids`` that has any, vectors included, in chunk order; None when this
        store cannot read them back cheaply. The knowledge base compares them with an upsert: a document whose
        only change is its access is written again with the vectors it has, without embedding it again."""
        return None

    async def document_access(self, tenant: str, doc_ids: Sequence[str]) -> dict[str, frozenset[str]] | None:
        """The access tags of each of ``doc_ids`` the tenant holds (a document it does not hold is left out): the tags
        every chunk of it carries, so a reader allowed them may read all of it (a write replaces a document's chunks
        with one access; a document caught half re-tagged reads as the tags both versions carry, which allows no more
        than both versions do and may allow less: it fails closed). None when this store cannot read them back. Read
        from the chunks, not from anywhere else: changing a document's access re-tags its chunks, so this is the
        access every search filters by now. Stores that can select the tags alone override it; this one reads the
        chunks whole."""
        chunks = await self.document_chunks(tenant, doc_ids)
        if chunks is None:
            return None
        return {doc_id: common_access(c.access for c in held) for doc_id, held in chunks.items() if held}

    @abstractmethod
    async def ping(self) -> None:
        """Raise a provider error when the store cannot serve requests."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; stores without any need not override."""
