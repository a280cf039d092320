"""Evaluation suites: stored cases run on demand and after a knowledge change, history, metric, span."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar.testing import AsyncTestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import Settings
from tests.curation_support import NEW_DOC, OLD_DOC, QUESTION, RULES, TENANT, ingest, relocation_model
from tests.fakes.scripted_chat import ScriptedChatModel


async def _history(client: AsyncTestClient[Any]) -> list[dict[str, Any]]:
    response = await client.get("/v1/eval-suites/office/runs", params={"tenant": TENANT})
    assert response.status_code == 200, response.text
    runs: list[dict[str, Any]] = response.json()["runs"]
    return runs


async def test_a_suite_runs_on_demand_and_after_each_knowledge_change(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    spans = InMemorySpanExporter()
    overrides = ProviderOverrides(
        chat_model=ScriptedChatModel(responder=relocation_model), embeddings=embeddings, span_exporter=spans
    )
    async with AsyncTestClient(create_app(settings, overrides)) as client:
        await ingest(client, TENANT, [OLD_DOC])
        added = await client.post(
            "/v1/eval-suites/office/cases",
            json={"tenant": TENANT, "question": QUESTION, "rules": RULES, "reference_answer": NEW_DOC["text"]},
        )
        assert added.status_code == 201, added.text

        ran = await client.post("/v1/eval-suites/office/runs", json={"tenant": TENANT})
        assert ran.status_code == 200, ran.text
        manual = ran.json()
        assert manual["trigger"] == "manual"
        (case,) = manual["cases"]
        assert [r["kind"] for r in case["rules"]] == ["must_contain", "must_not_contain", "pattern"]
        assert case["judge"]["reason"]
        assert 0.0 <= manual["score"] < 1.0  # the store only knows the old address

        await ingest(client, TENANT, [NEW_DOC])  # a knowledge change: the suite runs again by itself
        for _ in range(200):
            runs = await _history(client)
            if any(r["trigger"] == "knowledge_change" for r in runs):
                break
            await asyncio.sleep(0.05)
        assert [r["trigger"] for r in runs] == ["knowledge_change", "manual"]  # newest first

        metrics = (await client.get("/metrics")).text
        assert f'gateway_eval_score{{suite="office"}} {runs[0]["score"]}' in metrics
    suite_spans = [s for s in spans.get_finished_spans() if s.name == "curation.eval_suite"]
    assert [s.attributes["gateway.eval.trigger"] for s in suite_spans] == ["manual", "knowledge_change"]  # type: ignore[index]


async def test_running_an_unknown_suite_is_a_404(make_client: Any) -> None:
    async with make_client(relocation_model) as (client, _):
        response = await client.post("/v1/eval-suites/missing/runs", json={"tenant": TENANT})
        assert response.status_code == 404
