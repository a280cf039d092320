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
``optimize`` folds them in. Tables created before this column existed search dense only.

Entity links (:mod:`pipelines.shared.links`) are an ``about`` column (a list of keys per chunk) filtered with
``array_has_any`` in a cosine search; tables created before it existed follow no links, and their writes leave
the column out (a row is written with the table's own schema).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.index import FTS

from gateway.errors import ProviderError, ProviderUnavailableError
from gateway.providers.vectorstores.base import ChunkRecord, StoredChunks, VectorStore, check_tenant
from gateway.providers.vectorstores.fusion import index_terms
from pipelines.shared.deps import Passage

PROVIDER = "vector_store"
OPTIMIZE_EVERY_WRITES = 64
# The tokens are the project tokenizer's already: split on spaces, change nothing.
KEYWORD_INDEX = FTS(
    base_tokenizer="whitespace", lower_case=False, stem=False, remove_stop_words=False, ascii_folding=False
)


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


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

    def __init__(self, connection: Any, dimensions: int) -> None:
        self._db = connection
        self._dimensions = dimensions
        self._tables: dict[str, Any] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._writes: dict[str, int] = {}
        self._keyword_indexed: set[str] = set()
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
                pa.field("vector", pa.list_(pa.float32(), dimensions)),
            ]
        )
        self._columns: dict[str, pa.Schema] = {}  # each open table's own schema: older tables lack later columns

    @classmethod
    async def open(cls, path: Path, dimensions: int) -> LanceVectorStore:
        await asyncio.to_thread(path.mkdir, parents=True, exist_ok=True)
        try:
            connection = await lancedb.connect_async(str(path), read_consistency_interval=timedelta(0))
        except Exception as exc:  # lancedb raises plain OSError/RuntimeError subclasses
            raise ProviderUnavailableError(f"cannot open LanceDB at {path}: {exc}", provider=PROVIDER) from exc
        return cls(connection, dimensions)

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
                "vector": [float(x) for x in c.vector],
            }
            for c in chunks
        ]
        async with lock:
            try:
                table = await self._table(tenant, create=True)
                assert table is not None
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
                await self._ensure_keyword_index(tenant, table)
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
            except Exception as exc:
                raise ProviderError(f"LanceDB delete failed: {exc}", provider=PROVIDER) from exc
        return int(getattr(result, "num_deleted_rows", 0)) > 0

    async def search(self, tenant: str, vector: Sequence[float], k: int) -> list[Passage]:
        check_tenant(tenant)
        try:
            table = await self._table(tenant, create=False)
            if table is None:
                return []
            rows = await table.vector_search(list(vector)).distance_type("cosine").limit(k).to_list()
        except Exception as exc:
            raise ProviderError(f"LanceDB search failed: {exc}", provider=PROVIDER) from exc
        return [_passage(row, 1.0 - float(row["_distance"])) for row in rows]

    async def keyword_search(self, tenant: str, terms: Sequence[str], vector: Sequence[float], k: int) -> list[Passage]:
        check_tenant(tenant)
        if not terms:
            return []
        try:
            table = await self._table(tenant, create=False)
            if table is None:
                return []
            if tenant not in self._keyword_indexed and not await self._has_keyword_index(tenant, table):
                return []
            rows = await table.query().nearest_to_text(" ".join(terms), columns="terms").limit(k).to_list()
        except Exception as exc:
            raise ProviderError(f"LanceDB keyword search failed: {exc}", provider=PROVIDER) from exc
        query = np.asarray(vector, dtype=np.float32)
        norm = max(float(np.linalg.norm(query)), 1e-12)
        return [_passage(row, _cosine(row["vector"], query, norm)) for row in rows]

    async def linked_search(self, tenant: str, keys: Sequence[str], vector: Sequence[float], k: int) -> list[Passage]:
        check_tenant(tenant)
        if not keys or k <= 0:
            return []
        try:
            table = await self._table(tenant, create=False)
            if table is None or "about" not in (await self._schema_of(table)).names:
                return []
            wanted = ", ".join(_sql_string(key) for key in keys)
            rows = await (
                table.vector_search(list(vector))
                .distance_type("cosine")
                .where(f"array_has_any(about, make_array({wanted}))")
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

    async def _has_keyword_index(self, tenant: str, table: Any) -> bool:
        indices = await table.list_indices()
        if any("terms" in index.columns for index in indices):
            self._keyword_indexed.add(tenant)
            return True
        return False

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
        )

    async def count_chunks(self, tenant: str) -> int:
        table = await self._table(tenant, create=False)
        return 0 if table is None else int(await table.count_rows())

    async def ping(self) -> None:
        try:
            await self._db.list_tables()
        except Exception as exc:
            raise ProviderUnavailableError(f"LanceDB unavailable: {exc}", provider=PROVIDER) from exc

    async def close(self) -> None:
        for table in self._tables.values():
            table.close()
        self._tables.clear()

    async def _maybe_optimize(self, tenant: str, table: Any) -> None:
        """Compact small fragments now and then; every upsert adds one and slows scans."""
        count = self._writes.get(tenant, 0) + 1
        self._writes[tenant] = count
        if count % OPTIMIZE_EVERY_WRITES == 0:
            await table.optimize()
