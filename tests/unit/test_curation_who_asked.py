"""Who asked, through the curation cycle: answers recorded with their reader's user id and visibility, gaps and
training pairs showing and filtering by them, resolution re-runs asking as the question's asker (the recorded view,
not everything), and evaluation suites asking as their ``run_as`` user, or as nobody. What the re-runs and runs see is
the other end's (document access filters by the reader): here the reader the query service is handed is asserted."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from litestar.testing import AsyncTestClient

from gateway.access.identity import Identity, Reader
from gateway.curation.askers import AskedBy, Asker, RunAs, run_as
from gateway.curation.models import AnswerRecord, RetrievedDocument
from gateway.curation.records import AnswerRecorder
from gateway.curation.store import CurationStore
from gateway.errors import InvalidReaderError
from gateway.query.schemas import QueryRequest, QueryResponse
from gateway.settings import Settings
from pipelines.shared.visibility import Visibility
from tests.curation_support import NEW_DOC, OLD_DOC, OTHER_DOCS, QUESTION, RULES, TENANT, ingest, relocation_model
from tests.scripted import query_response
from tests.unit.test_curation_suites import idle

PROBLEM = "application/problem+json"
ALICE = {"X-Gateway-User": "alice", "X-Gateway-User-Groups": "hr, finance"}
ALICE_VIEW = Visibility.of({"hr", "finance"}, unset_open=True)  # the tenant's default policy: unset documents open
TENANT_OPEN = Visibility.tenant_only(unset_open=True)

Seen = list[tuple[str, Reader | None]]


def spy_on_fresh_answers(client: AsyncTestClient[Any], monkeypatch: pytest.MonkeyPatch) -> Seen:
    """Every fresh answer the curation cycle asks of the app's query service, with the reader it names."""
    service = client.app.state.query_service
    real = service.answer_fresh
    seen: Seen = []

    async def spying(request: QueryRequest, *, reader: Reader | None = None) -> QueryResponse:
        seen.append((request.query, reader))
        response: QueryResponse = await real(request, reader=reader)
        return response

    monkeypatch.setattr(service, "answer_fresh", spying)
    return seen


async def ask_and_rate_down(client: AsyncTestClient[Any], headers: dict[str, str]) -> str:
    asked = await client.post(
        "/v1/query", json={"query": QUESTION, "tenant": TENANT, "route": "single_hop"}, headers=headers
    )
    assert asked.status_code == 200, asked.text
    response_id: str = asked.json()["response_id"]
    rated = await client.post(
        "/v1/feedback",
        json={
            "tenant": TENANT,
            "response_id": response_id,
            "rating": "down",
            "expected_answer": "東京都渋谷区神南2-3-4",
        },
    )
    assert rated.json()["recorded"], rated.text
    return response_id


async def open_gaps(client: AsyncTestClient[Any], **params: str) -> list[dict[str, Any]]:
    response = await client.get("/v1/knowledge-gaps", params={"tenant": TENANT, **params})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["gaps"]
    return found


async def pairs(client: AsyncTestClient[Any], **params: str) -> list[dict[str, Any]]:
    response = await client.get("/v1/training-pairs", params={"tenant": TENANT, **params})
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


async def test_gaps_show_who_asked_filter_by_them_and_re_run_each_question_as_its_asker(
    make_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_client(relocation_model) as (client, _):
        await ingest(client, TENANT, [OLD_DOC, *OTHER_DOCS])
        by_alice = await ask_and_rate_down(client, ALICE)
        by_nobody = await ask_and_rate_down(client, {})

        # One question, asked in two views: two gaps, each of one visibility (what is missing depends on what the
        # asker can see); the same size, so the latest asked comes first.
        nobodys, alices = await open_gaps(client)
        assert [(r["id"], r["user_id"], r["visibility"]) for r in alices["records"]] == [
            (by_alice, "alice", ALICE_VIEW.key())
        ]
        assert [(r["id"], r["user_id"], r["visibility"]) for r in nobodys["records"]] == [
            (by_nobody, None, TENANT_OPEN.key())
        ]
        assert (alices["visibility"], nobodys["visibility"]) == (ALICE_VIEW.key(), TENANT_OPEN.key())
        assert (alices["id"], nobodys["id"]) == (f"gap_{by_alice}", f"gap_{by_nobody}")
        assert [g["id"] for g in await open_gaps(client, user="alice")] == [alices["id"]]
        assert await open_gaps(client, user="bob") == []
        assert [g["id"] for g in await open_gaps(client, visibility=TENANT_OPEN.key())] == [nobodys["id"]]
        assert await open_gaps(client, visibility="all") == []
        assert await open_gaps(client, user="alice", visibility=TENANT_OPEN.key()) == []  # both must hold
        bad = await client.get("/v1/knowledge-gaps", params={"tenant": TENANT, "visibility": "everything"})
        assert bad.status_code == 400

        seen = spy_on_fresh_answers(client, monkeypatch)
        cases = []
        for gap in (alices, nobodys):
            resolved = await client.post(
                f"/v1/knowledge-gaps/{gap['id']}/resolution",
                json={"tenant": TENANT, "documents": [NEW_DOC], "rules": RULES},
            )
            assert resolved.status_code == 200, resolved.text
            assert resolved.json()["closed"]
            cases += resolved.json()["cases"]
        # Each gap's question re-run once, as its asker, never as everything.
        ((_, alice), (_, nobody)) = seen
        assert alice is not None
        assert nobody is not None
        assert (alice.user_id, alice.visibility, alice.groups, alice.source) == (
            "alice",
            ALICE_VIEW,
            frozenset({"hr", "finance"}),
            "header",
        )
        assert nobody == client.app.state.identity.nobody
        assert [(c["user_id"], c["visibility"]) for c in cases] == [
            ("alice", ALICE_VIEW.key()),
            (None, TENANT_OPEN.key()),
        ]

        rows = await pairs(client)
        assert {(r["source"], r["user_id"], r["visibility"]) for r in rows} == {
            ("resolution", "alice", ALICE_VIEW.key()),
            ("resolution", None, TENANT_OPEN.key()),
            ("feedback", "alice", ALICE_VIEW.key()),
            ("feedback", None, TENANT_OPEN.key()),
        }
        alices_rows = await pairs(client, user="alice")
        assert {(r["source"], r["user_id"]) for r in alices_rows} == {("resolution", "alice"), ("feedback", "alice")}
        assert {r["user_id"] for r in await pairs(client, visibility=TENANT_OPEN.key())} == {None}
        assert await pairs(client, user="bob") == []


async def test_a_chat_answer_is_recorded_with_the_user_it_was_for(make_client: Callable[..., Any]) -> None:
    """Chat completions reach the recorder through the same answer path: the reader goes with the answer."""
    async with make_client(relocation_model) as (client, _):
        await ingest(client, TENANT, [OLD_DOC])
        chat = await client.post(
            "/v1/chat/completions",
            json={
                "model": "gateway-single-hop",
                "tenant": TENANT,
                "messages": [{"role": "user", "content": QUESTION}],
            },
            headers={"X-Gateway-User": "bob", "X-Gateway-User-Groups": "sales"},
        )
        assert chat.status_code == 200, chat.text
        response_id = chat.json()["gateway"]["response_id"]
        rated = await client.post("/v1/feedback", json={"tenant": TENANT, "response_id": response_id, "rating": "down"})
        assert rated.json()["recorded"], rated.text
        (gap,) = await open_gaps(client, user="bob")
        assert [(r["id"], r["user_id"], r["visibility"]) for r in gap["records"]] == [
            (response_id, "bob", Visibility.of({"sales"}, unset_open=True).key())
        ]


def _recorded(record_id: str, tenant: str, asker: Asker) -> AnswerRecord:
    return AnswerRecord(
        id=record_id,
        tenant=tenant,
        trace_id=None,
        route="single_hop",
        reasons=["abstained"],
        verdicts=["incorrect"],
        top_k=4,
        documents=[RetrievedDocument("office-2019", "本社オフィスの所在地", 0.4)],
        cited=[],
        answer="わかりません。",
        question=QUESTION,
        embedding=[1.0, 0.0],
        created_at=time.time(),
        asker=asker,
    )


@pytest.mark.parametrize(
    ("asker", "expected"),
    [
        # The view recorded, exactly: no unset tag although the tenant's policy now opens unset documents.
        (Asker("dave", Visibility(frozenset({"*", "legal"})).key(), ("*", "legal"), "token"), {"*", "legal"}),
        (Asker("root", "all", None, "header"), None),  # an unrestricted reader's question is re-run unrestricted
        (Asker(), {"*", "~"}),  # recorded before readers were known: tenant-open, not everything
    ],
)
async def test_a_resolution_re_runs_a_question_in_the_view_recorded_with_it(
    make_client: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
    asker: Asker,
    expected: set[str] | None,
) -> None:
    store = CurationStore.open(settings.curation.database_url.get_secret_value())
    try:
        await store.migrate()
        await store.add_records([_recorded("resp_recorded", "legal", asker)])
    finally:
        await store.close()
    async with make_client(relocation_model) as (client, _):
        (gap,) = (await client.get("/v1/knowledge-gaps", params={"tenant": "legal"})).json()["gaps"]
        assert [(r["user_id"], r["visibility"]) for r in gap["records"]] == [(asker.user_id, asker.key(TENANT_OPEN))]
        seen = spy_on_fresh_answers(client, monkeypatch)
        resolved = await client.post(
            f"/v1/knowledge-gaps/{gap['id']}/resolution",
            json={"tenant": "legal", "documents": [NEW_DOC], "rules": RULES},
        )
        assert resolved.status_code == 200, resolved.text
    ((question, reader),) = seen
    assert question == QUESTION
    assert reader is not None
    assert reader.user_id == asker.user_id
    assert reader.visibility.groups == (None if expected is None else frozenset(expected))


async def _put_suite(client: AsyncTestClient[Any], body: dict[str, Any]) -> Any:
    return await client.put("/v1/eval-suites/office", json={"tenant": TENANT, **body})


async def _run(client: AsyncTestClient[Any], body: dict[str, Any] | None = None) -> dict[str, Any]:
    started = await client.post("/v1/eval-suites/office/runs", json={"tenant": TENANT, **(body or {})})
    assert started.status_code == 202, started.text
    await idle(client)
    done = await client.get(started.headers["location"])
    run: dict[str, Any] = done.json()
    assert run["state"] == "done", run
    assert run["run_as"] == started.json()["run_as"]
    return run


async def test_a_suite_asks_its_cases_as_its_run_as_user_or_as_nobody(
    make_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_client(relocation_model) as (client, _):
        identity: Identity = client.app.state.identity
        await ingest(client, TENANT, [OLD_DOC])
        await idle(client)  # the ingest's knowledge-change run (of no case yet) is over before a case is added
        added = await client.post(
            "/v1/eval-suites/office/cases", json={"tenant": TENANT, "question": QUESTION, "rules": RULES}
        )
        assert added.status_code == 201, added.text
        seen = spy_on_fresh_answers(client, monkeypatch)

        plain = await _run(client)  # no run_as anywhere: the reader of no user
        assert plain["run_as"] is None
        assert seen.pop() == (QUESTION, identity.nobody)
        assert (await client.get("/v1/eval-suites/office", params={"tenant": TENANT})).json()["run_as"] is None

        put = await _put_suite(client, {"run_as": {"user_id": "carol", "groups": ["ops", "eng", "eng"]}})
        assert put.status_code == 200, put.text
        carol = {"user_id": "carol", "groups": ["eng", "ops"]}
        assert put.json() == {"tenant": TENANT, "suite": "office", "run_as": carol}
        assert (await client.get("/v1/eval-suites/office", params={"tenant": TENANT})).json()["run_as"] == carol
        assert (await _run(client))["run_as"] == carol
        assert seen.pop() == (QUESTION, identity.of("carol", frozenset({"eng", "ops"}), "header"))

        erin = await _run(client, {"run_as": {"user_id": "erin"}})  # the request's user, for this run only
        assert erin["run_as"] == {"user_id": "erin", "groups": []}
        assert seen.pop() == (QUESTION, identity.of("erin", frozenset(), "header"))

        await ingest(client, TENANT, [NEW_DOC])  # a knowledge change runs the suite as its run_as user too
        await idle(client)
        runs = (await client.get("/v1/eval-suites/office/runs", params={"tenant": TENANT})).json()["runs"]
        assert (runs[0]["trigger"], runs[0]["run_as"]) == ("knowledge_change", carol)
        assert seen.pop() == (QUESTION, identity.of("carol", frozenset({"eng", "ops"}), "header"))
        assert [r["run_as"] for r in runs[1:]] == [{"user_id": "erin", "groups": []}, carol, None]

        cleared = await _put_suite(client, {"run_as": None})
        assert cleared.json()["run_as"] is None
        assert (await _run(client))["run_as"] is None
        assert seen.pop() == (QUESTION, identity.nobody)
        assert seen == []


@pytest.mark.parametrize(
    "named",
    [
        {"user_id": "mallory", "groups": ["*"]},
        {"user_id": "mallory", "groups": ["*admins"]},
        {"user_id": "mallory", "groups": ["eng", "~unset"]},
        {"user_id": "mallory", "groups": [""]},
        {"user_id": "mallory", "groups": ["g" * 257]},
        {"user_id": "   "},
        {"user_id": "u" * 257},
    ],
)
async def test_a_run_as_the_identity_module_would_refuse_is_a_422(
    make_client: Callable[..., Any], named: dict[str, Any]
) -> None:
    async with make_client(relocation_model) as (client, _):
        await ingest(client, TENANT, [OLD_DOC])
        await idle(client)
        await client.post("/v1/eval-suites/office/cases", json={"tenant": TENANT, "question": QUESTION, "rules": []})
        for response in (
            await _put_suite(client, {"run_as": named}),
            await client.post("/v1/eval-suites/office/runs", json={"tenant": TENANT, "run_as": named}),
        ):
            assert response.status_code == 422, response.text
            assert response.headers["content-type"].startswith(PROBLEM)
            problem = response.json()
            assert problem["code"] == "invalid_reader"
            assert problem["field"].startswith("run_as.")
        assert (await client.get("/v1/eval-suites/office", params={"tenant": TENANT})).json()["run_as"] is None
        history = await client.get("/v1/eval-suites/office/runs", params={"tenant": TENANT})
        assert history.json()["runs"] == []  # nothing ran as a user no request could be


def test_run_as_keeps_the_groups_sorted_and_distinct_and_refuses_reserved_names() -> None:
    assert run_as(" carol ", ["ops", " eng", "ops"]) == RunAs("carol", ("eng", "ops"))
    with pytest.raises(InvalidReaderError, match="reserved"):
        run_as("carol", ["*"])
    # Keycloak's group paths read as the groups they name, as a user's do in tokens and trusted headers.
    assert run_as("carol", ["/eng/platform", "eng/platform", "/ops"]) == RunAs("carol", ("eng/platform", "ops"))
    for named in ("//eng", "/*", "/~"):
        with pytest.raises(InvalidReaderError, match="is not a group name"):
            run_as("carol", [named])
    with pytest.raises(InvalidReaderError, match="at most 512"):
        run_as("carol", [f"g{i}" for i in range(513)])


def test_a_filter_by_who_asked_reads_unknown_askers_as_tenant_open() -> None:
    unknown = Asker()
    assert AskedBy.of(None, None) is None
    assert AskedBy(visibility_key=TENANT_OPEN.key()).matches(unknown, TENANT_OPEN)
    assert not AskedBy(visibility_key="all").matches(unknown, TENANT_OPEN)
    assert not AskedBy(user_id="alice").matches(unknown, TENANT_OPEN)
    alice = Asker.of(Reader("alice", frozenset({"hr"}), ALICE_VIEW, "token"))
    assert AskedBy("alice", ALICE_VIEW.key()).matches(alice, TENANT_OPEN)


async def test_the_recorder_keeps_the_reader_of_an_answer_that_needs_a_human(tmp_path: Path) -> None:
    store = CurationStore.open(f"sqlite+aiosqlite:///{tmp_path}/curation.db")

    async def embed(text: str) -> list[float]:
        return [1.0, 0.0]

    try:
        await store.migrate()
        recorder = AnswerRecorder(store, embed, queue_size=10, recent=10)
        writer = asyncio.create_task(recorder.run())
        request = QueryRequest(query="where is the office?", tenant=TENANT)
        reader = Reader("alice", frozenset({"hr", "finance"}), ALICE_VIEW, "token")
        answered = query_response("わかりません。", abstained=True)
        recorder.observe(request, msgspec.structs.replace(answered, response_id="resp_a"), reader)
        recorder.observe(request, msgspec.structs.replace(answered, response_id="resp_b"))  # an in-process caller
        await recorder.drain()
        writer.cancel()
        a = await store.find_record(response_id="resp_a", trace_id=None)
        b = await store.find_record(response_id="resp_b", trace_id=None)
        assert a is not None
        assert b is not None
        assert a.asker == Asker("alice", ALICE_VIEW.key(), tuple(sorted(ALICE_VIEW.groups or ())), "token")
        assert a.asker.reader(Reader(None, frozenset(), TENANT_OPEN, "none")) == reader
        assert b.asker == Asker()
    finally:
        await store.close()
