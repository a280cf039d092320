"""The embedded LanceDB store on disk: persistence, replacement, tenant isolation, keyword search."""

from __future__ import annotations

import asyncio
from pathlib import Path

import lancedb
import pytest

from gateway.providers.vectorstores.base import ChunkRecord
from gateway.providers.vectorstores.fusion import query_terms
from gateway.providers.vectorstores.lance import LanceVectorStore
from pipelines.shared.fusion import reciprocal_rank_fusion
from pipelines.shared.visibility import Visibility
from tests.fakes.memory_store import InMemoryVectorStore


def chunk(doc: str, index: int, vector: list[float], text: str = "t") -> ChunkRecord:
    return ChunkRecord(doc_id=doc, index=index, title=doc.upper(), text=text, vector=vector, metadata={"n": index})


async def test_documents_survive_a_restart(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3)
    await store.replace_document("acme", "a", [chunk("a", 0, [1, 0, 0], "alpha")])
    await store.close()
    reopened = await LanceVectorStore.open(tmp_path, 3)
    found = await reopened.search("acme", [1, 0, 0], 5, visibility=Visibility.everything())
    assert [(p.chunk_id, p.text, p.metadata) for p in found] == [("a#0", "alpha", {"n": 0})]
    assert found[0].score == pytest.approx(1.0, abs=1e-5)


async def test_replace_leaves_only_the_new_chunks(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3)
    await store.replace_document("acme", "a", [chunk("a", i, [1, i, 0]) for i in range(5)])
    await store.replace_document("acme", "b", [chunk("b", 0, [0, 0, 1])])
    await store.replace_document("acme", "a", [chunk("a", 0, [1, 0, 0], "new")])
    assert await store.count_chunks("acme") == 2
    texts = {p.chunk_id: p.text for p in await store.search("acme", [1, 0, 0], 10, visibility=Visibility.everything())}
    assert texts == {"a#0": "new", "b#0": "t"}


async def test_tenants_are_separate_tables(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3)
    await store.replace_document("acme", "secret", [chunk("secret", 0, [1, 0, 0])])
    assert await store.search("globex", [1, 0, 0], 10, visibility=Visibility.everything()) == []
    await store.replace_document("globex", "other", [chunk("other", 0, [1, 0, 0])])
    assert [p.doc_id for p in await store.search("globex", [1, 0, 0], 10, visibility=Visibility.everything())] == [
        "other"
    ]
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
        await store.search("../escape", [1, 0, 0], 1, visibility=Visibility.everything())


@pytest.mark.parametrize("store_kind", ["lancedb", "memory"])
async def test_keyword_search_matches_japanese_by_bigrams_and_reports_the_cosine(
    tmp_path: Path, store_kind: str
) -> None:
    # The same tokens in both stores: LanceDB's full-text index over the shared tokenizer's terms, the
    # in-memory store's BM25 over them. A later write is searched too (unindexed rows are scanned).
    store = await LanceVectorStore.open(tmp_path, 3) if store_kind == "lancedb" else InMemoryVectorStore()
    await store.replace_document(
        "acme", "fail", [chunk("fail", 0, [1, 0, 0], "決済に失敗すると、8日目から閲覧のみモードになる。")]
    )
    await store.replace_document(
        "acme", "cancel", [chunk("cancel", 0, [0, 1, 0], "月の途中で解約しても日割りの返金はない。")]
    )
    await store.replace_document("acme", "k2", [chunk("k2", 0, [0, 0, 1], "The Kumo Carrier K2 lifts 150 kg.")])
    vector = [0.6, 0.8, 0.0]
    found = await store.keyword_search(
        "acme", query_terms("解約したら日割りになりますか"), vector, 5, visibility=Visibility.everything()
    )
    assert [p.doc_id for p in found][:1] == ["cancel"]  # 解約, 日割: the failed-payment passage shares only kana
    assert "k2" not in [p.doc_id for p in found]
    assert found[0].score == pytest.approx(0.8, abs=1e-5)
    assert [
        p.doc_id
        for p in await store.keyword_search(
            "acme", query_terms("Kumo K2 payload"), vector, 5, visibility=Visibility.everything()
        )
    ] == ["k2"]
    assert (
        await store.keyword_search("globex", query_terms("解約"), vector, 5, visibility=Visibility.everything()) == []
    )


async def test_hybrid_search_fuses_a_keyword_only_hit_into_the_top_k(tmp_path: Path) -> None:
    # Dense ranks "near" first and "named" last; the query names "named"'s rare word, so fusion lifts it into the top 2.
    store = await LanceVectorStore.open(tmp_path, 3)
    await store.replace_document("acme", "near", [chunk("near", 0, [1, 0, 0], "general overview")])
    await store.replace_document("acme", "mid", [chunk("mid", 0, [0.9, 0.1, 0], "another overview")])
    await store.replace_document("acme", "named", [chunk("named", 0, [0, 0, 1], "the Zephyrine protocol")])
    dense = await store.search("acme", [1, 0, 0], 3, visibility=Visibility.everything())
    keyword = await store.keyword_search(
        "acme", query_terms("Zephyrine"), [1, 0, 0], 3, visibility=Visibility.everything()
    )
    assert [p.doc_id for p in dense] == ["near", "mid", "named"]
    fused = reciprocal_rank_fusion([dense, keyword], 2)
    assert [p.doc_id for p in fused] == ["named", "near"]
    assert fused[0].score == pytest.approx(0.0, abs=1e-5)  # still the cosine, not a fused score


def about(doc: str, keys: tuple[str, ...], vector: list[float]) -> ChunkRecord:
    return ChunkRecord(doc_id=doc, index=0, title=doc, text=f"{doc} text", vector=vector, about=keys)


@pytest.mark.parametrize("store_kind", ["lancedb", "memory"])
async def test_linked_search_finds_the_chunks_about_the_keys_and_survives_a_restart(
    tmp_path: Path, store_kind: str
) -> None:
    store = await LanceVectorStore.open(tmp_path, 3) if store_kind == "lancedb" else InMemoryVectorStore()
    await store.replace_document("acme", "quill", [about("quill", ("mara quill",), [0, 1, 0])])
    await store.replace_document("acme", "lights", [about("lights", ("harbour lights",), [1, 0, 0])])
    await store.replace_document("acme", "dunmore", [about("dunmore", ("dunmore", "ダンモア"), [0, 0, 1])])
    await store.replace_document("acme", "it's", [about("it's", ("it's",), [1, 0, 0])])  # a quote in a key

    found = await store.linked_search(
        "acme", ["ダンモア", "mara quill", "it's"], [0, 0.6, 0.8], 5, visibility=Visibility.everything()
    )
    assert [p.doc_id for p in found] == ["dunmore", "quill", "it's"]
    assert await store.linked_search("acme", ["nobody"], [1, 0, 0], 5, visibility=Visibility.everything()) == []
    assert await store.linked_search("globex", ["mara quill"], [1, 0, 0], 5, visibility=Visibility.everything()) == []
    if isinstance(store, LanceVectorStore):
        await store.close()
        reopened = await LanceVectorStore.open(tmp_path, 3)
        assert [
            p.doc_id
            for p in await reopened.linked_search(
                "acme", ["mara quill"], [1, 0, 0], 5, visibility=Visibility.everything()
            )
        ] == ["quill"]
        exported = await reopened.export_chunks("acme")
        assert exported is not None
        assert dict(zip(exported.doc_ids, exported.about, strict=True))["dunmore"] == ("dunmore", "ダンモア")


async def test_a_table_written_before_links_existed_keeps_working_without_them(tmp_path: Path) -> None:
    import lancedb
    import pyarrow as pa

    old = pa.schema(
        [
            pa.field("chunk_id", pa.string()),
            pa.field("doc_id", pa.string()),
            pa.field("chunk_index", pa.int32()),
            pa.field("title", pa.string()),
            pa.field("text", pa.string()),
            pa.field("terms", pa.string()),
            pa.field("metadata", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), 3)),
        ]
    )
    db = await lancedb.connect_async(str(tmp_path))
    await db.create_table("kb_acme", schema=old)
    store = await LanceVectorStore.open(tmp_path, 3)
    await store.replace_document("acme", "quill", [about("quill", ("mara quill",), [0, 1, 0])])
    assert [p.doc_id for p in await store.search("acme", [0, 1, 0], 5, visibility=Visibility.everything())] == ["quill"]
    assert await store.linked_search("acme", ["mara quill"], [0, 1, 0], 5, visibility=Visibility.everything()) == []
    exported = await store.export_chunks("acme")
    assert exported is not None
    assert exported.about == []


async def unindexed_rows(path: Path, tenant: str) -> dict[str, int]:
    """Rows each index of the tenant's table does not cover yet, read from the database itself."""
    table = await (await lancedb.connect_async(str(path))).open_table(f"kb_{tenant}")
    stats = {index.name: await table.index_stats(index.name) for index in await table.list_indices()}
    return {name: s.num_unindexed_rows for name, s in stats.items() if s is not None}


async def test_a_write_burst_joins_the_indexes_when_asked_without_waiting_for_the_pause(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3, settle_after_s=3600)
    for i in range(4):
        await store.replace_document("acme", f"d{i}", [chunk(f"d{i}", 0, [1, i, 0], f"word{i} shared")])
    # The first write built the indexes on its own row; the other three are scanned until they are folded in.
    assert await unindexed_rows(tmp_path, "acme") == {"terms_idx": 3, "access_idx": 3}
    await store.settled()
    assert await unindexed_rows(tmp_path, "acme") == {"terms_idx": 0, "access_idx": 0}
    found = await store.keyword_search("acme", ["word3"], [1, 3, 0], 5, visibility=Visibility.everything())
    assert [p.doc_id for p in found] == ["d3"]
    await store.close()


async def test_a_write_burst_joins_the_indexes_once_writes_pause(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3, settle_after_s=0.01)
    for i in range(3):
        await store.replace_document("acme", f"d{i}", [chunk(f"d{i}", 0, [1, i, 0])])
    (fold_in,) = [task for task in asyncio.all_tasks() if task.get_name() == "lancedb-settle-acme"]
    await fold_in  # its own timer, nothing hurried it
    assert await unindexed_rows(tmp_path, "acme") == {"terms_idx": 0, "access_idx": 0}
    await store.replace_document("acme", "d9", [chunk("d9", 0, [0, 0, 1])])  # a new burst gets a new fold-in
    (again,) = [task for task in asyncio.all_tasks() if task.get_name() == "lancedb-settle-acme"]
    assert again is not fold_in
    await store.close()


async def test_closing_drops_a_fold_in_still_waiting(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3, settle_after_s=3600)
    await store.replace_document("acme", "a", [chunk("a", 0, [1, 0, 0])])
    await store.replace_document("acme", "b", [chunk("b", 0, [0, 1, 0])])
    (fold_in,) = [task for task in asyncio.all_tasks() if task.get_name() == "lancedb-settle-acme"]
    await store.close()
    assert fold_in.cancelled()
    assert await unindexed_rows(tmp_path, "acme") == {"terms_idx": 1, "access_idx": 1}  # left to a later write


async def test_with_fold_ins_off_a_burst_joins_the_indexes_only_when_asked(tmp_path: Path) -> None:
    store = await LanceVectorStore.open(tmp_path, 3, settle_after_s=0)
    for i in range(3):
        await store.replace_document("acme", f"d{i}", [chunk(f"d{i}", 0, [1, i, 0])])
    assert [task for task in asyncio.all_tasks() if task.get_name().startswith("lancedb-settle")] == []
    assert await unindexed_rows(tmp_path, "acme") == {"terms_idx": 2, "access_idx": 2}
    await store.settled()
    assert await unindexed_rows(tmp_path, "acme") == {"terms_idx": 0, "access_idx": 0}
    await store.close()
