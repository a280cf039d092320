"""Pinecone vector store: the shared store multi-replica deployments use when a key is set.

One namespace per tenant, so isolation is the server's and not a filter someone can forget. Vector
ids are ``{doc_id}#{n}`` so a document's chunks can be found by id prefix: serverless indexes list
ids by prefix but cannot delete by metadata filter. Replacing a document upserts the new chunks
first and deletes the leftovers afterwards, so readers see the old version, a mix, or the new one,
never a document with no chunks. Pinecone is eventually consistent: a write may take a moment to
show up in searches and id listings, which is why a just-written document can escape a delete.

Keyword search is not implemented here (``keyword_search`` returns nothing, so retrieval is dense
only). Pinecone's hybrid search needs a ``dotproduct`` index created for it and a sparse vector
beside each dense one at upsert and query time; a production deployment that wants the keyword
half (rare names and numbers, the second hop of a bridge question) creates such an index, encodes
the sparse side from :func:`gateway.providers.vectorstores.fusion.index_terms` (BM25 weights over the
shared tokenizer's terms, so Japanese gets bigrams) and weighs dense against sparse with an alpha,
or runs a separate sparse index and fuses the two rankings with
:func:`~pipelines.shared.fusion.reciprocal_rank_fusion` as the LanceDB store does.

Document permissions are an ``access`` list of strings in each vector's metadata, and a restricted reader's query
carries the metadata filter ``{"access": {"$in": <the reader's tags>}}``: Pinecone applies it inside the search, so
the ``top_k`` are the reader's best. Vectors written before the field existed carry none and read as ``UNSET``
(``$exists: false`` alongside, for a reader who sees ``UNSET``); re-upserting a document tags them. An upsert
reads a document's stored chunks back (list by id prefix, then fetch), so one whose access alone changed keeps its
vectors instead of being embedded again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
from pinecone import AsyncIndex, AsyncPinecone
from pinecone.errors.exceptions import (
    ApiError,
    NotFoundError,
    PineconeConnectionError,
    PineconeError,
    PineconeTimeoutError,
)

from gateway.errors import ClientError, ProviderError, ProviderTimeoutError, ProviderUnavailableError
from gateway.providers.vectorstores.base import ChunkRecord, VectorStore, check_tenant
from pipelines.shared import UNSET, Passage, Visibility

PROVIDER = "vector_store"
UPSERT_BATCH = 100
DELETE_BATCH = 1000  # the API's cap on ids per delete request
LIST_PAGE = 100  # the API's cap on ids per list page
FETCH_BATCH = 100  # ids per fetch: they travel in the URL
QUERY_TOP_K_MAX = 10_000
_TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_LOCK_STRIPES = 64


def _provider_error(exc: Exception, action: str, fallback: type[ProviderError]) -> ProviderError:
    """Pick the gateway error an operator should see: timeout, outage, or a request that failed."""
    detail = f"Pinecone {action} failed: {exc}"
    if isinstance(exc, PineconeTimeoutError | httpx.TimeoutException):
        return ProviderTimeoutError(detail, provider=PROVIDER)
    if isinstance(exc, PineconeConnectionError | httpx.TransportError):
        return ProviderUnavailableError(detail, provider=PROVIDER)
    if isinstance(exc, ApiError) and exc.status_code in _TRANSIENT_STATUSES:
        return ProviderUnavailableError(detail, provider=PROVIDER, upstream_status=exc.status_code)
    return fallback(detail, provider=PROVIDER)


@contextmanager
def _upstream(action: str, fallback: type[ProviderError] = ProviderError) -> Iterator[None]:
    """The boundary: nothing the client raises leaks past this store untranslated."""
    try:
        yield
    except (PineconeError, httpx.HTTPError) as exc:
        raise _provider_error(exc, action, fallback) from exc


def _chunk_prefix(doc_id: str) -> str:
    return f"{doc_id}#"


def _is_chunk_of(vector_id: str, prefix: str) -> bool:
    """Prefix listing for doc ``a`` also matches doc ``a#b``'s ids; only ``a#<n>`` is ``a``'s."""
    return vector_id.startswith(prefix) and vector_id[len(prefix) :].isdigit()


def _decode_metadata(raw: Any) -> dict[str, Any]:
    """Tolerate vectors written by other tools: a bad ``metadata_json`` must not break a search."""
    if not isinstance(raw, str) or not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def access_filter(visibility: Visibility) -> dict[str, Any] | None:
    """The metadata filter of what ``visibility`` allows; None for a reader who sees everything."""
    if visibility.groups is None:
        return None
    allowed: dict[str, Any] = {"access": {"$in": sorted(visibility.groups)}}
    if UNSET in visibility.groups:
        return {"$or": [allowed, {"access": {"$exists": False}}]}
    return allowed


def _record(doc_id: str, vector: Any) -> ChunkRecord:
    """A fetched vector as the chunk it stores (a vector written before access was kept reads as ``UNSET``)."""
    metadata = vector.metadata or {}
    access = metadata.get("access")
    return ChunkRecord(
        doc_id=doc_id,
        index=int(metadata.get("chunk_index", vector.id.rpartition("#")[2] or 0)),
        title=str(metadata.get("title", "")),
        text=str(metadata.get("text", "")),
        vector=[float(x) for x in vector.values],
        metadata=_decode_metadata(metadata.get("metadata_json")),
        about=tuple(str(key) for key in metadata.get("about") or ()),
        access=tuple(str(tag) for tag in access) if isinstance(access, list) and access else (UNSET,),
    )


class PineconeVectorStore(VectorStore):
    name = "pinecone"

    def __init__(self, index: AsyncIndex, dimensions: int) -> None:
        self._index = index
        self._dimensions = dimensions
        # Striped so concurrent replaces of one document cannot delete each other's fresh chunks,
        # without a lock per document ever seen.
        self._locks = [asyncio.Lock() for _ in range(_LOCK_STRIPES)]

    @classmethod
    async def open(
        cls,
        api_key: str,
        index_host: str | None,
        index_name: str,
        dimensions: int,
        *,
        timeout_s: float = 30.0,
    ) -> PineconeVectorStore:
        """Connect to the index's data plane; without a host, one control-plane call finds it."""
        with _upstream(f"opening index {index_name!r}"):
            async with AsyncPinecone(api_key=api_key, timeout=timeout_s) as control:
                host = index_host or await cls._resolve_host(control, index_name)
                index = control.IndexAsyncio(host=host)
        return cls(index, dimensions)

    @staticmethod
    async def _resolve_host(control: AsyncPinecone, index_name: str) -> str:
        description = await control.describe_index(index_name)
        if not description.host:
            raise ProviderUnavailableError(
                f"Pinecone index {index_name!r} has no host yet; it is still initialising",
                provider=PROVIDER,
            )
        return description.host

    def _lock(self, namespace: str, doc_id: str) -> asyncio.Lock:
        return self._locks[hash((namespace, doc_id)) % _LOCK_STRIPES]

    def _values(self, vector: Sequence[float], what: str) -> list[float]:
        """Fail before the network on a dimension mismatch: it is a configuration error, not data."""
        if len(vector) != self._dimensions:
            raise ProviderError(
                f"{what} has {len(vector)} dimensions but the Pinecone index is configured for "
                f"{self._dimensions}; the embedding model and the index disagree",
                provider=PROVIDER,
            )
        return [float(x) for x in vector]

    def _to_vector(self, chunk: ChunkRecord, doc_id: str) -> dict[str, Any]:
        if chunk.doc_id != doc_id:
            raise ValueError(f"chunk {chunk.chunk_id!r} does not belong to document {doc_id!r}")
        return {
            "id": chunk.chunk_id,
            "values": self._values(chunk.vector, f"chunk {chunk.chunk_id!r}"),
            # Pinecone metadata must be flat, so the document's own metadata travels as JSON.
            "metadata": {
                "doc_id": chunk.doc_id,
                "chunk_index": chunk.index,
                "title": chunk.title,
                "text": chunk.text,
                "metadata_json": json.dumps(chunk.metadata, ensure_ascii=False, default=str),
                # A list of strings is flat metadata Pinecone filters on natively: the entity links' lookup.
                "about": list(chunk.about),
                "access": list(chunk.access),
            },
        }

    async def replace_document(self, tenant: str, doc_id: str, chunks: Sequence[ChunkRecord]) -> None:
        namespace = check_tenant(tenant)
        if not doc_id.isascii():
            raise ClientError(f"document id {doc_id!r} must be ASCII: Pinecone vector ids are ASCII only")
        vectors = [self._to_vector(chunk, doc_id) for chunk in chunks]
        keep = {vector["id"] for vector in vectors}
        async with self._lock(namespace, doc_id):
            with _upstream("upsert"):
                for start in range(0, len(vectors), UPSERT_BATCH):
                    batch = vectors[start : start + UPSERT_BATCH]
                    await self._index.upsert(vectors=batch, namespace=namespace)
            with _upstream("removing a document's old chunks"):
                stale = [i for i in await self._chunk_ids(namespace, doc_id) if i not in keep]
                await self._delete_ids(namespace, stale)

    async def delete_document(self, tenant: str, doc_id: str) -> bool:
        namespace = check_tenant(tenant)
        if not doc_id.isascii():
            return False  # replace_document refuses such ids, so none can be stored
        async with self._lock(namespace, doc_id):
            with _upstream("delete"):
                ids = await self._chunk_ids(namespace, doc_id)
                await self._delete_ids(namespace, ids)
        return bool(ids)

    async def _chunk_ids(self, namespace: str, doc_id: str) -> list[str]:
        prefix = _chunk_prefix(doc_id)
        ids: list[str] = []
        async for page in self._index.list(prefix=prefix, limit=LIST_PAGE, namespace=namespace):
            ids.extend(item.id for item in page.vectors if item.id and _is_chunk_of(item.id, prefix))
        return ids

    async def document_chunks(self, tenant: str, doc_ids: Sequence[str]) -> dict[str, list[ChunkRecord]] | None:
        namespace = check_tenant(tenant)
        found: dict[str, list[ChunkRecord]] = {}
        with _upstream("reading a document's chunks"):
            for doc_id in doc_ids:
                if not doc_id.isascii():
                    continue  # never stored: replace_document refuses such ids
                ids = await self._chunk_ids(namespace, doc_id)
                chunks: list[ChunkRecord] = []
                for start in range(0, len(ids), FETCH_BATCH):
                    response = await self._index.fetch(ids=ids[start : start + FETCH_BATCH], namespace=namespace)
                    chunks += [_record(doc_id, vector) for vector in response.vectors.values()]
                if chunks:
                    found[doc_id] = sorted(chunks, key=lambda c: c.index)
        return found

    async def _delete_ids(self, namespace: str, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), DELETE_BATCH):
            try:
                await self._index.delete(ids=list(ids[start : start + DELETE_BATCH]), namespace=namespace)
            except NotFoundError:
                return  # the namespace vanished meanwhile: nothing left to delete

    async def search(self, tenant: str, vector: Sequence[float], k: int, *, visibility: Visibility) -> list[Passage]:
        return await self._query(tenant, vector, k, access_filter(visibility))

    async def linked_search(
        self, tenant: str, keys: Sequence[str], vector: Sequence[float], k: int, *, visibility: Visibility
    ) -> list[Passage]:
        if not keys:
            return []
        linked: dict[str, Any] = {"about": {"$in": list(keys)}}
        allowed = access_filter(visibility)
        return await self._query(tenant, vector, k, linked if allowed is None else {"$and": [linked, allowed]})

    async def _query(self, tenant: str, vector: Sequence[float], k: int, where: dict[str, Any] | None) -> list[Passage]:
        namespace = check_tenant(tenant)
        if k <= 0:
            return []
        values = self._values(vector, "query vector")
        with _upstream("query"):
            response = await self._index.query(
                vector=values, top_k=min(k, QUERY_TOP_K_MAX), namespace=namespace, include_metadata=True, filter=where
            )
        passages = []
        for match in response.matches:
            metadata = match.metadata or {}
            passages.append(
                Passage(
                    chunk_id=match.id,
                    doc_id=str(metadata.get("doc_id") or match.id.rpartition("#")[0]),
                    title=str(metadata.get("title", "")),
                    text=str(metadata.get("text", "")),
                    score=float(match.score),
                    metadata=_decode_metadata(metadata.get("metadata_json")),
                )
            )
        return passages

    async def ping(self) -> None:
        with _upstream("health check", ProviderUnavailableError):
            await self._index.describe_index_stats()

    async def close(self) -> None:
        with _upstream("close"):
            await self._index.close()
