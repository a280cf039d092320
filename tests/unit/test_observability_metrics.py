"""``/metrics`` after real requests: per-route counts, cache layers, LLM usage and cost, node timings."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.cache.exact import ExactCache
from gateway.cache.versions import KnowledgeVersions
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.recorder import Telemetry
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.query.schemas import QueryResponse
from gateway.query.steps import SemanticCacheHit
from gateway.settings import CacheSettings, ModelPrice, Settings
from pipelines.shared.events import Evaluate
from pipelines.shared.visibility import Visibility
from tests.scripted import CountedCompute, answer_with_first_passage, events
from tests.unit.corrective_support import K2_QUESTION, OFF_TOPIC, TENANT
from tests.unit.observability_support import ask, parse_exposition, scrape, traced_app, value
from tests.unit.test_cache_exact import FlakyMemory

MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"
ESCALATION = {"from_route": "single_hop", "to_route": "multi_hop", "reason": "retrieval_incorrect"}


async def test_requests_are_counted_per_route_and_cache_use(settings: Settings, embeddings: USEEmbeddings) -> None:
    priced = settings.replace(llm_endpoint={"prices": {settings.llm.model: ModelPrice(input=1.0, output=2.0)}})
    async with traced_app(priced, embeddings) as (client, model, _):
        answers = {
            route: await ask(client, K2_QUESTION if route != "direct" else "Hello there!", route)
            for route in ("direct", "single_hop", "multi_hop")
        }
        again = await ask(client, K2_QUESTION, "single_hop")
        bad = await client.post("/v1/query", json={"tenant": TENANT, "query": "   "})
        samples, _ = await scrape(client)

    assert again["cached"] is True
    assert bad.status_code == 400
    for route, answer in answers.items():
        assert answer["route"] == route
        assert not answer["cached"]
        assert value(samples, "gateway_requests_total", route=route, status="200", cached="false") == 1
        assert value(samples, "gateway_request_duration_seconds_count", route=route, cached="false") == 1
        assert value(samples, "gateway_route_decisions_total", route=route, classifier="override") == 1
    assert value(samples, "gateway_requests_total", route="single_hop", status="200", cached="true") == 1
    assert value(samples, "gateway_requests_total", route="none", status="400", cached="false") == 1
    assert value(samples, "gateway_requests_in_flight") == 0
    # Known label values exist at zero before their first event, so rate() sees that event.
    assert (
        samples[("gateway_route_decisions_total", frozenset({("route", "multi_hop"), ("classifier", "logistic")}))] == 0
    )
    assert samples[("gateway_escalations_total", frozenset(ESCALATION.items()))] == 0

    # Every model call is counted once, on the route that ran it, with its node and the configured model.
    assert value(samples, "gateway_llm_calls_total") == len(model.calls)
    for route, answer in answers.items():
        calls = answer["usage"]["llm_calls"]
        assert value(samples, "gateway_llm_calls_total", route=route, model=MODEL) == calls
        tokens_in = value(samples, "gateway_llm_tokens_total", route=route, kind="input")
        tokens_out = value(samples, "gateway_llm_tokens_total", route=route, kind="output")
        assert (tokens_in, tokens_out) == (answer["usage"]["input_tokens"], answer["usage"]["output_tokens"])
        cost = value(samples, "gateway_cost_usd_total", route=route, model=MODEL)
        assert abs(cost - answer["usage"]["cost_usd"]) < 1e-9
        assert cost > 0
    assert value(samples, "gateway_llm_calls_total", route="direct", node="answer_directly") == 1
    assert value(samples, "gateway_llm_duration_seconds_count", node="answer_directly", model=MODEL) == 1

    # The exact cache: three misses then the repeat's hit; the repeat ran no pipeline node.
    assert value(samples, "gateway_cache_requests_total", layer="exact", result="miss") == 3
    assert value(samples, "gateway_cache_requests_total", layer="exact", result="hit") == 1
    assert value(samples, "gateway_cache_requests_total", layer="exact", result="error") == 0
    assert value(samples, "gateway_node_duration_seconds_count", pipeline="direct", node="answer_directly") == 1
    assert value(samples, "gateway_node_duration_seconds_count", pipeline="single_hop", node="retrieve") == 1
    assert value(samples, "gateway_node_duration_seconds_count", pipeline="corrective", node="retrieve") == 1
    assert value(samples, "gateway_retrieval_verdicts_total", pipeline="single_hop") == 1
    corrective_rounds = sum(isinstance(e, Evaluate) for e in events(answers["multi_hop"]))
    assert value(samples, "gateway_retrieval_verdicts_total", pipeline="corrective") == corrective_rounds


async def test_labels_carry_no_tenant_query_or_trace_id(settings: Settings, embeddings: USEEmbeddings) -> None:
    async with traced_app(settings, embeddings) as (client, _, _):
        answer = await ask(client, K2_QUESTION, "multi_hop")
        samples, _ = await scrape(client)
    label_values = {v for (_, labels) in samples for _, v in labels}
    assert TENANT not in label_values
    assert answer["trace_id"] not in label_values
    assert not any("Kumo" in v or "payload" in v for v in label_values)


async def test_metrics_can_be_switched_off(settings: Settings, embeddings: USEEmbeddings) -> None:
    off = settings.replace(observability={"metrics_enabled": False})
    async with traced_app(off, embeddings) as (client, _, _):
        answer = await ask(client, "Hello there!", "direct")
        response = await client.get("/metrics")
    assert answer["route"] == "direct"
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_readiness_probe_sets_dependency_gauges(client: Any) -> None:
    await client.get("/readyz")
    samples, _ = await scrape(client)
    # An injected chat model has no endpoint to ping, so its check passes; the vector store is local LanceDB.
    assert value(samples, "gateway_dependency_up", dependency="vector_store") == 1
    assert value(samples, "gateway_dependency_up", dependency="llm") == 1


async def test_escalation_is_counted_with_its_reason(settings: Settings, embeddings: USEEmbeddings) -> None:
    async with traced_app(settings, embeddings) as (client, _, _):
        answer = await ask(client, OFF_TOPIC, "single_hop", top_k=2)
        samples, _ = await scrape(client)
    assert answer["escalated_from"] == "single_hop"
    assert answer["route"] == "multi_hop"
    assert value(samples, "gateway_escalations_total", **ESCALATION) == 1
    assert value(samples, "gateway_retrieval_verdicts_total", pipeline="single_hop", verdict="incorrect") == 1
    # Counted once, on the route that answered.
    assert value(samples, "gateway_requests_total", route="multi_hop", status="200") == 1
    assert value(samples, "gateway_requests_total", route="single_hop") == 0


async def test_unreachable_llm_is_counted_as_errors(settings: Settings, embeddings: USEEmbeddings) -> None:
    """The real ChatOpenAI client against a closed port (fixture ``settings``): a 503 and an ``unavailable`` error."""
    app = create_app(settings, ProviderOverrides(embeddings=embeddings))
    async with AsyncTestClient(app) as client:
        response = await client.post("/v1/query", json={"query": "Hello there!", "route": "direct"})
        ready = await client.get("/readyz")
        samples, _ = await scrape(client)
    assert response.status_code == 503
    assert ready.status_code == 200  # degraded, not unready: an LLM outage hits every replica at once
    assert ready.json()["status"] == "degraded"
    assert value(samples, "gateway_requests_total", route="direct", status="503", cached="false") == 1
    labels = {"node": "answer_directly", "model": MODEL, "error": "unavailable"}
    assert value(samples, "gateway_llm_errors_total", **labels) == 1
    assert value(samples, "gateway_llm_calls_total") == 0
    assert value(samples, "gateway_dependency_up", dependency="llm") == 0


class RecordingEvents:
    def __init__(self) -> None:
        self.results: list[tuple[str, str]] = []
        self.lookups: list[str] = []

    def cache_result(self, layer: str, result: str) -> None:
        self.results.append((layer, result))

    @contextmanager
    def cache_lookup(self, layer: str) -> Iterator[None]:
        self.lookups.append(layer)
        yield None


async def test_cache_outage_is_reported_as_errors_and_served_by_computing() -> None:
    backend = FlakyMemory()
    events = RecordingEvents()
    cache = ExactCache(CacheSettings(), backend, KnowledgeVersions(backend), QueryResponse, events=events)
    compute = CountedCompute()
    await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    await cache.drain()  # stored after it was served: the next one is a hit
    await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    backend.down = True
    await cache.get_or_compute(
        tenant="acme", route="auto", query="q", compute=compute, visibility=Visibility.everything()
    )
    assert events.results == [("exact", "miss"), ("exact", "hit"), ("exact", "error")]
    assert compute.calls == 2  # the outage is served by computing, never by failing
    assert events.lookups == ["exact", "exact", "exact"]  # the version is read in the lookup: it failed, traced


def test_abandoned_request_is_not_a_server_error() -> None:
    telemetry = Telemetry(GatewayMetrics(), None)
    with pytest.raises(asyncio.CancelledError), telemetry.request("multi_hop", "q"):
        raise asyncio.CancelledError
    assert telemetry.metrics is not None
    samples, _ = parse_exposition(telemetry.metrics.exposition().decode())
    assert value(samples, "gateway_requests_total", route="multi_hop", status="499") == 1
    assert value(samples, "gateway_requests_in_flight") == 0


async def test_semantic_cache_layer_is_counted(settings: Settings, embeddings: USEEmbeddings) -> None:
    semantic = settings.replace(semantic_cache={"enabled": True})  # on the in-process backend
    leave = {"id": "leave", "title": "Leave", "text": "In 2023 Acme employees got 25 days of annual leave."}
    async with traced_app(semantic, embeddings, answer_with_first_passage) as (client, _, exporter):
        assert (await client.post("/v1/documents", json={"tenant": TENANT, "documents": [leave]})).status_code == 200
        first = await ask(client, "How many days of annual leave did employees get in 2023?", "single_hop")
        exporter.clear()
        paraphrase = await ask(client, "In 2023, how many days of annual leave did employees get?", "single_hop")
        spans = exporter.get_finished_spans()
        samples, _ = await scrape(client)
    assert first["cached"] is False
    assert paraphrase["cached"] is True
    assert isinstance(events(paraphrase)[0], SemanticCacheHit)
    assert value(samples, "gateway_cache_requests_total", layer="semantic", result="miss") == 1
    assert value(samples, "gateway_cache_requests_total", layer="semantic", result="hit") == 1
    assert value(samples, "gateway_cache_requests_total", layer="exact", result="miss") == 2
    assert value(samples, "gateway_requests_total", route="single_hop", cached="true") == 1
    lookups = {(s.attributes or {}).get("gateway.cache.layer"): s for s in spans if s.name == "cache.lookup"}
    assert (lookups["semantic"].attributes or {})["gateway.cache.result"] == "hit"
    assert (lookups["exact"].attributes or {})["gateway.cache.result"] == "miss"
