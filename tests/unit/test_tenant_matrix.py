"""The in-memory tenant matrix: the store's exact ranking, current with the knowledge version, bounded;
and retrieval computed from the probe's dense ranking instead of searching again."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from litestar.testing import AsyncTestClient
from threadpoolctl import ThreadpoolController

from gateway.app import create_app
from gateway.cache.backend import CacheUnavailableError, MemoryBackend
from gateway.cache.versions import KnowledgeVersions
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.matrices import TenantMatrix
from gateway.knowledge.service import HYBRID_DEPTH, KnowledgeBase, NewDocument
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.vectorstores.base import StoredChunks
from gateway.settings import Settings
from pipelines.shared.deps import Passage
from pipelines.shared.visibility import Visibility
from routes.probe import PROBE_DEPTH, ProbeFirstRetriever, probe_of
from tests.conftest import grounded_or_direct
from tests.fakes.memory_store import InMemoryVectorStore
from tests.fakes.scripted_chat import ScriptedChatModel

DIMENSIONS = 32
DOCS = [
    NewDocument(id=f"doc-{i}", title=f"Topic {i}", text=f"Paragraph {i} about harbour {i} and river {i % 3}.")
    for i in range(30)
]


class CountingStore(InMemoryVectorStore):
    """Counts the searches and exports that reach the store."""

    def __init__(self) -> None:
        super().__init__()
        self.searches = 0
        self.keyword_searches = 0
        self.exports = 0

    async def search(self, tenant: str, vector: Sequence[float], k: int, *, visibility: Visibility) -> list[Passage]:
        self.searches += 1
        return await super().search(tenant, vector, k, visibility=visibility)

    async def keyword_search(
        self, tenant: str, terms: Sequence[str], vector: Sequence[float], k: int, *, visibility: Visibility
    ) -> list[Passage]:
        self.keyword_searches += 1
        return await super().keyword_search(tenant, terms, vector, k, visibility=visibility)

    async def export_chunks(self, tenant: str) -> StoredChunks | None:
        self.exports += 1
        return await super().export_chunks(tenant)


class NoExportStore(CountingStore):
    exports_chunks = False

    async def export_chunks(self, tenant: str) -> StoredChunks | None:
        self.exports += 1
        return None


class DownBackend(MemoryBackend):
    async def get_version(self, key: str) -> int:
        raise CacheUnavailableError("redis down")


def knowledge_base(
    store: InMemoryVectorStore, max_bytes: int = 64 * 1024 * 1024, *, hybrid: bool = True
) -> KnowledgeBase:
    from gateway.knowledge.matrices import TenantMatrices

    versions = KnowledgeVersions(MemoryBackend())
    embeddings = DeterministicFakeEmbedding(size=DIMENSIONS)
    matrices = TenantMatrices(store, versions, max_bytes)
    return KnowledgeBase(embeddings, store, Chunker(500, 50), versions, hybrid=hybrid, matrices=matrices)


def ids(passages: Sequence[Passage]) -> list[str]:
    return [p.chunk_id for p in passages]


async def settle() -> None:
    """Let the background loads the searches started finish."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_warm_tenant_is_ranked_from_memory_exactly_as_the_store_ranks_it() -> None:
    store = CountingStore()
    kb = knowledge_base(store)
    await kb.ingest("acme", DOCS)
    matrices = kb.matrices
    assert matrices is not None
    vector = await kb.embed_query("harbour 7")
    cold = await kb.dense_search("acme", "harbour 7", 10, vector=vector, visibility=Visibility.everything())
    assert store.searches == 1  # not warm yet: searched in the store, a load started in the background
    await settle()
    assert store.exports == 1
    warm = await kb.dense_search("acme", "harbour 7", 10, vector=vector, visibility=Visibility.everything())
    assert store.searches == 1
    assert matrices.hits == 1
    assert ids(warm) == ids(cold)
    assert [p.score for p in warm] == pytest.approx([p.score for p in cold], abs=1e-5)
    assert [(p.doc_id, p.title, p.text) for p in warm] == [(p.doc_id, p.title, p.text) for p in cold]
    assert ids(
        await kb.dense_search("acme", "harbour 7", 100, vector=vector, visibility=Visibility.everything())
    ) == ids(await store.search("acme", vector, 100, visibility=Visibility.everything()))
    assert await kb.dense_search("globex", "harbour 7", 5, vector=vector, visibility=Visibility.everything()) == []


async def test_a_knowledge_change_makes_the_matrix_stale_until_it_is_loaded_again() -> None:
    store = CountingStore()
    kb = knowledge_base(store)
    await kb.ingest("acme", DOCS[:10])
    matrices = kb.matrices
    assert matrices is not None
    assert await matrices.warm("acme")
    late = NewDocument(id="late", title="Late", text="A document written after the matrix was loaded.")
    await kb.ingest("acme", [late])
    vector = await kb.embed_query(f"{late.title}\n{late.text}")  # what ingestion embedded: its best match
    searches = store.searches
    found = await kb.dense_search("acme", late.text, 3, vector=vector, visibility=Visibility.everything())
    assert store.searches == searches + 1  # the version moved on: the store answers, never the stale matrix
    assert found[0].doc_id == "late"
    await settle()
    again = await kb.dense_search("acme", late.text, 3, vector=vector, visibility=Visibility.everything())
    assert store.searches == searches + 1
    assert ids(again) == ids(found)
    await kb.delete("acme", "late")
    assert (await kb.dense_search("acme", late.text, 3, vector=vector, visibility=Visibility.everything()))[
        0
    ].doc_id != "late"


async def test_the_memory_budget_keeps_the_recently_used_tenants_and_never_loads_one_larger_than_it() -> None:
    store = CountingStore()
    kb = knowledge_base(store)
    for tenant in ("a", "b", "c"):
        await kb.ingest(tenant, DOCS[:10])
    matrices = kb.matrices
    assert matrices is not None
    assert await matrices.warm("a")
    one = matrices.nbytes
    matrices.max_bytes = 2 * one + one // 2  # room for two tenants of this size
    assert await matrices.warm("b")
    vector = await kb.embed_query("river")
    await kb.dense_search(
        "a", "river", 3, vector=vector, visibility=Visibility.everything()
    )  # "a" used last: "b" is the least recent
    assert await matrices.warm("c")
    assert set(matrices.sizes()) == {"a", "c"}
    assert matrices.nbytes <= matrices.max_bytes
    assert all(chunks == 10 and size > 10 * DIMENSIONS * 4 for chunks, size in matrices.sizes().values())

    matrices.max_bytes = one // 2  # no tenant fits any more
    await kb.ingest("a", DOCS[10:12])
    exports = store.exports
    assert not await matrices.warm("a")
    assert "a" not in matrices.sizes()
    assert store.exports == exports + 1
    for _ in range(3):  # too big at this version: searched in the store, never exported again
        assert await kb.dense_search("a", "river", 3, vector=vector, visibility=Visibility.everything())
        await settle()
    assert store.exports == exports + 1


async def test_without_a_version_or_an_export_every_probe_searches_the_store() -> None:
    from gateway.knowledge.matrices import TenantMatrices

    store = NoExportStore()
    kb = knowledge_base(store)
    await kb.ingest("acme", DOCS[:5])
    vector = await kb.embed_query("harbour")
    for _ in range(3):
        assert await kb.dense_search("acme", "harbour", 3, vector=vector, visibility=Visibility.everything())
        await settle()
    assert store.searches == 3
    assert store.exports == 1

    down = TenantMatrices(CountingStore(), KnowledgeVersions(DownBackend()), 1 << 20)
    assert await down.search("acme", vector, 3, visibility=Visibility.everything()) is None


async def test_hybrid_retrieval_is_computed_from_the_probes_dense_ranking_with_one_keyword_search() -> None:
    store = CountingStore()
    kb = knowledge_base(store, max_bytes=0)  # every dense search reaches the store, so it can be counted
    await kb.ingest("acme", DOCS)
    question = "Which harbour is on river 2?"
    vector = await kb.embed_query(question)
    k = 4
    depth = kb.ranking_depth(8)
    assert depth == 8 * HYBRID_DEPTH
    probe = probe_of(
        "acme",
        question,
        await kb.dense_search("acme", question, depth, vector=vector, visibility=Visibility.everything()),
        depth,
        Visibility.everything(),
    )
    assert len(probe.evidence) == PROBE_DEPTH  # what the signals read; the ranking itself is deeper
    assert len(probe.passages) == depth
    expected = await kb.search("acme", question, k, vector=vector, visibility=Visibility.everything())
    searches, keyword = store.searches, store.keyword_searches
    reuse = ProbeFirstRetriever(kb, probe)
    assert await reuse.search("acme", question, k, vector=vector, visibility=Visibility.everything()) == expected
    assert (store.searches, store.keyword_searches) == (searches, keyword + 1)
    assert reuse.served == 1
    # Deeper than the probe's ranking allows (9 x 3 > 24), or another query: a full search.
    await reuse.search("acme", question, 9, vector=vector, visibility=Visibility.everything())
    await reuse.search("acme", "river 1", k, vector=vector, visibility=Visibility.everything())
    assert store.searches == searches + 2
    assert reuse.served == 1


async def test_dense_retrieval_takes_the_head_of_the_probes_ranking() -> None:
    store = CountingStore()
    kb = knowledge_base(store, max_bytes=0, hybrid=False)
    await kb.ingest("acme", DOCS)
    vector = await kb.embed_query("harbour 3")
    assert kb.ranking_depth(8) == 8
    dense = await kb.dense_search("acme", "harbour 3", 8, vector=vector, visibility=Visibility.everything())
    assert (
        await kb.search_reusing(
            "acme", "harbour 3", 5, vector=vector, dense=dense, depth=8, visibility=Visibility.everything()
        )
        == dense[:5]
    )
    assert (
        await kb.search_reusing(
            "acme", "harbour 3", 9, vector=vector, dense=dense, depth=8, visibility=Visibility.everything()
        )
        is None
    )


async def test_the_app_runs_blas_on_one_thread_while_it_serves_and_restores_it(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    def blas_threads() -> list[int]:
        return [pool["num_threads"] for pool in ThreadpoolController().info() if pool["user_api"] == "blas"]

    before = blas_threads()
    if not before:
        pytest.skip("numpy here loads no BLAS library threadpoolctl can see")
    app = create_app(
        settings, ProviderOverrides(chat_model=ScriptedChatModel(responder=grounded_or_direct), embeddings=embeddings)
    )
    async with AsyncTestClient(app):
        assert blas_threads() == [1] * len(before)
    assert blas_threads() == before


def test_every_passage_gets_its_own_metadata_parsed_once_per_distinct_text() -> None:
    """Flat metadata is parsed once per distinct text and copied per passage; nested metadata is parsed per passage,
    so no two passages (nor two probes) ever share a value a caller could change."""
    chunks = StoredChunks(
        chunk_ids=["a#0", "a#1", "b#0"],
        doc_ids=["a", "a", "b"],
        titles=["A", "A", "B"],
        texts=["one", "two", "three"],
        metadata=['{"lang": "en", "page": 3}', '{"lang": "en", "page": 3}', '{"tags": ["x", "y"]}'],
        vectors=np.eye(3, 4, dtype=np.float32),
    )
    matrix = TenantMatrix.of(1, chunks)
    assert matrix.metadata[0] is matrix.metadata[1]  # one parse for the document's two chunks
    assert matrix.metadata[2] is None  # nested: parsed whenever returned
    bare = TenantMatrix.of(1, dataclasses.replace(chunks, metadata=["{}", "{}", "{}"]))
    assert matrix.nbytes > bare.nbytes  # the parsed dicts are counted in the budget

    first = {p.chunk_id: p for p in matrix.top([1.0, 0.0, 0.0, 0.0], 3, Visibility.everything())}
    second = {p.chunk_id: p for p in matrix.top([1.0, 0.0, 0.0, 0.0], 3, Visibility.everything())}
    assert first["a#0"].metadata == {"lang": "en", "page": 3}
    assert first["b#0"].metadata == {"tags": ["x", "y"]}
    first["a#0"].metadata["lang"] = "ja"
    first["b#0"].metadata["tags"].append("z")
    assert first["a#1"].metadata == {"lang": "en", "page": 3}
    assert second["a#0"].metadata == {"lang": "en", "page": 3}
    assert second["b#0"].metadata == {"tags": ["x", "y"]}
    assert matrix.metadata[0] == {"lang": "en", "page": 3}


def test_the_probe_searches_only_as_deep_as_single_hop_reuses_when_the_matrices_search_in_memory() -> None:
    """With the in-memory matrices a multi-hop request searches again (one matrix product) rather than every
    ``auto`` request making the passages only multi-hop's first search could reuse; without them (each search a store
    scan or a network call) the probe stays deep enough for multi-hop too."""
    from gateway.query.factory import probe_depth
    from gateway.settings import RetrievalSettings

    retrieval = RetrievalSettings()
    in_memory = knowledge_base(CountingStore())
    assert probe_depth(retrieval, in_memory) == max(PROBE_DEPTH, retrieval.default_top_k * HYBRID_DEPTH)
    in_store = knowledge_base(CountingStore())
    in_store.matrices = None
    assert probe_depth(retrieval, in_store) == retrieval.multi_hop_top_k * HYBRID_DEPTH
    # A store the matrices cannot load (Pinecone: every search a network call) is probed as deep as without them.
    assert probe_depth(retrieval, knowledge_base(NoExportStore())) == retrieval.multi_hop_top_k * HYBRID_DEPTH
    assert (
        probe_depth(retrieval, knowledge_base(CountingStore(), max_bytes=0)) == retrieval.multi_hop_top_k * HYBRID_DEPTH
    )
    assert probe_depth(retrieval, in_store) > probe_depth(retrieval, knowledge_base(CountingStore()))
