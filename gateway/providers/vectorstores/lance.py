"""Embedded, persistent vector store on LanceDB: the default when no Pinecone key is set.

One table per tenant. A document's chunks are replaced with a single ``merge_insert`` (update
matched, insert new, delete the document's leftovers) so a reader never sees a half-replaced
document. Writes to a table are serialised in-process. Every read checks for versions committed by
other processes (``read_consistency_interval=0``): replicas sharing one database on a ReadWriteMany
volume then see each other's writes at once instead of a table frozen at first open, which would
split documents between pods and let a replica answer from knowledge another already changed.

Keyword search is LanceDB's native full-text search (BM25) over a ``terms`` column holding the
project tokenizer's tokens, space-joined, indexed with the whitespace tokenizer and no stemming or
stopwords: LanceDB's own tokenizers split Japanese on nothing (``simple``) or need a dictionary
(``icu``), and the index must cut words exactly as the queries and the relevance checks do. Rows
written after the index was built are searched too (unindexed rows are scanned) until
``optimize`` folds them in: every 64 writes, and once a tenant's writes pause for ``settle_after_s``. Tables
created before this column existed search dense only.

Entity links (:mod:`pipelines.shared.links`) are an ``about`` column (a list of keys per chunk) filtered with
``array_has_any`` in a cosine search; tables created before it existed follow no links, and their writes leave
the column out (a row is written with the table's own schema).

Document permissions are an ``access`` column (the chunk's access tags) that every search filters on *before*
it ranks: ``array_has_any(access, make_array(<the reader's tags>))`` in ``where``, which LanceDB's async queries
apply as a pre-filter (dense, full-text and linked searches alike; ``postfilter()`` is never called). A table
created before the column existed is migrated on its first write (``add_columns`` with every old row tagged
``UNSET``); until then its rows read as ``UNSET`` (a reader who sees ``UNSET`` searches it unfiltered, any other
reader finds nothing in it). Whether a table has the column is read again until it does, so a table another
replica migrated is filtered from then on. The column has a label-list index (built on a tenant's first write, kept
up by ``optimize``): without it the full-text search's pre-filter evaluated ``array_has_any`` on every row, about a
millisecond of a restricted reader's query at 10,000 chunks; with it the filter is a bitmap lookup
(``python -m tests.benchmarks.access_overhead``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.index import FTS, LabelList

from gateway.errors import ProviderError, ProviderUnavailableError
from gateway.providers.vectorstores.base import (
    ChunkRecord,
    StoredChunks,
    VectorStore,
    check_tenant,
    common_access,
)
from gateway.providers.vectorstores.fusion import index_terms
from gateway.settings import VectorStoreSettings
from pipelines.shared import UNSET, Passage, Visibility

PROVIDER = "vector_store"
logger = logging.getLogger(__name__)
# For stores opened without settings (tools, tests): the setting's own default, kept in one place.
SETTLE_AFTER_S: float = VectorStoreSettings.model_fields["settle_after_s"].default
OPTIMIZE_EVERY_WRITES = 64
DOC_IDS_PER_QUERY = 500  # ids in one `doc_id IN (...)` filter
# The tokens are the project tokenizer's already: split on spaces, change nothing.
KEYWORD_INDEX = FTS(
    base_tokenizer="whitespace", lower_case=False, stem=False, remove_stop_words=False, ascii_folding=False
)


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _access_filter(visibility: Visibility) -> str:
    """The SQL predicate of what ``visibility`` allows (restricted readers only)."""
    assert visibility.groups is not None
    tags = ", ".join(_sql_string(tag) for tag in sorted(visibility.groups))
    return f"array_has_any(access, make_array({tags}))"


# Nothing of a table is visible: its rows carry no tags yet and the reader does not see ``UNSET``.
_HIDDEN = "hidden"


def _passage(row: dict[str, Any], score: float) -> Passage:
    return Passage(
        chunk_id=row["chunk_id"],
        doc_id=row["doc_id"],
        title=row["title"],
        text=row["text"],
        score=score,
        metadata=json.loads(row["metadata"] or "{}"),
    )


def _cosine(stored: Sequence[float], query: np.ndarray[Any, np.dtype[np.float32]], query_norm: float) -> float:
    vector = np.asarray(stored, dtype=np.float32)
    return float(vector @ query / max(float(np.linalg.norm(vector)) * query_norm, 1e-12))


class LanceVectorStore(VectorStore):
    name = "lancedb"

    def __init__(self, connection: Any, dimensions: int, *, settle_after_s: float = SETTLE_AFTER_S) -> None:
        self._db = connection
        self._dimensions = dimensions
        self._settle_after_s = settle_after_s
        self._settling: dict[str, asyncio.Task[None]] = {}  # per tenant: the fold-in after its latest write burst
        self._settle_at: dict[str, float] = {}  # per tenant: when (loop time) its writes will have paused long enough
        self._waiting: set[str] = set()  # tenants whose fold-in has not started (cancelled, not cut, at close)
        self._hurry: dict[str, asyncio.Event] = {}  # set: fold in now, without waiting for the pause
        self._unfolded: set[str] = set()  # tenants written to since their last fold-in
        self._closed = False
        self._tables: dict[str, Any] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._writes: dict[str, int] = {}
        self._keyword_indexed: set[str] = set()
        self._access_indexed: set[str] = set()
        self._schema = pa.schema(
            [
                pa.field("chunk_id", pa.string()),
                pa.field("doc_id", pa.string()),
                pa.field("chunk_index", pa.int32()),
                pa.field("title", pa.string()),
                pa.field("text", pa.string()),
                pa.field("terms", pa.string()),
                pa.field("metadata", pa.string()),
                pa.field("about", pa.list_(pa.string())),
                pa.field("access", pa.list_(pa.string())),
                pa.field("vector", pa.list_(pa.float32(), dimensions)),
            ]
        )
        self._columns: dict[str, pa.Schema] = {}  # each open table's own schema: older tables lack later columns

    @classmethod
    async def open(cls, path: Path, dimensions: int, *, settle_after_s: float = SETTLE_AFTER_S) -> LanceVectorStore:
        await asyncio.to_thread(path.mkdir, parents=True, exist_ok=True)
        try:
            connection = await lancedb.connect_async(str(path), read_consistency_interval=timedelta(0))
        except Exception as exc:  # lancedb raises plain OSError/RuntimeError subclasses
            raise ProviderUnavailableError(f"cannot open LanceDB at {path}: {exc}", provider=PROVIDER) from exc
        return cls(connection, dimensions, settle_after_s=settle_after_s)

    @staticmethod
    def _table_name(tenant: str) -> str:
        return f"kb_{check_tenant(tenant)}"

    async def _table(self, tenant: str, *, create: bool) -> Any | None:
        name = self._table_name(tenant)
        if name in self._tables:
            return self._tables[name]
        existing = await self._db.list_tables()
        names = getattr(existing, "tables", existing)
        if name in names:
            table = await self._db.open_table(name)
        elif create:
            table = await self._db.create_table(name, schema=self._schema, exist_ok=True)
        else:
            return None
        self._tables[name] = table
        return table

    async def replace_document(self, tenant: str, doc_id: str, chunks: Sequence[ChunkRecord]) -> None:
        check_tenant(tenant)
        lock = self._locks.setdefault(tenant, asyncio.Lock())
        rows = [
            {
                "chunk_id": c.chunk_id,
                "doc_id": c.doc_id,
                "chunk_index": c.index,
                "title": c.title,
                "text": c.text,
                "terms": index_terms(c.title, c.text),
                "metadata": json.dumps(c.metadata, ensure_ascii=False),
                "about": list(c.about),
                "access": list(c.access),
                "vector": [float(x) for x in c.vector],
            }
            for c in chunks
        ]
        async with lock:
            try:
                table = await self._table(tenant, create=True)
                assert table is not None
                await self._migrate_access(table)
                if rows:
                    schema = await self._schema_of(table)
                    await (
                        table.merge_insert("chunk_id")
                        .when_matched_update_all()
                        .when_not_matched_insert_all()
                        .when_not_matched_by_source_delete(f"doc_id = {_sql_string(doc_id)}")
                        .execute(pa.Table.from_pylist(rows, schema=schema))
                    )
                else:
                    await table.delete(f"doc_id = {_sql_string(doc_id)}")
                self._settle_later(tenant)  # the rows are committed: whatever fails below, they get folded in
                await self._ensure_keyword_index(tenant, table)
                await self._ensure_access_index(tenant, table)
                await self._maybe_optimize(tenant, table)
            except ProviderError:
                raise
            except Exception as exc:
                raise ProviderError(f"LanceDB write failed: {exc}", provider=PROVIDER) from exc

    async def delete_document(self, tenant: str, doc_id: str) -> bool:
        check_tenant(tenant)
        lock = self._locks.setdefault(tenant, asyncio.Lock())
        async with lock:
            try:
                table = await self._table(tenant, create=False)
                if table is None:
                    return False
                result = await table.delete(f"doc_id = {_sql_string(doc_id)}")
                self._settle_later(tenant)
            except Exception as exc:
                raise ProviderError(f"LanceDB delete failed: {exc}", provider=PROVIDER) from exc
        return int(getattr(result, "num_deleted_rows", 0)) > 0

    async def search(self, tenant: str, vector: Sequence[float], k: int, *, visibility: Visibility) -> list[Passage]:
        check_tenant(tenant)
        try:
            table = await self._table(tenant, create=False)
            if table is None:
                return []
            where = await self._where(table, visibility)
            if where == _HIDDEN:
                return []
            query = table.vector_search(list(vector)).distance_type("cosine")
            if where is not None:
                query = query.where(where)
            rows = await query.limit(k).to_list()
        except Exception as exc:
            raise ProviderError(f"LanceDB search failed: {exc}", provider=PROVIDER) from exc
        return [_passage(row, 1.0 - float(row["_distance"])) for row in rows]

    async def keyword_search(
        self, tenant: str, terms: Sequence[str], vector: Sequence[float], k: int, *, visibility: Visibility
    ) -> list[Passage]:
        check_tenant(tenant)
        if not terms:
            return []
        try:
            table = await self._table(tenant, create=False)
            if table is None:
                return []
            if tenant not in self._keyword_indexed and not await self._has_keyword_index(tenant, table):
                return []
            where = await self._where(table, visibility)
            if where == _HIDDEN:
                return []
            query = table.query().nearest_to_text(" ".join(terms), columns="terms")
            if where is not None:
                query = query.where(where)
            rows = await query.limit(k).to_list()
        except Exception as exc:
            raise ProviderError(f"LanceDB keyword search failed: {exc}", provider=PROVIDER) from exc
        query = np.asarray(vector, dtype=np.float32)
        norm = max(float(np.linalg.norm(query)), 1e-12)
        return [_passage(row, _cosine(row["vector"], query, norm)) for row in rows]

    async def linked_search(
        self, tenant: str, keys: Sequence[str], vector: Sequence[float], k: int, *, visibility: Visibility
    ) -> list[Passage]:
        check_tenant(tenant)
        if not keys or k <= 0:
            return []
        try:
            table = await self._table(tenant, create=False)
            if table is None or "about" not in (await self._schema_of(table)).names:
                return []
            where = await self._where(table, visibility)
            if where == _HIDDEN:
                return []
            wanted = ", ".join(_sql_string(key) for key in keys)
            linked = f"array_has_any(about, make_array({wanted}))"
            rows = await (
                table.vector_search(list(vector))
                .distance_type("cosine")
                .where(linked if where is None else f"{linked} AND {where}")
                .limit(k)
                .to_list()
            )
        except Exception as exc:
            raise ProviderError(f"LanceDB linked search failed: {exc}", provider=PROVIDER) from exc
        return [_passage(row, 1.0 - float(row["_distance"])) for row in rows]

    async def _schema_of(self, table: Any) -> pa.Schema:
        """The table's own columns (read once per open table): rows are written with it, so a table created before
        a column existed keeps working without it."""
        name = table.name
        if name not in self._columns:
            self._columns[name] = await table.schema()
        return self._columns[name]

    async def _has_access(self, table: Any) -> bool:
        """Whether the table has the ``access`` column. Read again while it has not: another replica may have
        migrated it since, and its rows may then carry groups this process must filter on."""
        if "access" in (await self._schema_of(table)).names:
            return True
        self._columns[table.name] = await table.schema()
        return "access" in self._columns[table.name].names

    async def _where(self, table: Any, visibility: Visibility) -> str | None:
        """The search's pre-filter: None for a reader who sees everything (or an unmigrated table, all ``UNSET``,
        to a reader who sees ``UNSET``), ``_HIDDEN`` when nothing of the table is visible."""
        if visibility.groups is None:
            return None
        if await self._has_access(table):
            return _access_filter(visibility)
        return None if visibility.allows((UNSET,)) else _HIDDEN

    async def _migrate_access(self, table: Any) -> None:
        """Give a table made before document permissions its ``access`` column, every old row ``UNSET``
        (under the tenant's write lock; a replica that migrated it first leaves nothing to do)."""
        if await self._has_access(table):
            return
        try:
            await table.add_columns({"access": f"make_array({_sql_string(UNSET)})"})
        except Exception:
            if not await self._has_access(table):
                raise  # not a race with another replica that migrated it first: a real failure
        self._columns[table.name] = await table.schema()

    async def _has_keyword_index(self, tenant: str, table: Any) -> bool:
        indices = await table.list_indices()
        if any("terms" in index.columns for index in indices):
            self._keyword_indexed.add(tenant)
            return True
        return False

    async def _ensure_access_index(self, tenant: str, table: Any) -> None:
        """Build the ``access`` label-list index on a tenant's first write (or its first after the migration)."""
        if tenant in self._access_indexed:
            return
        if any("access" in index.columns for index in await table.list_indices()):
            self._access_indexed.add(tenant)
            return
        if not await self._has_access(table) or await table.count_rows() == 0:
            return
        await table.create_index("access", config=LabelList())
        self._access_indexed.add(tenant)

    async def _ensure_keyword_index(self, tenant: str, table: Any) -> None:
        """Build the ``terms`` index on a tenant's first write (an index needs rows to train on)."""
        if tenant in self._keyword_indexed or await self._has_keyword_index(tenant, table):
            return
        schema = await table.schema()
        if "terms" not in schema.names or await table.count_rows() == 0:
            return
        await table.create_index("terms", config=KEYWORD_INDEX)
        self._keyword_indexed.add(tenant)

    exports_chunks = True

    async def export_chunks(self, tenant: str) -> StoredChunks | None:
        check_tenant(tenant)
        columns = ["chunk_id", "doc_id", "title", "text", "metadata", "vector"]
        try:
            table = await self._table(tenant, create=False)
            if table is None:
                return StoredChunks([], [], [], [], [], np.zeros((0, self._dimensions), dtype=np.float32))
            if "about" in (await self._schema_of(table)).names:
                columns.append("about")
            if await self._has_access(table):
                columns.append("access")
            data = await table.query().select(columns).to_arrow()
        except Exception as exc:
            raise ProviderError(f"LanceDB export failed: {exc}", provider=PROVIDER) from exc
        flat = data.column("vector").combine_chunks().flatten()
        vectors = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, self._dimensions)
        return StoredChunks(
            chunk_ids=data.column("chunk_id").to_pylist(),
            doc_ids=data.column("doc_id").to_pylist(),
            titles=data.column("title").to_pylist(),
            texts=data.column("text").to_pylist(),
            metadata=[m or "{}" for m in data.column("metadata").to_pylist()],
            vectors=vectors,
            about=[tuple(a or ()) for a in data.column("about").to_pylist()] if "about" in columns else [],
            access=[tuple(a or (UNSET,)) for a in data.column("access").to_pylist()] if "access" in columns else [],
        )

    async def _document_rows(
        self, tenant: str, doc_ids: Sequence[str], *, columns: tuple[str, ...] | None = None
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The rows of these documents (``columns`` of them, those the table has; None: every column) and the table's
        column names. Ids go in batches of ``DOC_IDS_PER_QUERY``: an export naming thousands of documents must not
        become one filter expression of that size."""
        check_tenant(tenant)
        if not doc_ids:
            return [], []
        try:
            table = await self._table(tenant, create=False)
            if table is None:
                return [], []
            if columns is not None and "access" in columns:
                await self._has_access(table)  # reads the schema again if another replica may have migrated it
            names = (await self._schema_of(table)).names
            rows: list[dict[str, Any]] = []
            for start in range(0, len(doc_ids), DOC_IDS_PER_QUERY):
                wanted = ", ".join(_sql_string(doc_id) for doc_id in doc_ids[start : start + DOC_IDS_PER_QUERY])
                query = table.query().where(f"doc_id IN ({wanted})")
                if columns is not None:
                    query = query.select([c for c in columns if c in names])
                rows.extend(await query.to_list())
        except Exception as exc:
            raise ProviderError(f"LanceDB read failed: {exc}", provider=PROVIDER) from exc
        return rows, names

    async def document_chunks(self, tenant: str, doc_ids: Sequence[str]) -> dict[str, list[ChunkRecord]] | None:
        rows, names = await self._document_rows(tenant, doc_ids)
        found: dict[str, list[ChunkRecord]] = {}
        for row in sorted(rows, key=lambda r: (r["doc_id"], r["chunk_index"])):
            found.setdefault(row["doc_id"], []).append(
                ChunkRecord(
                    doc_id=row["doc_id"],
                    index=int(row["chunk_index"]),
                    title=row["title"],
                    text=row["text"],
                    vector=[float(x) for x in row["vector"]],
                    metadata=json.loads(row["metadata"] or "{}"),
                    about=tuple(row.get("about") or ()) if "about" in names else (),
                    access=tuple(row.get("access") or (UNSET,)),
                )
            )
        return found

    async def document_access(self, tenant: str, doc_ids: Sequence[str]) -> dict[str, frozenset[str]] | None:
        """Two columns of the documents' rows, no vectors or texts (a table before permissions: every row ``UNSET``)."""
        rows, _ = await self._document_rows(tenant, doc_ids, columns=("doc_id", "access"))
        tags: dict[str, list[tuple[str, ...]]] = {}
        for row in rows:
            tags.setdefault(row["doc_id"], []).append(tuple(row.get("access") or (UNSET,)))
        return {doc_id: common_access(held) for doc_id, held in tags.items()}

    async def count_chunks(self, tenant: str) -> int:
        table = await self._table(tenant, create=False)
        return 0 if table is None else int(await table.count_rows())

    async def ping(self) -> None:
        try:
            await self._db.list_tables()
        except Exception as exc:
            raise ProviderUnavailableError(f"LanceDB unavailable: {exc}", provider=PROVIDER) from exc

    async def settled(self) -> None:
        """Fold every tenant's pending rows in now, without waiting for its writes to pause, and return once done:
        for a bulk import, or a measurement, that wants the indexes complete before it searches (with fold-ins
        switched off too: ``settle_after_s`` 0)."""
        for tenant in self._waiting:
            self._hurry[tenant].set()
        await asyncio.gather(*self._settling.values(), return_exceptions=True)
        for tenant in sorted(self._unfolded):
            await self._fold_in(tenant)

    async def close(self) -> None:
        # A fold-in still waiting is dropped (the next write or optimize folds the rows in); one under way is let
        # finish rather than cut inside LanceDB's compaction; a write finishing meanwhile schedules none.
        self._closed = True
        for tenant, task in self._settling.items():
            if tenant in self._waiting:
                task.cancel()
        await asyncio.gather(*self._settling.values(), return_exceptions=True)
        self._settling.clear()
        for table in self._tables.values():
            table.close()
        self._tables.clear()

    def _settle_later(self, tenant: str) -> None:
        """Fold a write burst's rows into the indexes once writes to the tenant pause. Until then the full-text
        search scans them, and a restricted reader's filter is evaluated on them row by row: at 10,000 chunks with
        the last thousand unfolded, the served ``auto`` query took twice as long and the filter cost a reader who
        sees every group ~2 ms instead of under 1 (``python -m tests.benchmarks.access_overhead``). Called under
        the tenant's write lock, so a fold-in is either still to start (it will read this write's rows) or done."""
        self._unfolded.add(tenant)
        if self._settle_after_s <= 0 or self._closed:
            return
        loop = asyncio.get_running_loop()
        self._settle_at[tenant] = loop.time() + self._settle_after_s
        task = self._settling.get(tenant)
        if task is None or task.done():
            self._waiting.add(tenant)
            self._hurry[tenant] = asyncio.Event()
            self._settling[tenant] = loop.create_task(self._settle(tenant), name=f"lancedb-settle-{tenant}")

    async def _settle(self, tenant: str) -> None:
        loop = asyncio.get_running_loop()
        hurry = self._hurry[tenant]
        # Each later write moves the deadline: wait for the pause after the last one.
        while (wait := self._settle_at[tenant] - loop.time()) > 0 and not hurry.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hurry.wait(), wait)
        await self._fold_in(tenant)

    async def _fold_in(self, tenant: str) -> None:
        async with self._locks.setdefault(tenant, asyncio.Lock()):
            self._waiting.discard(tenant)
            if self._closed:
                return
            self._unfolded.discard(tenant)  # a write from here on waits for the lock, and marks it again
            try:
                table = await self._table(tenant, create=False)
                if table is not None:
                    await table.optimize()
            except Exception:
                # Searches stay correct, only slower, until the next write or the periodic optimize retries.
                logger.warning("LanceDB could not fold tenant %s's new rows into its indexes", tenant, exc_info=True)

    async def _maybe_optimize(self, tenant: str, table: Any) -> None:
        """Compact small fragments now and then; every upsert adds one and slows scans."""
        count = self._writes.get(tenant, 0) + 1
        self._writes[tenant] = count
        if count % OPTIMIZE_EVERY_WRITES == 0:
            await table.optimize()
