"""Curation within what its askers may read: a gap is diagnosed by searches under its askers' recorded visibility
(its evidence names only documents they could read), an answer held only in documents closed to them is
``restricted`` (said in counts and access tags, no document named), training pairs keep only the ids their asker may
read by the documents' current access, and a resolution reports only documents its re-run's reader may read."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.curation.askers import Asker
from gateway.curation.gaps import Diagnoser, Gap
from gateway.curation.models import AnswerRecord, Feedback, RetrievedDocument
from gateway.curation.store import CurationStore
from gateway.curation.training import Pair, case_visibility, pairs, restricted_ids, within_access
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.vectorstores.base import ChunkRecord
from gateway.settings import CorrectiveSettings, Settings
from pipelines.shared.visibility import TENANT_OPEN, UNSET, Visibility
from routes.calibration import Calibration
from tests.fakes.memory_store import InMemoryVectorStore
from tests.scripted import answer_with_first_passage, structured_reply

TENANT = "acme"
HR = Visibility.of({"hr"}, unset_open=True)
ENG = Visibility.of({"eng"}, unset_open=True)
EVERYTHING = Visibility.everything()
OPEN = Visibility.tenant_only(unset_open=True)

QUESTION = "Who reviews the salary bands?"
EXPECTED = "reviewed every March by the pay committee"
HR_PAY = NewDocument(
    "hr-pay",
    "The salary review codeword is PERIWINKLE. Salary bands are reviewed every March by the pay committee.",
    "Salary review",
    access=("hr",),
)
OTHERS = [
    NewDocument(
        "handbook", "Office hours run from 9 to 17 for everyone at the company.", "Handbook", access=(TENANT_OPEN,)
    ),
    NewDocument("eng-oncall", "The bridge on-call rota changes every Monday.", "On-call rota", access=("eng",)),
]
# Whatever of the HR document an evidence could carry: its id, its title, its words.
HR_WORDS = ("hr-pay", "Salary review", "PERIWINKLE", "committee", "March")


def asker(user: str, view: Visibility) -> Asker:
    return Asker(user, view.key(), None if view.groups is None else tuple(sorted(view.groups)), "header")


def record(
    view: Visibility, *, question: str = QUESTION, expected: str | None = EXPECTED, **extra: Any
) -> AnswerRecord:
    values: dict[str, Any] = {
        "id": "resp_1",
        "tenant": TENANT,
        "trace_id": None,
        "route": "single_hop",
        "reasons": ["negative_feedback"],
        "verdicts": ["incorrect"],
        "top_k": 4,
        "documents": [],
        "cited": [],
        "answer": "I do not know.",
        "question": question,
        "embedding": [1.0, 0.0],
        "created_at": time.time(),
        "expected_answer": expected,
        "asker": asker("someone", view),
    }
    return AnswerRecord(**(values | extra))


def gap_of(rec: AnswerRecord, view: Visibility) -> Gap:
    return Gap(id=f"gap_{rec.id}", tenant=TENANT, records=[rec], visibility=view)


@pytest.fixture
async def curation_store(tmp_path: Path) -> AsyncIterator[CurationStore]:
    store = CurationStore.open(f"sqlite+aiosqlite:///{tmp_path}/curation.db")
    await store.migrate()
    yield store
    await store.close()


@pytest.fixture
async def knowledge(embeddings: USEEmbeddings) -> KnowledgeBase:
    kb = KnowledgeBase(embeddings, InMemoryVectorStore(), Chunker(700, 100))
    await kb.ingest(TENANT, [HR_PAY, *OTHERS])
    return kb


@pytest.fixture
def diagnoser(knowledge: KnowledgeBase, curation_store: CurationStore, calibration: Calibration) -> Diagnoser:
    upper = CorrectiveSettings().thresholds(calibration)["upper"]
    return Diagnoser(knowledge, curation_store, deep_k=20, relevant=upper, model=calibration.relevance)


def named_documents(evidence: dict[str, Any]) -> set[str]:
    found = {p["document"] for p in evidence.get("best_passages", [])}
    return found | {c["document"] for c in evidence.get("changed_documents", [])}


async def test_an_answer_only_a_closed_document_holds_is_restricted_and_named_by_its_access_alone(
    diagnoser: Diagnoser,
) -> None:
    gap = gap_of(record(ENG), ENG)
    await diagnoser.diagnose(gap)
    assert gap.diagnosis == "restricted", gap.evidence
    assert gap.evidence["outside_visibility"] == {"passages": 1, "documents": 1, "access": ["hr"]}
    assert named_documents(gap.evidence) <= {"handbook", "eng-oncall"}
    assert named_documents(gap.evidence)  # it searched ENG's documents, and says which it read
    shown = json.dumps(gap.evidence)
    assert not [word for word in HR_WORDS if word in shown], shown


@pytest.mark.parametrize(("view", "diagnosis"), [(HR, "generation"), (EVERYTHING, "generation")])
async def test_a_reader_who_may_read_the_answer_is_diagnosed_in_their_own_view(
    diagnoser: Diagnoser, view: Visibility, diagnosis: str
) -> None:
    gap = gap_of(record(view), view)
    await diagnoser.diagnose(gap)
    assert gap.diagnosis == diagnosis, gap.evidence
    assert "outside_visibility" not in gap.evidence
    assert "hr-pay" in named_documents(gap.evidence)


async def test_an_answer_the_tenant_does_not_hold_is_a_knowledge_gap_in_every_view(diagnoser: Diagnoser) -> None:
    for view in (ENG, HR, OPEN):
        gap = gap_of(record(view, question="When does the cafeteria open?", expected="opens at noon sharp"), view)
        await diagnoser.diagnose(gap)
        assert gap.diagnosis == "knowledge_gap", (view, gap.evidence)
        assert "outside_visibility" not in gap.evidence


async def test_without_an_expected_answer_the_relevance_scorer_decides_restricted_too(diagnoser: Diagnoser) -> None:
    gap = gap_of(record(ENG, expected=None, question="What is the salary review codeword?"), ENG)
    await diagnoser.diagnose(gap)
    assert gap.diagnosis == "restricted", gap.evidence
    assert gap.evidence["judged_by"] == "relevance_scorer"
    assert gap.evidence["outside_visibility"]["access"] == ["hr"]
    assert not [word for word in HR_WORDS if word in json.dumps(gap.evidence)]


async def test_a_cited_document_taken_from_the_asker_is_not_shown_as_stale(
    diagnoser: Diagnoser, knowledge: KnowledgeBase, curation_store: CurationStore
) -> None:
    """The ENG asker's answer cited the pay page while it was open to the tenant; it is HR's alone now. That
    change is a change (it is recorded), yet the gap must not name the page to a curator reading ENG's gaps: it is
    diagnosed from ENG's view as it is now, where the answer is held only in HR's documents."""
    asked = time.time() - 60
    shared = NewDocument(HR_PAY.id, HR_PAY.text, HR_PAY.title, access=(TENANT_OPEN,))
    await knowledge.ingest(TENANT, [shared])
    cited = RetrievedDocument("hr-pay", "Salary review", 0.8)
    rec = record(ENG, cited=["hr-pay"], documents=[cited], created_at=asked)
    await knowledge.ingest(TENANT, [HR_PAY])  # re-tagged to HR alone
    await curation_store.documents_changed(TENANT, ["hr-pay"])
    gap = gap_of(rec, ENG)
    await diagnoser.diagnose(gap)
    assert gap.diagnosis == "restricted", gap.evidence
    assert "hr-pay" not in json.dumps(gap.evidence)
    # HR still reads it: for them the change is what to look at.
    theirs = gap_of(record(HR, cited=["hr-pay"], documents=[cited], created_at=asked), HR)
    await diagnoser.diagnose(theirs)
    assert theirs.diagnosis == "stale"
    assert named_documents(theirs.evidence) == {"hr-pay"}


async def test_the_knowledge_base_reports_the_access_its_chunks_carry_now(knowledge: KnowledgeBase) -> None:
    assert await knowledge.document_access(TENANT, ["hr-pay", "handbook", "gone"]) == {
        "hr-pay": frozenset({"hr"}),
        "handbook": frozenset({TENANT_OPEN}),
    }
    assert await knowledge.readable(TENANT, ["hr-pay", "handbook", "eng-oncall", "gone"], ENG) == {
        "handbook",
        "eng-oncall",
    }
    assert await knowledge.readable(TENANT, ["hr-pay", "gone"], EVERYTHING) == {"hr-pay", "gone"}
    await knowledge.ingest(TENANT, [NewDocument(HR_PAY.id, HR_PAY.text, HR_PAY.title, access=("eng", "hr"))])
    assert (await knowledge.document_access(TENANT, ["hr-pay"]))["hr-pay"] == frozenset({"eng", "hr"})
    assert await knowledge.readable(TENANT, ["hr-pay"], ENG) == {"hr-pay"}


def _feedback(view: Visibility, cited: list[str], rating: str = "up") -> Feedback:
    return Feedback(
        id="fb_1",
        tenant=TENANT,
        response_id="resp_1",
        trace_id=None,
        rating=rating,  # type: ignore[arg-type]
        comment=None,
        expected_answer=None,
        question=QUESTION,
        documents=[],
        cited=cited,
        created_at=time.time(),
        asker=asker("someone", view),
    )


def test_training_pairs_keep_the_ids_their_asker_may_read_now_and_drop_rows_left_empty() -> None:
    rows = [
        *pairs([], [_feedback(HR, ["hr-pay", "handbook"])], OPEN),
        *pairs([], [_feedback(ENG, ["hr-pay"], "down")], OPEN),
        *pairs([], [_feedback(EVERYTHING, ["hr-pay", "deleted-since"])], OPEN),
    ]
    assert restricted_ids(rows) == ["hr-pay", "handbook"]  # an unrestricted asker's ids need no look-up
    access = {"hr-pay": frozenset({"hr"}), "handbook": frozenset({TENANT_OPEN})}
    kept = list(within_access(rows, access))
    assert [(r["visibility"], r["positive_ids"], r["negative_ids"]) for r in kept] == [
        (HR.key(), ["hr-pay", "handbook"], []),
        ("all", ["hr-pay", "deleted-since"], []),
    ]  # ENG's row named only HR's page: dropped
    # HR's page moved to finance since the answer: HR keeps the handbook; a deleted page is no one's.
    moved = {"hr-pay": frozenset({"finance"}), "handbook": frozenset({TENANT_OPEN})}
    assert next(r["positive_ids"] for r in within_access(rows, moved)) == ["handbook"]
    assert [r["visibility"] for r in within_access(rows, {})] == ["all"]


def test_a_case_stored_before_its_tags_reads_as_no_more_than_every_reader_sees() -> None:
    assert case_visibility({"visibility": "all"}, OPEN) == EVERYTHING
    assert case_visibility({"visibility": OPEN.key()}, OPEN) == OPEN
    assert case_visibility({}, OPEN) == OPEN
    assert case_visibility({"visibility": HR.key()}, OPEN) == Visibility(frozenset({TENANT_OPEN}))
    assert case_visibility({"visibility": HR.key(), "visible_tags": sorted(HR.groups or ())}, OPEN) == HR
    assert case_visibility({"visibility": "all", "visible_tags": None}, OPEN) == EVERYTHING
    pair = Pair({"positive_ids": ["a"], "negative_ids": ["b", "c"]}, HR)
    assert pair.ids == ["a", "b", "c"]
    assert UNSET in (HR.groups or ())  # this tenant keeps unset documents open: HR's tags say so


# --- through the API: an answer's documents re-tagged after it, a resolution's verified documents ----------------

ALICE = {"X-Gateway-User": "alice", "X-Gateway-User-Groups": "hr"}
ALICE_VIEW = HR
PARKING = "What is the parking garage code?"
OLD_PARKING: dict[str, Any] = {
    "id": "hr-parking-old",
    "title": "Parking garage",
    "text": "The parking garage code was 1111 until last year.",
    "access": ["hr"],
}
DOCS: list[dict[str, Any]] = [
    OLD_PARKING,
    {"id": "hr-pay", "title": HR_PAY.title, "text": HR_PAY.text, "access": ["hr"]},
    {"id": "handbook", "title": "Handbook", "text": "Office hours run from 9 to 17 for everyone.", "access": "tenant"},
]
VERIFIED = [
    {
        "id": "hr-parking-2025",
        "title": "Parking garage code",
        "text": "The parking garage code is 4242 from this year.",
        "access": ["hr"],
    },
    {
        "id": "eng-parking-2025",
        "title": "Engineering parking garage code",
        "text": "The parking garage code for the engineering floor is 4242 too.",
        "access": ["eng"],
    },
]


def first_passage(messages: list[Any], kwargs: dict[str, Any]) -> str:
    reply = structured_reply(kwargs)
    return reply if reply is not None else answer_with_first_passage(messages, kwargs)


async def _post(client: AsyncTestClient[Any], path: str, body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    response = await client.post(path, json=body, **extra)
    assert response.status_code in (200, 202), response.text
    found: dict[str, Any] = response.json()
    return found


async def _rows(client: AsyncTestClient[Any]) -> list[dict[str, Any]]:
    response = await client.get("/v1/training-pairs", params={"tenant": TENANT})
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


async def test_pairs_and_a_resolution_name_only_what_the_asker_may_read_now(
    make_client: Callable[..., Any], settings: Settings
) -> None:
    async with make_client(first_passage) as (client, _):
        await _post(client, "/v1/documents", {"tenant": TENANT, "documents": DOCS})
        body = {"tenant": TENANT, "route": "single_hop"}
        pay = await _post(client, "/v1/query", {**body, "query": QUESTION}, headers=ALICE)
        assert "hr-pay" in {s["id"] for s in pay["sources"]}
        await _post(client, "/v1/feedback", {"tenant": TENANT, "response_id": pay["response_id"], "rating": "up"})
        parking = await _post(client, "/v1/query", {**body, "query": PARKING}, headers=ALICE)
        assert "1111" in parking["answer"]
        assert {e["id"] for e in parking["evidence"]} == {"hr-parking-old"}
        rating = {"tenant": TENANT, "response_id": parking["response_id"], "rating": "down", "expected_answer": "4242"}
        await _post(client, "/v1/feedback", rating)
        (up,) = [r for r in await _rows(client) if r["positive_ids"]]
        assert (up["user_id"], up["visibility"], up["positive_ids"]) == ("alice", ALICE_VIEW.key(), ["hr-pay"])

        # After the answers, HR's pay page moves to finance and the old parking page to engineering.
        moved = [{**DOCS[1], "access": ["finance"]}, {**OLD_PARKING, "access": ["eng"]}]
        retagged = await _post(client, "/v1/documents", {"tenant": TENANT, "documents": moved})
        assert sorted(retagged["retagged"]) == ["hr-parking-old", "hr-pay"]
        assert await _rows(client) == []  # alice's rows named only pages she may no longer read: dropped

        gaps = (await client.get("/v1/knowledge-gaps", params={"tenant": TENANT, "user": "alice"})).json()["gaps"]
        (gap,) = [g for g in gaps if PARKING in g["examples"]]
        assert gap["visibility"] == ALICE_VIEW.key()
        resolved = await _post(
            client,
            f"/v1/knowledge-gaps/{gap['id']}/resolution",
            {"tenant": TENANT, "documents": VERIFIED, "rules": [{"kind": "must_contain", "value": "4242"}]},
        )
        assert resolved["closed"], resolved
        (case,) = resolved["cases"]
        assert (case["user_id"], case["visibility"]) == ("alice", ALICE_VIEW.key())
        assert case["visible_tags"] == sorted(ALICE_VIEW.groups or ())
        # The first answer read the old parking page, ENG's now: the case names it no more, nor ENG's new page.
        alice_reads = {"hr-parking-2025", "handbook"}
        before = {d["id"] for d in case["before_documents"]}
        assert before <= alice_reads
        assert before == set()  # it read that page alone
        assert set(case["after_documents"]) <= alice_reads
        assert "hr-parking-2025" in case["after_documents"]
        assert "4242" in case["after"]["answer"]

        (row,) = [r for r in await _rows(client) if r["source"] == "resolution"]
        assert row["question"] == PARKING
        assert row["positive_ids"] == ["hr-parking-2025"]  # ENG's verified page is not alice's to be handed
        assert row["negative_ids"] == []  # what the first answer read is ENG's now
        shown = json.dumps(await _rows(client)) + json.dumps(resolved["cases"])
        assert "hr-parking-old" not in shown
        assert "eng-parking-2025" not in shown


async def test_a_restricted_gap_through_the_api_the_review_page_and_the_gauge(make_client: Callable[..., Any]) -> None:
    emil = {"X-Gateway-User": "emil", "X-Gateway-User-Groups": "eng"}
    async with make_client(first_passage) as (client, _):
        await _post(client, "/v1/documents", {"tenant": TENANT, "documents": DOCS})
        body = {"tenant": TENANT, "route": "single_hop", "query": QUESTION}
        answer = await _post(client, "/v1/query", body, headers=emil)
        assert not {s["id"] for s in answer["sources"]} & {"hr-pay", "hr-parking-old"}
        rating = {"tenant": TENANT, "response_id": answer["response_id"], "rating": "down", "expected_answer": EXPECTED}
        await _post(client, "/v1/feedback", rating)

        listed = await client.get("/v1/knowledge-gaps", params={"tenant": TENANT})
        (gap,) = listed.json()["gaps"]
        assert gap["diagnosis"] == "restricted", gap
        assert gap["visibility"] == Visibility.of({"eng"}, unset_open=True).key()
        assert gap["evidence"]["outside_visibility"] == {"passages": 1, "documents": 1, "access": ["hr"]}
        # The expected answer is the asker's own words; nothing else of HR's page is shown.
        hidden = ("hr-pay", "Salary review", "PERIWINKLE", "hr-parking-old", "1111")
        assert not [word for word in hidden if word in listed.text], listed.text

        sign_in = await client.get("/console/sign-in")
        token = re.search(r'name="csrf-token" content="([^"]+)"', sign_in.text)
        assert token is not None
        await client.post("/console/sign-in", data={"tenant": TENANT, "_csrf_token": token.group(1)})
        page = await client.get("/console/review/", params={"tenant": TENANT})
        assert page.status_code == 200, page.text
        assert 'data-diagnosis="restricted"' in page.text
        assert "1 document(s) these askers may not read" in page.text
        assert "(access: hr)" in page.text
        assert not [word for word in hidden if word in page.text]

        metrics = (await client.get("/metrics")).text
        assert 'gateway_knowledge_gaps_open{diagnosis="restricted"} 1.0' in metrics


async def test_a_document_caught_half_re_tagged_reads_as_what_every_chunk_allows() -> None:
    store = InMemoryVectorStore()
    chunks = [
        ChunkRecord(doc_id="memo", index=0, title="memo", text="a", vector=[1.0, 0.0], access=("eng", "hr")),
        ChunkRecord(doc_id="memo", index=1, title="memo", text="b", vector=[1.0, 0.0], access=("hr",)),
    ]
    await store.replace_document(TENANT, "memo", chunks)
    await store.replace_document(TENANT, "old", [ChunkRecord("old", 0, "old", "c", [0.0, 1.0], access=())])
    assert await store.document_access(TENANT, ["memo", "old"]) == {
        "memo": frozenset({"hr"}),
        "old": frozenset({UNSET}),
    }
