"""Step events at the API edge: their one text rendering, and their trip through the wire and the caches."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.query.steps import RewriteFollowup, RouteClamp, RouteQuery, SemanticCacheHit, StepEvent, render_steps
from pipelines.shared.events import (
    Assess,
    Check,
    Escalate,
    Evaluate,
    Generate,
    Refine,
    Retrieve,
    Rewrite,
    SearchMore,
    Stop,
)
from tests.scripted import events, query_response

LONG_QUERY = "Who painted the ceiling of the Sistine Chapel in the Vatican, " * 3


def test_each_event_renders_to_the_step_text_clients_have_always_read() -> None:
    rendered = {
        RouteQuery(route="multi_hop", classifier="llm"): "route_query",
        SemanticCacheHit(similarity=0.91234): "semantic_cache(similarity=0.912)",
        RewriteFollowup(changed=True): "rewrite_followup(changed=True)",
        RouteClamp(from_route="direct", to_route="single_hop"): (
            "route_clamp: direct -> single_hop (not allowed by the assistant profile)"
        ),
        Retrieve(k=5, found=3): "retrieve(k=5, found=3)",
        Assess(verdict="incorrect"): "assess_retrieval: incorrect",
        Escalate(from_route="single_hop", to_route="multi_hop", reason="retrieval_incorrect"): (
            "escalate: single_hop -> multi_hop (retrieval incorrect)"
        ),
        Evaluate(verdict="correct", kept=1, total=5, graded=2): "evaluate: correct (kept 1/5, llm graded 2)",
        Rewrite(round=2, query=LONG_QUERY): f"rewrite_query(2): {LONG_QUERY[:120]}",
        SearchMore(source="tavily", queries=2, new=4): "search_more(tavily, queries=2, new=4)",
        Refine(strips=3, passages=2): "refine(strips from 3/2 passages)",
        Generate(): "generate_answer",
        Generate(abstention="model found no answer"): "generate_answer (abstained: model found no answer)",
        Generate(mode="regenerate"): "regenerate_answer",
        Generate(mode="direct"): "answer_directly",
        Generate(mode="cautious"): "cautious_answer",
        Generate(mode="keep_best"): "keep_best_answer",
        Check(critic="grounded", outcome="passed"): "check_grounded: supported",
        Check(critic="grounded", outcome="failed", claims=("a", "b", "c", "d")): (
            "check_grounded: unsupported ['a', 'b', 'c']"
        ),
        Check(critic="grounded", outcome="skipped", note="no answer found"): (
            "check_grounded: skipped (no answer found)"
        ),
        Check(critic="useful", outcome="passed", note="ignored"): "check_useful: yes",
        Check(critic="useful", outcome="failed", note="the year"): "check_useful: no (the year)",
        Check(
            critic="useful", outcome="skipped", note="no LLM calls left"
        ): "check_useful: skipped (no LLM calls left)",
        Stop(reason="recursion_limit"): "stop: recursion_limit",
    }
    assert render_steps(list(rendered)) == list(rendered.values())


def test_events_survive_the_wire_and_the_answer_cache_typed() -> None:
    steps: list[StepEvent] = [
        RouteQuery(route="multi_hop", classifier="llm"),
        Retrieve(k=5, found=5),
        Check(critic="grounded", outcome="failed", claims=("900 kg",)),
        Stop(reason="unsupported"),
    ]
    response = msgspec.structs.replace(query_response(), events=steps, steps=render_steps(steps))
    wire = msgspec.json.decode(msgspec.json.encode(response))
    assert wire["events"][2] == {
        "kind": "check",
        "critic": "grounded",
        "outcome": "failed",
        "claims": ["900 kg"],
        "note": "",
    }
    assert events(wire) == steps
    assert msgspec.json.decode(msgspec.json.encode(response), type=type(response)) == response


def test_an_answer_cached_before_events_existed_still_decodes() -> None:
    legacy = msgspec.json.decode(msgspec.json.encode(query_response()))
    del legacy["events"]
    decoded = msgspec.json.decode(msgspec.json.encode(legacy), type=type(query_response()))
    assert decoded.events == []
    assert decoded.steps == query_response().steps


async def test_query_response_steps_are_the_rendering_of_its_events(client: Any) -> None:
    documents = [{"id": "k2", "title": "Kumo Carrier K2", "text": "The Kumo Carrier K2 carries 150 kg."}]
    (await client.post("/v1/documents", json={"tenant": "acme", "documents": documents})).raise_for_status()
    for route in ("direct", "single_hop", "multi_hop"):
        body = {"query": "What does the Kumo Carrier K2 carry?", "tenant": "acme", "route": route}
        answer = (await client.post("/v1/query", json=body)).json()
        assert answer["events"], route
        assert answer["steps"] == render_steps(events(answer)), route
