"""The embedded LanceDB store on disk: persistence, replacement, tenant isolation."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.providers.vectorstores.base import ChunkRecord
from gateway.providers.vectorstores.lance import LanceVectorStore


def chunk(doc: str, index: int, vector: list[float], text: str = "t") -> ChunkRecord:
    return ChunkRecord(doc_id=doc, index=index, title=doc.upper(), text=text, vector=vector, metadata={"n": index})


async def test_documents_survive_a_restart(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3)
    await store.replace_document("acme", "a", [chunk("a", 0, [1, 0, 0], "alpha")])
    await store.close()
    reopened = await LanceVectorStore.open(tmp_path, 3)
    found = await reopened.search("acme", [1, 0, 0], 5)
    assert [(p.chunk_id, p.text, p.metadata) for p in found] == [("a#0", "alpha", {"n": 0})]
    assert found[0].score == pytest.approx(1.0, abs=1e-5)


async def test_replace_leaves_only_the_new_chunks(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3)
    await store.replace_document("acme", "a", [chunk("a", i, [1, i, 0]) for i in range(5)])
    await store.replace_document("acme", "b", [chunk("b", 0, [0, 0, 1])])
    await store.replace_document("acme", "a", [chunk("a", 0, [1, 0, 0], "new")])
    assert await store.count_chunks("acme") == 2
    texts = {p.chunk_id: p.text for p in await store.search("acme", [1, 0, 0], 10)}
    assert texts == {"a#0": "new", "b#0": "t"}


async def test_tenants_are_separate_tables(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3)
    await store.replace_document("acme", "secret", [chunk("secret", 0, [1, 0, 0])])
    assert await store.search("globex", [1, 0, 0], 10) == []
    await store.replace_document("globex", "other", [chunk("other", 0, [1, 0, 0])])
    assert [p.doc_id for p in await store.search("globex", [1, 0, 0], 10)] == ["other"]
    assert await store.delete_document("globex", "secret") is False
    assert await store.count_chunks("acme") == 1


async def test_delete_reports_whether_anything_was_removed(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3)
    await store.replace_document("acme", "it's", [chunk("it's", 0, [1, 0, 0])])  # quote in the id
    assert await store.delete_document("acme", "it's") is True
    assert await store.delete_document("acme", "it's") is False
    assert await store.delete_document("nobody", "x") is False


async def test_invalid_tenant_never_reaches_the_store(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3)
    with pytest.raises(ValueError, match="invalid tenant"):
        await store.search("../escape", [1, 0, 0], 1)
