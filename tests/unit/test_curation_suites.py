"""Evaluation suites: stored cases run in the background on request (202, then polled) and after a knowledge change;
run states, history, metric, span, tenant isolation, shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from litestar.testing import AsyncTestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import Field

from gateway.access.keys import hash_key
from gateway.app import create_app
from gateway.curation.schemas import SUITE_PATTERN
from gateway.curation.store import CurationStore
from gateway.curation.suites import INTERRUPTED, SuiteRunner
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import ApiKeyConfig, Settings
from tests.chat_support import bearer
from tests.curation_support import NEW_DOC, OLD_DOC, QUESTION, RULES, TENANT, ingest, relocation_model
from tests.fakes.scripted_chat import ScriptedChatModel

PROBLEM = "application/problem+json"
BROKEN = "壊れた質問"  # a case whose answer the model below cannot give
ACME_ADMIN, GLOBEX_ADMIN = "rgw-acme-suites-admin", "rgw-globex-suites-admin"


class GatedChatModel(ScriptedChatModel):
    """The scripted model, answering only while ``gate`` is set: a test holds a run ``running`` as long as it looks."""

    gate: asyncio.Event = Field(default_factory=asyncio.Event)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        await self.gate.wait()
        return await super()._agenerate(messages, stop, run_manager, **kwargs)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        await self.gate.wait()
        async for chunk in super()._astream(messages, stop, run_manager, **kwargs):
            yield chunk


def breaks_on_one_case(messages: list[BaseMessage], kwargs: dict[str, Any]) -> str:
    """The relocation model, except that the upstream is unreachable for the broken case's question."""
    if any(BROKEN in str(m.content) for m in messages):
        raise openai.APIConnectionError(request=httpx.Request("POST", "http://llm/v1/chat/completions"))
    return relocation_model(messages, kwargs)


async def idle(client: AsyncTestClient[Any]) -> None:
    """Waits for the app's suite runs to end. They run on the app's event loop, which the test client keeps in a
    thread of its own: the wait runs there too, and this loop awaits its outcome."""
    suites: SuiteRunner = client.app.state.curation.suites
    await asyncio.wrap_future(client.blocking_portal.start_task_soon(suites.idle))


async def open_gate(client: AsyncTestClient[Any], model: GatedChatModel) -> None:
    """Lets the model answer (on the app's loop, where its answers wait)."""

    async def open_it() -> None:
        model.gate.set()

    await asyncio.wrap_future(client.blocking_portal.start_task_soon(open_it))


async def add_case(client: AsyncTestClient[Any], question: str = QUESTION, **headers: str) -> None:
    added = await client.post(
        "/v1/eval-suites/office/cases",
        json={"tenant": TENANT, "question": question, "rules": RULES, "reference_answer": NEW_DOC["text"]},
        headers=headers,
    )
    assert added.status_code == 201, added.text


async def start_run(client: AsyncTestClient[Any], **headers: str) -> tuple[dict[str, Any], str]:
    """POSTs a run: the run as the 202 carries it, and where to poll it."""
    started = await client.post("/v1/eval-suites/office/runs", json={"tenant": TENANT}, headers=headers)
    assert started.status_code == 202, started.text
    body: dict[str, Any] = started.json()
    location = started.headers["location"]
    assert location == f"/v1/eval-suites/office/runs/{body['id']}?tenant={TENANT}"
    return body, location


async def poll(client: AsyncTestClient[Any], location: str, **headers: str) -> dict[str, Any]:
    response = await client.get(location, headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def history(client: AsyncTestClient[Any]) -> list[dict[str, Any]]:
    response = await client.get("/v1/eval-suites/office/runs", params={"tenant": TENANT})
    assert response.status_code == 200, response.text
    runs: list[dict[str, Any]] = response.json()["runs"]
    return runs


def keyed(settings: Settings) -> Settings:
    """An admin key of acme and one of globex."""
    keys = [
        ApiKeyConfig(name="acme-admin", key_sha256=hash_key(ACME_ADMIN), tenant="acme", scopes=["query", "admin"]),
        ApiKeyConfig(name="globex-admin", key_sha256=hash_key(GLOBEX_ADMIN), tenant="globex", scopes=["admin"]),
    ]
    return settings.replace(access={"api_keys": keys})


async def test_a_suite_runs_on_request_and_after_each_knowledge_change(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    spans = InMemorySpanExporter()
    overrides = ProviderOverrides(
        chat_model=ScriptedChatModel(responder=relocation_model), embeddings=embeddings, span_exporter=spans
    )
    async with AsyncTestClient(create_app(settings, overrides)) as client:
        await ingest(client, TENANT, [OLD_DOC])
        await add_case(client)

        started, location = await start_run(client)
        assert started["trigger"] == "manual"
        assert started["state"] == "running"
        assert (started["score"], started["finished_at"], started["cases"], started["error"]) == (None, None, [], None)
        await idle(client)
        manual = await poll(client, location)
        assert (manual["id"], manual["state"], manual["error"]) == (started["id"], "done", None)
        assert manual["finished_at"] >= manual["started_at"]
        (case,) = manual["cases"]
        assert [r["kind"] for r in case["rules"]] == ["must_contain", "must_not_contain", "pattern"]
        assert case["judge"]["reason"]
        assert 0.0 <= manual["score"] < 1.0  # the store only knows the old address

        await ingest(client, TENANT, [NEW_DOC])  # a knowledge change: the suite runs again by itself
        await idle(client)
        runs = await history(client)
        assert [(r["trigger"], r["state"]) for r in runs] == [("knowledge_change", "done"), ("manual", "done")]
        assert runs[0]["score"] > manual["score"]  # newest first: the new address is known now

        metrics = (await client.get("/metrics")).text
        assert f'gateway_eval_score{{suite="office"}} {runs[0]["score"]}' in metrics
    suite_spans = [s for s in spans.get_finished_spans() if s.name == "curation.eval_suite"]
    assert [s.attributes["routes.offline.eval.trigger"] for s in suite_spans] == ["manual", "knowledge_change"]  # type: ignore[index]
    assert suite_spans[0].attributes["routes.offline.eval.run"] == started["id"]  # type: ignore[index]


async def test_a_run_is_running_until_its_cases_are_answered_and_is_not_started_twice(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    model = GatedChatModel(responder=relocation_model)
    overrides = ProviderOverrides(chat_model=model, embeddings=embeddings)
    async with AsyncTestClient(create_app(settings, overrides)) as client:
        await ingest(client, TENANT, [OLD_DOC])
        await add_case(client)

        # Two requests at once (a double click): one run, both answered with it. The gate is shut: no answer comes.
        (started, location), (twin, _) = await asyncio.gather(start_run(client), start_run(client))
        assert twin["id"] == started["id"]
        again, _ = await start_run(client)
        assert again["id"] == started["id"]  # the same tenant's suite is running: that run, not a second
        assert (await poll(client, location))["state"] == "running"
        assert [(r["id"], r["state"], r["score"]) for r in await history(client)] == [(started["id"], "running", None)]

        await open_gate(client, model)
        await idle(client)
        done = await poll(client, location)
        assert done["state"] == "done"
        assert done["score"] is not None
        assert len(done["cases"]) == 1
        assert [r["state"] for r in await history(client)] == ["done"]
        later, _ = await start_run(client)  # the first has ended: a new run starts
        assert later["id"] != started["id"]
        await idle(client)
        assert [r["id"] for r in await history(client)] == [later["id"], started["id"]]


async def test_a_case_that_cannot_be_answered_fails_the_run_with_its_reason(
    make_client: Any, settings: Settings
) -> None:
    no_retries = settings.replace(llm_endpoint={"max_retries": 0})
    async with make_client(breaks_on_one_case, settings_override=no_retries) as (client, _):
        await ingest(client, TENANT, [OLD_DOC])
        await add_case(client)
        await add_case(client, f"{BROKEN}: 本社の電話番号は？")

        _, location = await start_run(client)
        await idle(client)
        failed = await poll(client, location)
        metrics = (await client.get("/metrics")).text
    assert failed["state"] == "failed"
    assert failed["score"] is None
    assert failed["finished_at"] is not None
    assert failed["error"].startswith("case case_")
    assert "Upstream provider unavailable" in failed["error"]
    assert [c["question"] for c in failed["cases"]] == [QUESTION]  # the case answered before the broken one is kept
    assert 'gateway_eval_score{suite="office"}' not in metrics  # only a finished run sets the score


async def test_an_unknown_run_or_suite_is_a_404(make_client: Any) -> None:
    async with make_client(relocation_model) as (client, _):
        unknown_suite = await client.post("/v1/eval-suites/missing/runs", json={"tenant": TENANT})
        await ingest(client, TENANT, [OLD_DOC])
        await add_case(client)
        unknown_run = await client.get("/v1/eval-suites/office/runs/run_nope", params={"tenant": TENANT})
        started, _ = await start_run(client)
        await idle(client)
        other_suite = await client.get(f"/v1/eval-suites/other/runs/{started['id']}", params={"tenant": TENANT})
    for response in (unknown_suite, unknown_run, other_suite):
        assert response.status_code == 404, response.text
        assert response.headers["content-type"].startswith(PROBLEM)


async def test_another_tenant_cannot_read_a_run(make_client: Any, settings: Settings) -> None:
    acme, globex = bearer(ACME_ADMIN), bearer(GLOBEX_ADMIN)
    async with make_client(relocation_model, settings_override=keyed(settings)) as (client, _):
        documents = await client.post("/v1/documents", json={"tenant": TENANT, "documents": [OLD_DOC]}, headers=acme)
        assert documents.status_code == 200, documents.text
        await add_case(client, **acme)
        started, location = await start_run(client, **acme)
        await idle(client)
        run_path = location.split("?")[0]
        own = await client.get(run_path, headers=acme)  # the key's tenant, unnamed
        unnamed = await client.get(run_path, headers=globex)  # globex's own runs: it has none
        named = await client.get(location, headers=globex)  # naming acme with globex's key
        globex_history = await client.get("/v1/eval-suites/office/runs", headers=globex)
    assert own.status_code == 200, own.text
    assert own.json()["id"] == started["id"]
    assert unnamed.status_code == 404, unnamed.text
    assert named.status_code == 403, named.text
    assert "tenant" in named.json()["detail"]
    assert globex_history.status_code == 200
    assert globex_history.json()["runs"] == []


async def test_a_run_going_at_shutdown_is_stored_failed(settings: Settings, embeddings: USEEmbeddings) -> None:
    model = GatedChatModel(responder=relocation_model)
    overrides = ProviderOverrides(chat_model=model, embeddings=embeddings)
    async with AsyncTestClient(create_app(settings, overrides)) as client:
        await ingest(client, TENANT, [OLD_DOC])
        await add_case(client)
        started, _ = await start_run(client)  # the gate stays shut: the run is going when the app stops
    store = CurationStore.open(settings.curation.database_url.get_secret_value())
    try:
        run = await store.eval_run(TENANT, "office", started["id"])
    finally:
        await store.close()
    assert run is not None
    assert (run.state, run.error, run.score, run.cases) == ("failed", INTERRUPTED, None, [])
    assert run.finished_at is not None


async def test_a_run_cancelled_before_it_began_is_stored_failed_and_nothing_starts_after_the_stop(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    """The stop comes between a run's start and its task's first step: the task never runs its own code, so the stop
    stores the run's end; after it, a request to run is a 503 and a knowledge change schedules nothing."""
    model = GatedChatModel(responder=relocation_model)
    overrides = ProviderOverrides(chat_model=model, embeddings=embeddings)
    async with AsyncTestClient(create_app(settings, overrides)) as client:
        await ingest(client, TENANT, [OLD_DOC])
        await add_case(client)
        suites: SuiteRunner = client.app.state.curation.suites

        async def start_then_stop() -> str:
            run = await suites.start(TENANT, "office")  # its task is created, not yet started
            await suites.stop()
            suites.schedule(TENANT)  # a knowledge change after the stop
            await suites.idle()  # returns: nothing is going, nothing waits forever
            return run.id

        run_id = await asyncio.wrap_future(client.blocking_portal.start_task_soon(start_then_stop))
        stopped = await poll(client, f"/v1/eval-suites/office/runs/{run_id}?tenant={TENANT}")
        assert (stopped["state"], stopped["error"], stopped["cases"]) == ("failed", INTERRUPTED, [])
        refused = await client.post("/v1/eval-suites/office/runs", json={"tenant": TENANT})
        assert refused.status_code == 503
        assert refused.headers["content-type"].startswith(PROBLEM)
        assert [r["id"] for r in await history(client)] == [run_id]  # the change after the stop ran nothing


async def test_a_suite_name_outside_its_pattern_is_a_400(make_client: Any) -> None:
    case = {"tenant": TENANT, "question": QUESTION}
    async with make_client(relocation_model) as (client, _):
        responses = [
            await client.post(f"/v1/eval-suites/{name}/cases", json=case) for name in ("s" * 65, "ÀèI", "-office")
        ]
        responses += [
            await client.post("/v1/eval-suites/ÀèI/runs", json={"tenant": TENANT}),
            await client.get("/v1/eval-suites/ÀèI/runs", params={"tenant": TENANT}),
            await client.get("/v1/eval-suites/ÀèI/runs/run_x", params={"tenant": TENANT}),
        ]
        schema = (await client.get("/schema/openapi.json")).json()
    for response in responses:
        assert response.status_code == 400, response.text
        assert response.headers["content-type"].startswith(PROBLEM)
    parameters = schema["paths"]["/v1/eval-suites/{suite}/runs"]["post"]["parameters"]
    suite = next(p for p in parameters if p["name"] == "suite")
    assert suite["schema"]["pattern"] == SUITE_PATTERN  # documented, as checked
