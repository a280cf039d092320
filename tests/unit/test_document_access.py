"""Document permissions below the services: one tenant, two readers (groups ``hr`` and ``eng``), a document each
and one open to the whole tenant. Every search path (dense, keyword, hybrid, entity links, the in-memory matrix,
the probe's reuse, multi-hop's hop search and search-more) ranks only what its reader may see, and the answer
caches (exact, semantic, coalesced flights) never hand one reader's answer to the other.

The in-memory store and the matrix here; LanceDB, the Pinecone fake and Redis in
``tests/integration/test_document_access_stores.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from langchain_core.embeddings import Embeddings

from gateway.cache.backend import MemoryBackend
from gateway.cache.exact import ExactCache
from gateway.cache.semantic import SemanticCache, SimilarityThreshold
from gateway.cache.versions import KnowledgeVersions
from gateway.errors import ClientError
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.matrices import TenantMatrices
from gateway.knowledge.permissions import InvalidAccessError, document_tags, parse_access_field, wire_access
from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.vectorstores.base import ChunkRecord
from gateway.query.schemas import QueryResponse
from gateway.settings import CacheSettings, SemanticCacheSettings
from pipelines.shared import events as ev
from pipelines.shared.deps import Passage
from pipelines.shared.visibility import TENANT_OPEN, UNSET, Visibility
from routes.calibration import Calibration
from routes.probe import ProbeFirstRetriever, probe_of
from tests.calibration_support import corrective_policy
from tests.fakes.memory_store import InMemoryVectorStore
from tests.scripted import CountedCompute
from tests.unit.corrective_support import (
    AURORA,
    AURORA_ANSWER,
    AURORA_DOCS,
    AURORA_QUESTION,
    ENOUGH,
    K3_FACT,
    RecordingSearch,
    Script,
    relevant,
    run_graph,
)

TENANT = "acme"
HR = Visibility.of(["hr"], unset_open=False)
ENG = Visibility.of(["eng"], unset_open=False)
EVERYTHING = Visibility.everything()
FREEZE = "When does the deploy freeze for Project Falcon start?"
LEAVE = "By when must annual leave requests be filed?"

DOCUMENTS = [
    NewDocument(
        id="hr-leave",
        title="Annual leave rules",
        text="Annual leave requests must be filed by 1 December. The deploy freeze does not change leave.",
        access=("hr",),
    ),
    NewDocument(
        id="eng-falcon",
        title="Project Falcon",
        text="The deploy freeze for Project Falcon starts on 20 December and ends on 6 January.",
        access=("eng",),
    ),
    NewDocument(
        id="handbook",
        title="Company handbook",
        text="The handbook covers office hours from 9 to 17. Project Falcon is the new billing platform.",
        access=(TENANT_OPEN,),
    ),
]
HR_DOCS = {"hr-leave", "handbook"}
ENG_DOCS = {"eng-falcon", "handbook"}


class CountingEmbeddings(Embeddings):
    """The session's model, counting the texts embedded for storage."""

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.embedded = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return await self.inner.aembed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await self.inner.aembed_query(text)


def docs_of(passages: Sequence[Passage]) -> set[str]:
    return {p.doc_id for p in passages}


async def knowledge(
    embeddings: USEEmbeddings, *, store: InMemoryVectorStore | None = None, matrices: bool = False, links: bool = True
) -> KnowledgeBase:
    store = store or InMemoryVectorStore()
    versions = KnowledgeVersions(MemoryBackend())
    memory = TenantMatrices(store, versions, 64 * 1024 * 1024) if matrices else None
    kb = KnowledgeBase(embeddings, store, Chunker(500, 50), versions, links=links, matrices=memory)
    await kb.ingest(TENANT, DOCUMENTS)
    if memory is not None:
        assert await memory.warm(TENANT)
    return kb


@pytest.mark.parametrize("matrices", [False, True], ids=["store", "matrix"])
async def test_every_search_of_a_reader_ranks_only_what_they_may_read(
    embeddings: USEEmbeddings, matrices: bool
) -> None:
    kb = await knowledge(embeddings, matrices=matrices)
    vector = await kb.embed_query(FREEZE)
    # Tenant-wide, Falcon's freeze page is the best answer to the freeze question: the one HR must never get.
    assert (await kb.dense_search(TENANT, FREEZE, 1, visibility=EVERYTHING, vector=vector))[0].doc_id == "eng-falcon"
    for reader, allowed in ((HR, HR_DOCS), (ENG, ENG_DOCS)):
        for k in (1, 3, 10):  # k past what the reader may see: never topped up with another's chunks
            dense = await kb.dense_search(TENANT, FREEZE, k, visibility=reader, vector=vector)
            hybrid = await kb.search(TENANT, FREEZE, k, visibility=reader, vector=vector)
            assert docs_of(dense) <= allowed
            assert docs_of(hybrid) <= allowed
            assert len(dense) == min(k, len(allowed))  # filtered inside the search: k of theirs, not k minus others'
        keyword = await kb.store.keyword_search(TENANT, ["deploy", "freeze"], vector, 10, visibility=reader)
        assert docs_of(keyword) <= allowed
        assert keyword
    assert docs_of(await kb.search(TENANT, FREEZE, 10, visibility=EVERYTHING)) == HR_DOCS | ENG_DOCS


@pytest.mark.parametrize("matrices", [False, True], ids=["store", "matrix"])
async def test_entity_links_lead_only_to_documents_the_reader_may_read(
    embeddings: USEEmbeddings, matrices: bool
) -> None:
    """The open handbook mentions Project Falcon, the title of ENG's page: a link ENG follows and HR does not."""
    kb = await knowledge(embeddings, matrices=matrices)
    vector = await kb.embed_query(FREEZE)
    [handbook] = [
        p for p in await kb.search(TENANT, "office hours handbook", 5, visibility=HR) if p.doc_id == "handbook"
    ]
    assert docs_of(await kb.linked(TENANT, vector, [handbook], 5, visibility=ENG)) == {"eng-falcon"}
    assert await kb.linked(TENANT, vector, [handbook], 5, visibility=HR) == []


async def test_a_matrix_masks_the_rows_before_its_top_k(embeddings: USEEmbeddings) -> None:
    """The matrix's ranking for a reader is the store's filtered ranking, row for row."""
    store = InMemoryVectorStore()
    kb = await knowledge(embeddings, store=store, matrices=True)
    assert kb.matrices is not None
    vector = await kb.embed_query(FREEZE)
    for reader in (HR, ENG, EVERYTHING, Visibility.tenant_only(unset_open=False)):
        warm = await kb.matrices.search(TENANT, vector, 10, visibility=reader)
        assert warm is not None
        cold = await store.search(TENANT, vector, 10, visibility=reader)
        assert [p.chunk_id for p in warm] == [p.chunk_id for p in cold]
        assert [p.score for p in warm] == pytest.approx([p.score for p in cold], abs=1e-5)


async def test_unset_documents_follow_the_tenants_policy(embeddings: USEEmbeddings) -> None:
    kb = await knowledge(embeddings, matrices=True)
    await kb.ingest(TENANT, [NewDocument(id="old", title="Old memo", text="A memo from before permissions.")])
    assert kb.matrices is not None
    assert await kb.matrices.warm(TENANT)
    question = "memo before permissions"
    open_hr = Visibility.of(["hr"], unset_open=True)
    assert "old" in docs_of(await kb.search(TENANT, question, 10, visibility=open_hr))
    assert "old" not in docs_of(await kb.search(TENANT, question, 10, visibility=HR))
    assert "old" in docs_of(await kb.search(TENANT, question, 10, visibility=EVERYTHING))


async def test_the_probe_serves_retrieval_for_its_own_reader_only(embeddings: USEEmbeddings) -> None:
    kb = await knowledge(embeddings)
    vector = await kb.embed_query(FREEZE)
    depth = kb.ranking_depth(4)
    probe = probe_of(
        TENANT, FREEZE, await kb.dense_search(TENANT, FREEZE, depth, visibility=ENG, vector=vector), depth, ENG
    )
    reusing = ProbeFirstRetriever(kb, probe)
    assert "eng-falcon" in docs_of(await reusing.search(TENANT, FREEZE, 4, visibility=ENG, vector=vector))
    assert reusing.served == 1
    # HR asking the same question of the same request's retriever never gets ENG's ranking.
    hr = await reusing.search(TENANT, FREEZE, 4, visibility=HR, vector=vector)
    assert docs_of(hr) <= HR_DOCS
    assert reusing.served == 1


@pytest.mark.parametrize(("reader", "sees_sheet"), [(ENG, True), (HR, False)], ids=["eng", "hr"])
async def test_multi_hop_hops_and_search_more_search_the_readers_documents(
    embeddings: USEEmbeddings, reader: Visibility, sees_sheet: bool
) -> None:
    """Project Aurora's bridge page is open; the K3 sheet it leads to is ENG's. The planner names the sheet's
    subject; ENG's hop search finds the sheet, HR's never does, and neither does its search-more."""
    docs = [
        NewDocument(d.id, d.text, d.title, access=("eng",) if d.id == "k3-spec" else (TENANT_OPEN,))
        for d in AURORA_DOCS
    ]
    kb = KnowledgeBase(embeddings, InMemoryVectorStore(), Chunker(500, 50))
    await kb.ingest(AURORA, docs)
    hop = {"found": "Project Aurora is the internal codename for the Kumo Carrier K3", "next_query": "Kumo Carrier K3"}
    script = Script(
        answers=[AURORA_ANSWER],
        grades={"Project Aurora": relevant("the Kumo Carrier K3"), "Kumo Carrier K3 specification": relevant(K3_FACT)},
        hops=[hop, ENOUGH],
        rewrites=["Kumo Carrier K3 maximum payload"],
    )
    search = RecordingSearch(kb)
    state, _ = await run_graph(
        kb,
        script,
        query=AURORA_QUESTION,
        tenant=AURORA,
        top_k=2,
        policy=corrective_policy(max_hops=2),
        search=search,
        visibility=reader,
    )
    seen = docs_of([*state.context, *state.evidence, *state.candidates, *state.first_round, *state.sources])
    seen |= {chunk.split("#")[0] for chunk in state.seen}
    assert any(isinstance(event, ev.SearchHop) for event in state.events)  # the hop was searched
    assert ("k3-spec" in seen) is sees_sheet
    if not sees_sheet:
        assert "300 kg" not in " ".join(p.text for p in state.context)


@pytest.mark.parametrize(("reader", "sees_sheet"), [(ENG, True), (HR, False)], ids=["eng", "hr"])
async def test_search_more_after_a_rewrite_searches_the_readers_documents(
    embeddings: USEEmbeddings, reader: Visibility, sees_sheet: bool
) -> None:
    """Nothing is judged relevant, so CRAG rewrites and searches more (the tenant's store, offline): the
    rewrite names the K3, and only ENG's search-more finds its sheet."""
    docs = [
        NewDocument(d.id, d.text, d.title, access=("eng",) if d.id == "k3-spec" else (TENANT_OPEN,))
        for d in AURORA_DOCS
    ]
    kb = KnowledgeBase(embeddings, InMemoryVectorStore(), Chunker(500, 50))
    await kb.ingest(AURORA, docs)
    search = RecordingSearch(kb)
    state, _ = await run_graph(
        kb,
        Script(rewrites=["Kumo Carrier K3 specification maximum payload"]),
        query="Which warehouse robot ships in 2026?",
        tenant=AURORA,
        top_k=1,
        search=search,
        visibility=reader,
    )
    assert search.calls  # search-more ran
    seen = {chunk.split("#")[0] for chunk in state.seen} | docs_of([*state.context, *state.candidates])
    assert ("k3-spec" in seen) is sees_sheet


async def test_changing_only_access_retags_without_embedding_and_moves_the_version(
    embeddings: USEEmbeddings,
) -> None:
    counting = CountingEmbeddings(embeddings)
    store = InMemoryVectorStore()
    versions = KnowledgeVersions(MemoryBackend())
    kb = KnowledgeBase(counting, store, Chunker(500, 50), versions)
    await kb.ingest(TENANT, DOCUMENTS)
    embedded = counting.embedded
    before = await versions.current(TENANT)
    stored = (await store.document_chunks(TENANT, ["eng-falcon"]) or {})["eng-falcon"]

    moved = NewDocument(DOCUMENTS[1].id, DOCUMENTS[1].text, DOCUMENTS[1].title, access=("eng", "hr"))
    result = await kb.ingest(TENANT, [moved])

    assert result.retagged == ("eng-falcon",)
    assert counting.embedded == embedded  # no embedding
    assert await versions.current(TENANT) > before  # the knowledge changed: caches keyed by the old version miss
    after = (await store.document_chunks(TENANT, ["eng-falcon"]) or {})["eng-falcon"]
    assert [c.access for c in after] == [("eng", "hr")] * len(stored)
    assert [list(c.vector) for c in after] == [list(c.vector) for c in stored]
    assert "eng-falcon" in docs_of(await kb.search(TENANT, FREEZE, 3, visibility=HR))
    # A change of text is embedded again, access or not.
    edited = NewDocument(moved.id, moved.text + " Updated.", moved.title, access=("eng",))
    assert (await kb.ingest(TENANT, [edited])).retagged == ()
    assert counting.embedded > embedded


def test_access_values_become_tags_and_invalid_ones_are_refused() -> None:
    assert document_tags(None) == (UNSET,)
    assert document_tags("tenant") == (TENANT_OPEN,)
    assert document_tags(["eng", "hr", "eng"]) == ("eng", "hr")
    assert parse_access_field(" hr, eng/platform  team:sre ", what="x") == ("eng/platform", "hr", "team:sre")
    assert parse_access_field("", what="x") == (UNSET,)
    assert parse_access_field("tenant", what="x") == (TENANT_OPEN,)
    for bad in (["*"], ["~"], ["*hr"], ["~x"], [], ["has space"], ["x" * 65], "everyone", ["ok", 3]):
        with pytest.raises(InvalidAccessError) as refused:
            document_tags(bad)  # type: ignore[arg-type]
        assert isinstance(refused.value, ClientError)
        assert refused.value.status_code == 422
    assert wire_access(("eng", "hr")) == ["eng", "hr"]
    assert wire_access((TENANT_OPEN,)) == "tenant"
    assert wire_access((UNSET,)) is None


async def test_a_reserved_tag_cannot_be_forged_into_a_chunk_through_the_api_types() -> None:
    """Readers never hold a group starting with a reserved character either: ``Visibility.of`` drops it."""
    assert Visibility.of(["*", "~", "hr"], unset_open=False) == HR
    store = InMemoryVectorStore()
    record = ChunkRecord(doc_id="d", index=0, title="t", text="x", vector=[1.0, 0.0], access=("eng",))
    await store.replace_document(TENANT, "d", [record])
    assert await store.search(TENANT, [1.0, 0.0], 5, visibility=HR) == []


async def test_the_exact_cache_and_its_flights_are_per_reader() -> None:
    backend = MemoryBackend()
    cache = ExactCache(CacheSettings(prefix="t"), backend, KnowledgeVersions(backend, prefix="t"), QueryResponse)
    hr_compute, eng_compute = CountedCompute("hr answer"), CountedCompute("eng answer")
    hr = await cache.get_or_compute(tenant=TENANT, route="auto", query=FREEZE, compute=hr_compute, visibility=HR)
    eng = await cache.get_or_compute(tenant=TENANT, route="auto", query=FREEZE, compute=eng_compute, visibility=ENG)
    assert (hr.source, eng.source) == ("computed", "computed")
    assert "eng" in eng.value.answer
    assert "hr" in hr.value.answer
    again = await cache.get_or_compute(tenant=TENANT, route="auto", query=FREEZE, compute=hr_compute, visibility=HR)
    assert again.source == "hit"
    assert again.value.answer == hr.value.answer
    # Concurrent identical questions coalesce per reader: one flight for HR's pair, another for ENG's.
    slow_hr, slow_eng = CountedCompute("hr", delay_s=0.05), CountedCompute("eng", delay_s=0.05)
    outcomes = await asyncio.gather(
        *(
            cache.get_or_compute(tenant=TENANT, route="auto", query=LEAVE, compute=compute, visibility=reader)
            for reader, compute in ((HR, slow_hr), (ENG, slow_eng), (HR, slow_hr), (ENG, slow_eng))
        )
    )
    assert (slow_hr.calls, slow_eng.calls) == (1, 1)
    assert [o.value.answer.split()[0] for o in outcomes] == ["hr", "eng", "hr", "eng"]
    assert sorted(o.source for o in outcomes) == ["coalesced", "coalesced", "computed", "computed"]


async def test_a_paraphrase_is_served_only_to_the_reader_it_was_answered_for(
    embeddings: USEEmbeddings, calibration: Calibration
) -> None:
    threshold = SimilarityThreshold(calibration.semantic_threshold)
    cache = SemanticCache(SemanticCacheSettings(), MemoryBackend(), embeddings, prefix="t", threshold=threshold)
    await cache.store(TENANT, 1, FREEZE, None, b"hr's answer", visibility=HR)
    paraphrase = "When does Project Falcon's deploy freeze begin?"
    hit = await cache.lookup(TENANT, 1, paraphrase, visibility=HR)
    assert hit is not None
    assert hit.payload == b"hr's answer"
    assert await cache.lookup(TENANT, 1, paraphrase, visibility=ENG) is None
    assert await cache.lookup(TENANT, 1, FREEZE, visibility=ENG) is None
    assert await cache.lookup(TENANT, 1, paraphrase, visibility=EVERYTHING) is None
