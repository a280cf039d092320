"""Document permissions in the real stores and through the app: LanceDB's pre-filters (dense, full-text, linked) and
its migration of tables made before the ``access`` column, Pinecone's metadata filter through the real client and
the repo's fake, and the request path on LanceDB with Redis (db 15) as the cache: two readers of one tenant, every
route, the exact cache, a semantic paraphrase and coalesced concurrent requests, never each other's documents.

Recall for a permitted reader is that of a tenant holding only their group's documents (SQuAD's Normans paragraphs
split over five groups): the filter is inside the search, not a post-filter of the tenant-wide top ``k``.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import lancedb
import msgspec
import pyarrow as pa
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from gateway.knowledge.chunking import Chunker
from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.vectorstores.base import ChunkRecord
from gateway.providers.vectorstores.lance import LanceVectorStore
from gateway.providers.vectorstores.pinecone_store import PineconeVectorStore
from gateway.query.schemas import QueryResponse
from gateway.settings import Settings
from pipelines.shared.deps import Passage
from pipelines.shared.visibility import TENANT_OPEN, UNSET, Visibility
from tests.fakes.pinecone_server import FAKE_API_KEY, FakePinecone, running_fake_pinecone
from tests.reader_support import admin_and_chatbot_keys
from tests.scripted import answer_with_first_passage, structured_reply

DIM = 4
TENANT = "acme"
HR = Visibility.of(["hr"], unset_open=False)
ENG = Visibility.of(["eng"], unset_open=False)
EVERYTHING = Visibility.everything()
REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "dev"


def record(doc_id: str, vector: list[float], access: tuple[str, ...], text: str = "", about: str = "") -> ChunkRecord:
    return ChunkRecord(
        doc_id=doc_id,
        index=0,
        title=doc_id,
        text=text or f"{doc_id} deploy freeze notes",
        vector=vector,
        about=(about,) if about else (),
        access=access,
    )


# ENG's chunk is nearest the query and holds its words: the tenant-wide top 1 HR must never be handed, nor lose.
QUERY = [1.0, 0.0, 0.0, 0.0]
RECORDS = [
    record("eng-falcon", [1.0, 0.05, 0.0, 0.0], ("eng",), "deploy freeze deploy freeze starts 20 December", "falcon"),
    record("hr-leave", [0.8, 0.6, 0.0, 0.0], ("hr",), "leave requests and the deploy freeze", "falcon"),
    record("handbook", [0.6, 0.0, 0.8, 0.0], (TENANT_OPEN,), "office hours; deploy rules", "falcon"),
]


def docs_of(passages: Sequence[Passage]) -> list[str]:
    return [p.doc_id for p in passages]


async def seeded(store: Any) -> Any:
    for r in RECORDS:
        await store.replace_document(TENANT, r.doc_id, [r])
    return store


async def assert_filtered_inside_each_search(store: Any, *, keyword: bool) -> None:
    assert docs_of(await store.search(TENANT, QUERY, 1, visibility=EVERYTHING)) == ["eng-falcon"]
    assert docs_of(await store.search(TENANT, QUERY, 1, visibility=HR)) == ["hr-leave"]  # not [] (a post-filter)
    assert docs_of(await store.search(TENANT, QUERY, 5, visibility=HR)) == ["hr-leave", "handbook"]
    assert docs_of(await store.search(TENANT, QUERY, 5, visibility=ENG)) == ["eng-falcon", "handbook"]
    linked = await store.linked_search(TENANT, ["falcon"], QUERY, 1, visibility=HR)
    assert docs_of(linked) == ["hr-leave"]
    assert docs_of(await store.linked_search(TENANT, ["falcon"], QUERY, 5, visibility=ENG)) == [
        "eng-falcon",
        "handbook",
    ]
    sales = Visibility.of(["sales"], unset_open=True)  # no document of theirs: the tenant-open one alone
    assert docs_of(await store.search(TENANT, QUERY, 5, visibility=sales)) == ["handbook"]
    if keyword:
        terms = ["deploy", "freeze"]
        assert docs_of(await store.keyword_search(TENANT, terms, QUERY, 1, visibility=EVERYTHING)) == ["eng-falcon"]
        hr = await store.keyword_search(TENANT, terms, QUERY, 1, visibility=HR)
        assert docs_of(hr) == ["hr-leave"]
        assert "eng-falcon" not in docs_of(await store.keyword_search(TENANT, terms, QUERY, 10, visibility=HR))


async def test_lancedb_prefilters_dense_full_text_and_linked_searches(tmp_path: Path) -> None:
    store = await seeded(await LanceVectorStore.open(tmp_path / "db", DIM))
    try:
        await assert_filtered_inside_each_search(store, keyword=True)
        exported = await store.export_chunks(TENANT)
        assert exported is not None
        assert dict(zip(exported.doc_ids, exported.access, strict=True))["eng-falcon"] == ("eng",)
    finally:
        await store.close()


OLD_SCHEMA = pa.schema(
    [
        pa.field("chunk_id", pa.string()),
        pa.field("doc_id", pa.string()),
        pa.field("chunk_index", pa.int32()),
        pa.field("title", pa.string()),
        pa.field("text", pa.string()),
        pa.field("terms", pa.string()),
        pa.field("metadata", pa.string()),
        pa.field("about", pa.list_(pa.string())),
        pa.field("vector", pa.list_(pa.float32(), DIM)),
    ]
)


async def test_a_table_from_before_permissions_reads_as_unset_and_is_migrated_on_its_first_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db"
    path.mkdir()
    db = await lancedb.connect_async(str(path))
    old = {"chunk_id": "memo#0", "doc_id": "memo", "chunk_index": 0, "title": "memo", "text": "an old memo"}
    row = {**old, "terms": "old memo", "metadata": "{}", "about": [], "vector": [1.0, 0.0, 0.0, 0.0]}
    await db.create_table(f"kb_{TENANT}", data=pa.Table.from_pylist([row], schema=OLD_SCHEMA))
    reader = await LanceVectorStore.open(path, DIM)  # a replica that read the table before it was migrated
    writer = await LanceVectorStore.open(path, DIM)
    try:
        open_hr = Visibility.of(["hr"], unset_open=True)
        assert docs_of(await reader.search(TENANT, QUERY, 5, visibility=open_hr)) == ["memo"]
        assert await reader.search(TENANT, QUERY, 5, visibility=HR) == []  # UNSET is closed for this tenant
        await writer.replace_document(TENANT, "eng-falcon", [RECORDS[0]])  # migrates, then writes ENG's page
        # The replica that saw the old schema filters from now on: ENG's page never reaches HR.
        assert docs_of(await reader.search(TENANT, QUERY, 5, visibility=open_hr)) == ["memo"]
        assert docs_of(await reader.search(TENANT, QUERY, 5, visibility=ENG)) == ["eng-falcon"]
        stored = await writer.document_chunks(TENANT, ["memo", "eng-falcon"])
        assert stored is not None
        assert [c.access for c in stored["memo"]] == [(UNSET,)]
        assert [c.access for c in stored["eng-falcon"]] == [("eng",)]
        assert await reader.document_access(TENANT, ["memo", "eng-falcon", "gone"]) == {
            "memo": frozenset({UNSET}),
            "eng-falcon": frozenset({"eng"}),
        }
    finally:
        await reader.close()
        await writer.close()


@pytest.fixture
def fake() -> Iterator[FakePinecone]:
    with running_fake_pinecone(dimension=DIM) as server:
        yield server


@pytest.fixture
async def pinecone(fake: FakePinecone) -> AsyncIterator[PineconeVectorStore]:
    opened = await PineconeVectorStore.open(FAKE_API_KEY, fake.url, "test-index", DIM)
    yield opened
    await opened.close()


async def test_pinecone_filters_by_metadata_inside_the_query(pinecone: PineconeVectorStore, fake: FakePinecone) -> None:
    await seeded(pinecone)
    await assert_filtered_inside_each_search(pinecone, keyword=False)
    assert fake.namespaces[TENANT]["eng-falcon#0"]["metadata"]["access"] == ["eng"]
    # A vector written before permissions carries no access: UNSET, visible only where the tenant keeps UNSET open.
    with fake.lock:
        legacy = dict(fake.namespaces[TENANT]["hr-leave#0"])
        legacy["metadata"] = {k: v for k, v in legacy["metadata"].items() if k != "access"}
        fake.namespaces[TENANT]["memo#0"] = {**legacy, "metadata": {**legacy["metadata"], "doc_id": "memo"}}
    assert "memo" in docs_of(await pinecone.search(TENANT, QUERY, 5, visibility=Visibility.of([], unset_open=True)))
    assert "memo" not in docs_of(await pinecone.search(TENANT, QUERY, 5, visibility=HR))


class CountingFakeEmbedding(DeterministicFakeEmbedding):
    """Deterministic vectors, counting the texts embedded for storage."""

    embedded: int = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return super().embed_documents(texts)


@pytest.mark.parametrize("kind", ["lancedb", "pinecone"])
async def test_changing_only_access_retags_the_stored_chunks_without_embedding(
    kind: str, tmp_path: Path, fake: FakePinecone
) -> None:
    store: Any = (
        await LanceVectorStore.open(tmp_path / "db", DIM)
        if kind == "lancedb"
        else await PineconeVectorStore.open(FAKE_API_KEY, fake.url, "test-index", DIM)
    )
    try:
        embeddings = CountingFakeEmbedding(size=DIM)
        kb = KnowledgeBase(embeddings, store, Chunker(60, 10))
        text = "The deploy freeze starts on 20 December. " * 6  # several chunks
        first = await kb.ingest(TENANT, [NewDocument("falcon", text, "Project Falcon", access=("eng",))])
        assert first.chunks > 1
        embedded = embeddings.embedded
        before = await store.document_chunks(TENANT, ["falcon"])
        moved = await kb.ingest(TENANT, [NewDocument("falcon", text, "Project Falcon", access=("eng", "hr"))])
        after = await store.document_chunks(TENANT, ["falcon"])
        assert moved.retagged == ("falcon",)
        assert embeddings.embedded == embedded
        assert before is not None
        assert after is not None
        assert [c.access for c in after["falcon"]] == [("eng", "hr")] * first.chunks
        # What curation's exports read: the tags the chunks carry now, and nothing for a document not held.
        assert await store.document_access(TENANT, ["falcon", "gone"]) == {"falcon": frozenset({"eng", "hr"})}
        assert await kb.readable(TENANT, ["falcon", "gone"], ENG) == {"falcon"}
        assert await kb.readable(TENANT, ["falcon"], Visibility.of(["sales"], unset_open=True)) == set()
        assert [list(c.vector) for c in after["falcon"]] == [list(c.vector) for c in before["falcon"]]
        assert docs_of(await store.search(TENANT, QUERY, 1, visibility=HR)) == ["falcon"]
    finally:
        await store.close()


# --- the request path: LanceDB, Redis as the cache, the app's own query service ---------------------------------

FREEZE = "When does the deploy freeze for Project Falcon start?"
PARAPHRASE = "When does the deploy freeze for Project Falcon begin?"
LEAVE = "By when must annual leave requests be filed?"
DOCUMENTS = [
    {
        "id": "hr-leave",
        "title": "Annual leave rules",
        "text": "Annual leave requests must be filed by 1 December at the latest.",
        "access": ["hr"],
    },
    {
        "id": "eng-falcon",
        "title": "Project Falcon",
        "text": "The deploy freeze for Project Falcon starts on 20 December and ends on 6 January.",
        "access": ["eng"],
    },
    {
        "id": "handbook",
        "title": "Company handbook",
        "text": "The handbook covers office hours from 9 to 17. Project Falcon is the new billing platform.",
        "access": "tenant",
    },
]
ALLOWED = {"hr": {"hr-leave", "handbook"}, "eng": {"eng-falcon", "handbook"}}


def responder(messages: list[Any], kwargs: dict[str, Any]) -> str:
    """Answers with the first passage; the hop planner always asks for Falcon's freeze (what HR may not read)."""
    hop = {"found": "Project Falcon is the new billing platform", "next_query": "Project Falcon deploy freeze dates"}
    reply = structured_reply(kwargs, {"NextHop": hop})
    return reply if reply is not None else answer_with_first_passage(messages, kwargs)


def every_document(response: QueryResponse) -> set[str]:
    found = {s.id for s in response.sources} | {s.id for s in response.evidence}
    found |= {p.doc_id for p in response.passages or []}
    if response.probe is not None:
        found |= {d.id for d in response.probe.documents}
    return found


# The two readers by the user each request names (their one group is named alike).
USERS = {"hr-key": "hr", "eng-key": "eng"}


@pytest.mark.redis
async def test_two_readers_never_get_each_others_documents_or_answers(make_client: Any, settings: Settings) -> None:
    """Two users of one tenant, named by the chatbot backend's key in the trusted headers (an ingress signed them
    in): what each may read follows their group, through the real identity layer."""
    keys = admin_and_chatbot_keys(TENANT)
    cached = settings.replace(
        redis={"url": REDIS_TEST_URL, "timeout_s": 0.5},
        cache={"prefix": f"test-{uuid.uuid4().hex[:8]}"},
        semantic_cache={"enabled": True},
        access={"api_keys": keys},
        identity={"unset_documents": "closed"},  # as HR and ENG are built: only tagged documents are theirs
    )
    async with make_client(responder, settings_override=cached) as (client, _):
        admin = {"Authorization": "Bearer admin-key"}
        upserted = await client.post("/v1/documents", json={"documents": DOCUMENTS}, headers=admin)
        assert upserted.status_code == 200, upserted.text

        async def ask(query: str, key: str, route: str = "auto") -> QueryResponse:
            body = {"query": query, "route": route, "include_passages": True}
            user = USERS[key]
            headers = {"Authorization": "Bearer chatbot-key", "X-Gateway-User": user, "X-Gateway-User-Groups": user}
            response = await client.post("/v1/query", json=body, headers=headers)
            assert response.status_code == 200, response.text
            return msgspec.convert(response.json(), QueryResponse)

        for route in ("single_hop", "multi_hop", "auto"):
            for key, name in (("hr-key", "hr"), ("eng-key", "eng")):
                response = await ask(FREEZE if route != "auto" else f"{FREEZE} Tell me.", key, route)
                assert every_document(response) <= ALLOWED[name], (route, name, every_document(response))
                assert ("20 December" in response.answer) is (name == "eng"), (route, name, response.answer)

        # The exact cache: HR's answer is cached for HR, and ENG asking the same words is computed for ENG.
        hr_first = await ask(LEAVE, "hr-key")
        eng_first = await ask(LEAVE, "eng-key")
        hr_again = await ask(LEAVE, "hr-key")
        assert (hr_first.cached, eng_first.cached, hr_again.cached) == (False, False, True)
        assert "1 December" in hr_again.answer
        assert "1 December" not in eng_first.answer
        assert every_document(eng_first) <= ALLOWED["eng"]

        # The semantic cache: HR's paraphrase is served HR's answer; ENG's paraphrase never is.
        hr_paraphrase = await ask(PARAPHRASE, "hr-key")
        assert hr_paraphrase.cached, "the paraphrase must hit for HR, or the next assertion proves nothing"
        eng_paraphrase = await ask(PARAPHRASE, "eng-key")  # served ENG's own earlier answer, if any: never HR's
        assert "20 December" in eng_paraphrase.answer
        assert every_document(eng_paraphrase) <= ALLOWED["eng"]

        # Coalesced concurrent requests: a flight is shared by one reader's identical requests only.
        question = "What does the handbook say about Project Falcon and deploy freezes?"
        keys_in_order = ("hr-key", "eng-key", "hr-key", "eng-key")
        concurrent = await asyncio.gather(*(ask(question, key) for key in keys_in_order))
        for response, name in zip(concurrent, ("hr", "eng", "hr", "eng"), strict=True):
            assert every_document(response) <= ALLOWED[name]
        assert concurrent[0].answer == concurrent[2].answer


async def test_access_is_validated_stored_and_reported_by_the_apis(make_client: Any) -> None:
    async with make_client() as (client, _):
        bad = {"tenant": TENANT, "documents": [{"id": "x", "text": "x", "access": ["*admins"]}]}
        refused = await client.post("/v1/documents", json=bad)
        assert refused.status_code == 422
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "'*admins'" in refused.json()["detail"]
        not_a_list = {"tenant": TENANT, "documents": [{"id": "x", "text": "x", "access": "everyone"}]}
        assert (await client.post("/v1/documents", json=not_a_list)).status_code == 422

        form = {"access": "hr, eng"}
        files = [("files", ("policies/leave.md", b"# Leave\n\nRequests are filed by 1 December.", "text/markdown"))]
        uploaded = await client.post(f"/v1/files?tenant={TENANT}", data=form, files=files)
        assert uploaded.status_code == 200, uploaded.text
        listing = (await client.get(f"/v1/files?tenant={TENANT}")).json()["files"]
        assert [(f["file"], f["access"]) for f in listing] == [("policies/leave.md", ["eng", "hr"])]
        refused_upload = await client.post(f"/v1/files?tenant={TENANT}", data={"access": "~x"}, files=files)
        assert refused_upload.status_code == 422

        # The same file again with another access only: re-tagged in place, no new embedding needed.
        again = await client.post(f"/v1/files?tenant={TENANT}", data={"access": "tenant"}, files=files)
        assert again.status_code == 200
        listing = (await client.get(f"/v1/files?tenant={TENANT}")).json()["files"]
        assert [f["access"] for f in listing] == ["tenant"]
        knowledge: KnowledgeBase = client.app.state.knowledge
        found = await knowledge.search(TENANT, "When are leave requests filed?", 3, visibility=ENG)
        assert [p.doc_id for p in found] == ["policies/leave.md"]


# --- recall for a permitted reader ---------------------------------------------------------------------------

GROUPS = 5


def normans() -> tuple[list[NewDocument], list[tuple[str, str]]]:
    """SQuAD v2's Normans paragraphs, paragraph ``i`` in group ``g{i % 5}``; the answerable questions with the
    paragraph that answers them."""
    data = json.loads((DATA / "squad_v2_dev_normans.json").read_text())
    docs: list[NewDocument] = []
    questions: list[tuple[str, str]] = []
    for article in data["data"]:
        for i, paragraph in enumerate(article["paragraphs"]):
            doc_id = f"normans-{i}"
            docs.append(NewDocument(doc_id, paragraph["context"], article["title"], access=(f"g{i % GROUPS}",)))
            questions += [(qa["question"], doc_id) for qa in paragraph["qas"] if not qa.get("is_impossible")]
    return docs, questions


@pytest.mark.skipif(not (DATA / "squad_v2_dev_normans.json").exists(), reason="../shared/data/dev not present")
async def test_a_permitted_readers_recall_is_that_of_a_tenant_holding_only_their_documents(
    tmp_path: Path, embeddings: USEEmbeddings
) -> None:
    docs, questions = normans()
    store = await LanceVectorStore.open(tmp_path / "db", embeddings.dimensions)
    try:
        kb = KnowledgeBase(embeddings, store, Chunker(700, 100))
        await kb.ingest("everyone", docs)
        await kb.ingest("only", [d for d in docs if d.access == ("g0",)])
        reader = Visibility.of(["g0"], unset_open=False)
        mine = {d.id for d in docs if d.access == ("g0",)}
        asked = [(q, doc) for q, doc in questions if doc in mine]
        assert len(asked) >= 15
        shared_hits = own_hits = 0
        for question, doc in asked:
            vector = await kb.embed_query(question)
            shared = await kb.search("everyone", question, 4, visibility=reader, vector=vector)
            own = await kb.search("only", question, 4, visibility=reader, vector=vector)
            assert {p.doc_id for p in shared} <= mine
            # The dense half is the same exact ranking: the filter ran inside the search.
            dense_shared = await kb.dense_search("everyone", question, 4, visibility=reader, vector=vector)
            dense_own = await kb.dense_search("only", question, 4, visibility=reader, vector=vector)
            assert [p.chunk_id for p in dense_shared] == [p.chunk_id for p in dense_own]
            shared_hits += doc in {p.doc_id for p in shared}
            own_hits += doc in {p.doc_id for p in own}
        print(f"recall@4 of group g0's reader: shared tenant {shared_hits}/{len(asked)}, own tenant {own_hits}")
        assert shared_hits == own_hits, (shared_hits, own_hits, len(asked))
    finally:
        await store.close()
