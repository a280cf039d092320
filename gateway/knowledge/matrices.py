"""Each warm tenant's chunk vectors as one float32 matrix in memory: the router's probe in about a millisecond.

Every ``auto`` request probes its tenant's store before anything else (``routes.router``), so the
probe's latency is the routing decision's. An exact search of a 10,000-chunk LanceDB table costs about
9 ms (a scan through the table's fragments); an approximate (HNSW) index is faster but changed about
one decision in five, since the router was trained on exact rankings. One matrix product over the
same vectors in memory is exact and costs about a millisecond, so this keeps one per tenant:

- **Kept in step by the knowledge version** (:mod:`gateway.cache.versions`). The version is read
  *before* the tenant is exported, and every acknowledged change bumps it after its write, so a matrix
  tagged with version v holds every change acknowledged up to v: a request that reads a newer version
  does not use it. Other replicas' writes bump the same Redis key, so they invalidate it too. Without
  the shared versions (no cache configured) nothing says when another process changed the store, and
  there is no matrix at all.
- **Never on the request path.** A tenant that is not warm (first request, or its version moved on)
  is searched in the store as before while one background task per tenant exports it again.
- **One BLAS thread.** The product is too small to share out: with the BLAS library's default thread
  pool on a busy 2-core machine the same product took 24 ms at the median instead of 1 ms (threads
  waiting for cores other requests hold), so it runs under a one-thread limit (``threadpoolctl``),
  set once for the app's life by its lifespan: entering ``threadpoolctl``'s limit around every product
  walked the process's loaded libraries each time (~0.1-0.2 ms of every ``auto`` request).
- **Bounded.** A least-recently-used set of tenants within ``max_bytes`` (vectors, texts, ids and
  metadata counted); a tenant larger than the whole budget is never loaded and is searched in the
  store, as is every tenant of a store that cannot export its chunks (Pinecone).
- **Masked, not post-filtered.** Each chunk's access tags are kept as one boolean row mask per tag; a restricted
  reader's search scores every row (the one product), sets the rows their tags do not allow to minus infinity and
  only then takes its top ``k``, so they get the ``k`` best chunks they may read. A reader's mask (the OR of their
  tags' masks) is kept per visibility on the matrix, so a repeated reader pays one ``np.where``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gateway.cache import CacheUnavailableError, KnowledgeVersions
from gateway.errors import ProviderError
from gateway.providers import StoredChunks, VectorStore
from pipelines.shared import UNSET, Passage, Visibility

logger = logging.getLogger(__name__)

FloatMatrix = np.ndarray[Any, np.dtype[np.float32]]
BoolRow = np.ndarray[Any, np.dtype[np.bool_]]
# Readers' masks kept per matrix (distinct visibilities: group combinations, a handful per tenant in practice).
READER_MASKS_KEPT = 64


def _string_bytes(values: Sequence[str]) -> int:
    return sum(sys.getsizeof(v) for v in values) + sys.getsizeof(values)


Scalar = str | int | float | bool | None


def _flat(raw: str) -> dict[str, Scalar] | None:
    """A chunk's metadata parsed, when every value is a scalar (a copy of the dict is then a whole copy), else None:
    such metadata is parsed again for every passage, so no two passages ever share a nested value."""
    parsed = json.loads(raw)
    if isinstance(parsed, dict) and all(v is None or isinstance(v, str | int | float | bool) for v in parsed.values()):
        return parsed
    return None


def _dict_bytes(value: dict[str, Scalar]) -> int:
    return sys.getsizeof(value) + sum(sys.getsizeof(key) + sys.getsizeof(item) for key, item in value.items())


@dataclass(frozen=True, slots=True)
class TenantMatrix:
    """One tenant's chunks at one knowledge version, rows normalised so a dot product is the cosine."""

    version: int
    chunks: StoredChunks
    unit: FloatMatrix
    # Each chunk's metadata parsed where it is flat (``_flat``): a passage gets a copy instead of a parse (~2 µs each
    # of the ~25 passages every probe returns). Parsed once per distinct text: a document's chunks share theirs.
    metadata: tuple[dict[str, Scalar] | None, ...]
    nbytes: int
    # Rows about each entity key (the links' targets): a linked search scores only these rows.
    about: dict[str, np.ndarray[Any, np.dtype[np.intp]]]
    # The rows carrying each access tag (a chunk the store kept no tags for is ``UNSET``).
    tags: dict[str, BoolRow]
    # Each restricted reader's mask (the OR of their tags' rows), by ``Visibility.key()``; filled on first use.
    readers: dict[str, BoolRow] = field(default_factory=dict)

    @classmethod
    def of(cls, version: int, chunks: StoredChunks) -> TenantMatrix:
        vectors = np.asarray(chunks.vectors, dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        unit = np.ascontiguousarray(vectors / np.maximum(norms, 1e-12), dtype=np.float32)
        text = chunks.chunk_ids, chunks.doc_ids, chunks.titles, chunks.texts, chunks.metadata
        parsed = {raw: _flat(raw) for raw in set(chunks.metadata)}
        metadata = tuple(parsed[raw] for raw in chunks.metadata)
        parsed_bytes = sys.getsizeof(metadata) + sum(_dict_bytes(v) for v in parsed.values() if v is not None)
        rows: dict[str, list[int]] = {}
        if len(chunks.about) == len(chunks):
            for i, keys in enumerate(chunks.about):
                for key in keys:
                    rows.setdefault(key, []).append(i)
        about = {key: np.asarray(found, dtype=np.intp) for key, found in rows.items()}
        about_bytes = sum(sys.getsizeof(key) + found.nbytes for key, found in about.items()) + sys.getsizeof(about)
        tags = _tag_rows(chunks)
        tag_bytes = sum(sys.getsizeof(tag) + held.nbytes for tag, held in tags.items())
        nbytes = unit.nbytes + sum(_string_bytes(column) for column in text) + parsed_bytes + about_bytes + tag_bytes
        return cls(version, chunks, unit, metadata, nbytes, about, tags)

    def mask(self, visibility: Visibility) -> BoolRow | None:
        """The rows ``visibility`` allows, None when it allows every row (nothing to mask)."""
        groups = visibility.groups
        if groups is None:
            return None
        key = visibility.key()
        found = self.readers.get(key)
        if found is None:
            found = np.zeros(len(self.chunks), dtype=np.bool_)
            for tag in groups:
                held = self.tags.get(tag)
                if held is not None:
                    found |= held
            if len(self.readers) >= READER_MASKS_KEPT:
                self.readers.clear()  # a tenant with this many reader kinds rebuilds its masks now and then
            self.readers[key] = found
        return found

    def linked(self, keys: Sequence[str], vector: Sequence[float], k: int, visibility: Visibility) -> list[Passage]:
        """The ``k`` chunks ``visibility`` allows about any of ``keys`` of highest cosine to ``vector``: the store's
        linked search."""
        found = [self.about[key] for key in keys if key in self.about]
        if not found or k <= 0:
            return []
        rows = np.unique(np.concatenate(found))
        allowed = self.mask(visibility)
        if allowed is not None:
            rows = rows[allowed[rows]]
            if not len(rows):
                return []
        query = np.asarray(vector, dtype=np.float32)
        query = query / max(float(np.sqrt(query @ query)), 1e-12)
        scores = self.unit[rows] @ query
        order = np.argsort(-scores, kind="stable")[:k]
        return [self._passage(int(rows[i]), float(scores[i])) for i in order]

    def _passage(self, i: int, score: float) -> Passage:
        c, flat = self.chunks, self.metadata[i]
        return Passage(
            chunk_id=c.chunk_ids[i],
            doc_id=c.doc_ids[i],
            title=c.titles[i],
            text=c.texts[i],
            score=score,
            metadata=dict(flat) if flat is not None else json.loads(c.metadata[i]),
        )

    def top(self, vector: Sequence[float], k: int, visibility: Visibility) -> list[Passage]:
        """The ``k`` chunks ``visibility`` allows of highest cosine to ``vector``, best first: the store's exact
        search. The rows it does not allow are masked before the top ``k`` is taken."""
        n = len(self.chunks)
        if n == 0 or k <= 0:
            return []
        allowed = self.mask(visibility)
        if allowed is not None:
            n = int(np.count_nonzero(allowed))
            if n == 0:
                return []
        query = np.asarray(vector, dtype=np.float32)
        # np.linalg.norm's own arithmetic (a float32 dot, then its square root), without its Python around one vector
        query = query / max(float(np.sqrt(query @ query)), 1e-12)
        scores = self.unit @ query
        if allowed is not None:
            scores = np.where(allowed, scores, np.float32(-np.inf))
        if k < n:
            head = np.argpartition(-scores, k - 1)[:k]
            order = head[np.argsort(-scores[head], kind="stable")]
        else:
            order = np.argsort(-scores, kind="stable")[:n]
        # Python ints and floats, each read in one call
        return [self._passage(i, score) for i, score in zip(order.tolist(), scores[order].tolist(), strict=True)]


def _tag_rows(chunks: StoredChunks) -> dict[str, BoolRow]:
    """Each access tag's rows; every row ``UNSET`` where the store kept no tags (a table before permissions)."""
    n = len(chunks)
    if len(chunks.access) != n:
        return {UNSET: np.ones(n, dtype=np.bool_)}
    rows: dict[str, list[int]] = {}
    for i, tags in enumerate(chunks.access):
        for tag in tags or (UNSET,):
            rows.setdefault(tag, []).append(i)
    masks: dict[str, BoolRow] = {}
    for tag, found in rows.items():
        held = np.zeros(n, dtype=np.bool_)
        held[np.asarray(found, dtype=np.intp)] = True
        masks[tag] = held
    return masks


class TenantMatrices:
    """The warm tenants' matrices, least recently used first; see the module docstring."""

    def __init__(self, store: VectorStore, versions: KnowledgeVersions, max_bytes: int) -> None:
        self._store = store
        self._versions = versions
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, TenantMatrix] = OrderedDict()
        self._too_big: dict[str, int] = {}  # tenant -> the version found larger than the whole budget
        self._loading: dict[str, asyncio.Task[None]] = {}
        self._unsupported = False  # the store cannot export: never try again
        self.hits = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        return sum(entry.nbytes for entry in self._entries.values())

    @property
    def searches_in_memory(self) -> bool:
        """Whether tenants are searched here at all: a store that can list them, and a budget to hold them."""
        return self._store.exports_chunks and self.max_bytes > 0 and not self._unsupported

    def sizes(self) -> dict[str, tuple[int, int]]:
        """Each warm tenant's chunks and bytes (for the benchmark and tests)."""
        return {tenant: (len(entry.chunks), entry.nbytes) for tenant, entry in self._entries.items()}

    async def search(
        self, tenant: str, vector: Sequence[float], k: int, *, visibility: Visibility
    ) -> list[Passage] | None:
        """The exact top ``k`` that ``visibility`` allows from memory, or None: the caller searches the store (not
        warm, or no version)."""
        entry = await self._current(tenant)
        return None if entry is None else entry.top(vector, k, visibility)

    async def linked_search(
        self, tenant: str, keys: Sequence[str], vector: Sequence[float], k: int, *, visibility: Visibility
    ) -> list[Passage] | None:
        """The store's ``linked_search`` from memory, or None as :meth:`search`."""
        entry = await self._current(tenant, counted=False)
        return None if entry is None else entry.linked(keys, vector, k, visibility)

    async def _current(self, tenant: str, *, counted: bool = True) -> TenantMatrix | None:
        """The tenant's matrix when it is current, else None and a load started. ``counted``: a probe's search
        (``hits`` / ``misses`` count the searches the router's probes make)."""
        if self._unsupported or self.max_bytes <= 0:
            return None
        try:
            version = await self._versions.current(tenant)
        except CacheUnavailableError:
            return None  # without the version nothing says the matrix is current
        entry = self._entries.get(tenant)
        if entry is not None and entry.version == version:
            self._entries.move_to_end(tenant)
            if counted:
                self.hits += 1
            return entry
        if counted:
            self.misses += 1
        if self._too_big.get(tenant) != version and tenant not in self._loading:
            task = asyncio.create_task(self._load(tenant, version), name=f"tenant-matrix-{tenant}")
            self._loading[tenant] = task
            task.add_done_callback(lambda _: self._loading.pop(tenant, None))
        return None

    async def warm(self, tenant: str) -> bool:
        """Load ``tenant`` now (start-up, benchmarks, tests); True when it is warm afterwards."""
        version = await self._versions.current(tenant)
        await self._load(tenant, version)
        entry = self._entries.get(tenant)
        return entry is not None and entry.version == version

    async def _load(self, tenant: str, version: int) -> None:
        try:
            chunks = await self._store.export_chunks(tenant)
        except ProviderError as exc:
            logger.warning("tenant %r not loaded into memory (searched in the store): %s", tenant, exc)
            return
        if chunks is None:
            self._unsupported = True
            return
        entry = TenantMatrix.of(version, chunks)
        current = self._entries.get(tenant)
        if current is not None and current.version > version:
            return  # a later load already installed a newer version
        self._entries.pop(tenant, None)
        if entry.nbytes > self.max_bytes:
            self._too_big[tenant] = version
            logger.info(
                "tenant %r (%d bytes) exceeds the in-memory budget: searched in the store", tenant, entry.nbytes
            )
            return
        self._too_big.pop(tenant, None)
        while self._entries and self.nbytes + entry.nbytes > self.max_bytes:
            self._entries.popitem(last=False)
        self._entries[tenant] = entry

    async def aclose(self) -> None:
        """Cancel the loads still running (the app's shutdown)."""
        tasks = list(self._loading.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loading.clear()
