"""The span tree of one request, recorded with the SDK's in-memory exporter; JSON logs carry its trace id."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.observability.logs import JsonFormatter
from gateway.observability.recorder import Telemetry
from gateway.observability.tracing import build_tracer_provider
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import Settings
from tests.scripted import events
from tests.unit.corrective_support import (
    DOCS,
    K2_ANSWER,
    K2_INVENTED,
    K2_QUESTION,
    SUPPORTED,
    Script,
    doubted,
    unsupported,
)
from tests.unit.observability_support import HEX32, ask, by_name, parent_of, scrape, traced_app, value

MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"
GEN_AI = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
)


# The LLM call's node name (``gateway.node`` of its span) -> the graph node that makes it.
NODE_OF = {
    "grade_document": {"evaluate"},
    "answer_plainly": {"answer_plainly"},
    "plan_hop": {"plan_hop"},
    "rewrite_query": {"rewrite_query"},
    "generate": {"generate"},
    "check_grounded": {"check_grounded"},
    "check_useful": {"check_useful"},
}


def without_subtree(spans: tuple[ReadableSpan, ...], name: str) -> tuple[ReadableSpan, ...]:
    """``spans`` less every span named ``name`` and all its descendants."""
    dropped = {s.context.span_id for s in spans if s.name == name and s.context is not None}
    changed = True
    while changed:
        below = {s.context.span_id for s in spans if s.context and s.parent and s.parent.span_id in dropped}
        changed = not below <= dropped
        dropped |= below
    return tuple(s for s in spans if s.context is None or s.context.span_id not in dropped)


def one(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    found = by_name(spans, name)
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def invented_then_supported() -> Script:
    """The first draft invents a payload and the critic says so; the regenerated answer is supported."""
    return Script(answers=[K2_INVENTED, K2_ANSWER], grounded=[unsupported(K2_INVENTED), SUPPORTED])


async def test_multi_hop_request_span_tree(settings: Settings, embeddings: USEEmbeddings) -> None:
    async with traced_app(settings, embeddings, invented_then_supported()) as (client, model, exporter):
        answer = await ask(client, K2_QUESTION, "multi_hop")
        # The rejected draft makes the answer one a curator should see: it is recorded after the response, in
        # the same trace under a span of its own. The request's tree is everything but that subtree.
        for _ in range(250):
            if by_name(exporter.get_finished_spans(), "curation.record"):
                break
            await asyncio.sleep(0.02)
        spans = without_subtree(exporter.get_finished_spans(), "curation.record")
        assert len(spans) < len(exporter.get_finished_spans())  # the record was written, and left out
        samples, _ = await scrape(client)

    assert answer["answer"] == K2_ANSWER
    assert doubted(K2_INVENTED) in events(answer)
    assert HEX32.match(answer["trace_id"])
    assert {format(s.context.trace_id, "032x") for s in spans if s.context} == {answer["trace_id"]}

    server = one(spans, "POST /v1/query")
    assert server.kind == SpanKind.SERVER
    assert server.parent is None
    assert server.attributes is not None
    assert server.attributes["http.response.status_code"] == 200
    request = one(spans, "gateway.answer")
    assert parent_of(spans, request) is server
    assert request.attributes is not None
    assert request.attributes["gateway.route"] == "multi_hop"
    lookups = by_name(spans, "cache.lookup")
    assert {s.attributes["gateway.cache.layer"] for s in lookups if s.attributes} == {"exact", "embedding"}
    assert all(parent_of(spans, s) is request for s in lookups)
    assert all(s.attributes and s.attributes["gateway.cache.result"] == "miss" for s in lookups)
    assert parent_of(spans, one(spans, "route_query")) is request
    route = one(spans, "route multi_hop")
    assert parent_of(spans, route) is request

    # One span per node run, each a child of the route; the steps say which nodes ran.
    node_spans = [s for s in spans if s.name.startswith("corrective.")]
    assert node_spans
    assert all(parent_of(spans, s) is route for s in node_spans)
    assert len(by_name(spans, "corrective.generate")) == 2  # the regeneration is a second run of the node
    retrieve = one(spans, "corrective.retrieve")
    assert retrieve.attributes is not None
    assert retrieve.attributes["gateway.retrieval.documents"] == 5
    evaluate = by_name(spans, "corrective.evaluate")[0]
    assert evaluate.attributes is not None
    assert evaluate.attributes["gateway.retrieval.verdict"] == "correct"

    # One CLIENT span per model call, under the node that made it, with the GenAI attributes.
    llm_spans = by_name(spans, f"chat {MODEL}")
    assert len(llm_spans) == len(model.calls) == answer["usage"]["llm_calls"] >= 3
    for span in llm_spans:
        assert span.kind == SpanKind.CLIENT
        assert span.attributes is not None
        assert all(key in span.attributes for key in GEN_AI)
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.provider.name"] == "openai"
        assert span.attributes["gen_ai.request.model"] == MODEL
        node = parent_of(spans, span)
        assert node is not None
        assert node.parent is not None
        assert parent_of(spans, node) is route
        assert node.attributes is not None
        assert node.attributes["gateway.node"] in NODE_OF[span.attributes["gateway.node"]]
    assert (
        sum(s.attributes["gen_ai.usage.input_tokens"] for s in llm_spans if s.attributes)
        == (answer["usage"]["input_tokens"])
    )

    # Privacy by default: neither the question nor a document nor the answer is in any attribute.
    texts = [str(v) for s in spans for v in (s.attributes or {}).values()]
    assert not any("Kumo" in t or "payload" in t for t in texts)

    # The loop and the failed critique are counted too.
    assert value(samples, "gateway_groundedness_failures_total") == 1
    assert value(samples, "gateway_corrective_loops_total", reason="unsupported_answer") == 1
    # The invented draft's one sentence, withheld by the gate and confirmed by the critic.
    assert value(samples, "gateway_sentences_withheld_total", route="multi_hop", reason="unsupported") == 1


async def test_content_goes_into_spans_only_when_opted_in(settings: Settings, embeddings: USEEmbeddings) -> None:
    opted_in = settings.replace(observability={"trace_include_content": True})
    async with traced_app(opted_in, embeddings) as (client, _, exporter):
        await ask(client, K2_QUESTION, "single_hop")
        spans = exporter.get_finished_spans()
    request = one(spans, "gateway.answer")
    assert request.attributes is not None
    assert request.attributes["gateway.query"] == K2_QUESTION
    llm = one(spans, f"chat {MODEL}")
    assert llm.attributes is not None
    assert K2_QUESTION in str(llm.attributes["gen_ai.input.messages"])


async def test_each_answer_logs_one_json_line_with_its_trace_id(settings: Settings, embeddings: USEEmbeddings) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("gateway.requests")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        async with traced_app(settings, embeddings) as (client, _, _):
            answer = await ask(client, "Hello there!", "direct")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    (line,) = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert line["trace_id"] == answer["trace_id"]
    assert line["route"] == "direct"
    assert line["status"] == 200
    assert line["cached"] is False
    assert line["duration_ms"] > 0
    assert "Hello" not in json.dumps(line)  # no query text in logs either


async def test_caller_trace_context_is_continued(settings: Settings, embeddings: USEEmbeddings) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    async with traced_app(settings, embeddings) as (client, _, exporter):
        response = await client.post(
            "/v1/query",
            json={"tenant": "acme", "query": "Hello there!", "route": "direct"},
            headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
        )
        spans = exporter.get_finished_spans()
    assert response.json()["trace_id"] == trace_id == response.headers["x-trace-id"]
    server = one(spans, "POST /v1/query")
    assert server.parent is not None
    assert format(server.parent.span_id, "016x") == "00f067aa0ba902b7"


async def test_failed_request_is_traced_and_counted(settings: Settings, embeddings: USEEmbeddings) -> None:
    async with traced_app(settings, embeddings) as (client, _, exporter):
        response = await client.post("/v1/query", json={"tenant": "acme", "query": "x" * 5000})
        spans = exporter.get_finished_spans()
        samples, _ = await scrape(client)
    assert response.status_code == 400
    assert HEX32.match(response.headers["x-trace-id"])
    server = one(spans, "POST /v1/query")
    assert server.attributes is not None
    assert server.attributes["http.response.status_code"] == 400
    assert value(samples, "gateway_requests_total", route="none", status="400") == 1


async def test_tracing_can_be_switched_off(settings: Settings, embeddings: USEEmbeddings) -> None:
    off = settings.replace(observability={"tracing_enabled": False})
    async with traced_app(off, embeddings) as (client, _, exporter):
        response = await client.post("/v1/query", json={"tenant": "acme", "query": "Hello there!", "route": "direct"})
        spans = exporter.get_finished_spans()
        samples, _ = await scrape(client)
    assert response.status_code == 200
    assert response.json()["trace_id"] is None
    assert "x-trace-id" not in response.headers
    assert spans == ()
    assert value(samples, "gateway_requests_total", route="direct", status="200") == 1


def test_json_log_lines_carry_the_trace_id() -> None:
    provider = build_tracer_provider(environ={})
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.observability.json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with provider.get_tracer("test").start_as_current_span("work") as span:
            logger.warning("cache degraded: %s", "timeout", extra={"layer": "exact"})
        logger.warning("outside any span")
    finally:
        logger.removeHandler(handler)
        provider.shutdown()
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert inside["span_id"] == format(span.get_span_context().span_id, "016x")
    assert inside["message"] == "cache degraded: timeout"
    assert inside["level"] == "WARNING"
    assert inside["layer"] == "exact"
    assert "trace_id" not in outside


async def test_route_decision_span_carries_the_probe_signals_without_text(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    async with traced_app(settings, embeddings) as (client, _, exporter):
        await ask(client, K2_QUESTION)
        spans = exporter.get_finished_spans()
    decision = one(spans, "route_query")
    attributes = dict(decision.attributes or {})
    assert attributes["gateway.route.probe.passages"] == len(DOCS)  # fewer chunks than the probe depth
    assert 0.0 < float(attributes["gateway.route.probe.top_score"]) <= 1.0
    assert {"best_coverage", "union_coverage", "covering_documents"} <= {
        key.removeprefix("gateway.route.probe.") for key in attributes
    }
    assert "gateway.route.probe.covering_documents_ids" not in attributes  # document ids: content tracing only
    assert not any("Kumo" in str(v) or "payload" in str(v) for v in attributes.values())

    opted_in = settings.replace(observability={"trace_include_content": True})
    async with traced_app(opted_in, embeddings) as (client, _, exporter):
        await ask(client, K2_QUESTION)
        spans = exporter.get_finished_spans()
    ids = one(spans, "route_query").attributes or {}
    assert list(ids["gateway.route.probe.covering_documents_ids"])  # type: ignore[arg-type]


def test_without_an_exporter_a_request_opens_no_span_below_the_server_span() -> None:
    """Nothing exported: the pipeline's spans would record nothing, so they are the span they run in;
    with an exporter each is its own span under it."""
    silent = Telemetry(None, build_tracer_provider(environ={}))
    exporter = InMemorySpanExporter()
    recorded = Telemetry(None, build_tracer_provider(environ={}, extra_exporter=exporter))
    for telemetry, nested_is_server in ((silent, True), (recorded, False)):
        with (
            telemetry.tracer.start_as_current_span("POST /v1/chat/completions") as server,
            telemetry.request("auto") as scope,
            telemetry.routing() as routing,
            telemetry.node("direct", "answer"),
        ):
            inner = trace.get_current_span()
        ids = {span.get_span_context().span_id for span in (scope.span, routing, inner)}
        assert (ids == {server.get_span_context().span_id}) is nested_is_server
        assert scope.trace_id == format(server.get_span_context().trace_id, "032x")
    assert [span.name for span in exporter.get_finished_spans()] == [
        "direct.answer",
        "route_query",
        "gateway.answer",
        "POST /v1/chat/completions",
    ]
    with silent.request("direct") as alone:  # outside any span: still a span, for the trace id
        assert alone.trace_id is not None
        assert HEX32.match(alone.trace_id)
