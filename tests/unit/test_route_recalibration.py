"""Routing that learns from a tenant's own traffic: outcomes recorded per answer, a report, and an operator's
recalibration that routes the tenant's repeated-knowledge questions right while other tenants stay as they were.

The tenant's knowledge base is three outlets' reports of one ferry delay (the same facts in different words, dates
written out, so the probe finds no figure two reports repeat) and an unrelated report: the router's probe reads "a
second document holds words the best one lacks" and sends the questions to ``multi_hop``, whose planner finds the
first round sufficient and whose answer cites one report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from gateway.curation.cli import main
from gateway.curation.routing import RouteOutcome, recalibrate, route_outcome
from gateway.query.schemas import QueryRequest, QueryResponse, Source
from gateway.settings import Settings
from pipelines.shared.events import PlanHop, SearchHop
from tests.scripted import query_response

DOCS = [
    {
        "id": "ledger-kestrel",
        "title": "Harbour Ledger: Kestrel Lines postpones Norhaven crossing",
        "text": "Kestrel Lines has postponed its Norhaven crossing until the middle of March after storm damage to the "
        "pier, the operator said on Monday.",
    },
    {
        "id": "courier-kestrel",
        "title": "Valley Courier: ferry sailings from the harbour delayed",
        "text": "Ferry sailings from the old harbour are delayed: the first boat will leave again in mid-March, once "
        "repairs to the landing stage are finished.",
    },
    {
        "id": "gazette-kestrel",
        "title": "Coast Gazette: storm halts Kestrel ferry",
        "text": "The Kestrel ferry will not sail before the ides of March. A winter storm damaged the landing at "
        "Norhaven harbour last week.",
    },
    {
        "id": "ledger-bakery",
        "title": "Harbour Ledger: Norhaven bakery wins prize",
        "text": "A bakery in Norhaven won the regional bread prize on Sunday for its rye loaf.",
    },
]
QUESTIONS = [
    "Until when was the Kestrel ferry crossing from Norhaven harbour postponed?",
    "Why were the Kestrel ferry sailings from the harbour delayed?",
    "When will the Norhaven ferry leave the harbour again after the storm?",
    "What date do Kestrel Lines boats sail from Norhaven again?",
]


@pytest.fixture
def uncached(settings: Settings) -> Settings:
    return settings.replace(cache={"enabled": False}, semantic_cache={"enabled": False})


async def ask(client: Any, tenant: str, question: str) -> dict[str, Any]:
    reply = await client.post("/v1/query", json={"query": question, "tenant": tenant})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


async def test_a_recalibrated_tenant_routes_its_repeated_knowledge_single_hop_and_others_are_unchanged(
    make_client: Callable[..., Any], uncached: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_client(settings_override=uncached) as (client, _):
        for tenant in ("news", "control"):
            assert (await client.post("/v1/documents", json={"tenant": tenant, "documents": DOCS})).status_code == 200
        before = {q: await ask(client, "news", q) for q in QUESTIONS}
        assert {b["classified_route"] for b in before.values()} == {"multi_hop"}
        assert all(len(b["sources"]) == 1 for b in before.values())

        report = (await client.get("/v1/route-outcomes", params={"tenant": "news"})).json()
        assert report["counts"] == {"right": 0, "over_routed": 4, "under_routed": 0}
        assert report["accuracy_estimate"] == 0.0
        assert report["calibrated"] is False

        too_few = await client.post("/v1/route-outcomes/recalibration", params={"tenant": "news"}, json={})
        assert too_few.status_code == 409  # 4 outcomes, 20 needed by default: nothing moves on so little
        proposed = await client.post(
            "/v1/route-outcomes/recalibration", params={"tenant": "news"}, json={"min_outcomes": 4}
        )
        proposal = proposed.json()
        assert proposal["applied"] is False
        assert proposal["accuracy_before"] == 0.0
        assert proposal["accuracy_after"] == 1.0
        assert proposal["multi_hop_threshold"] > max(b["p_multi_hop"] for b in before.values())
        # A proposal changes nothing: never silently
        assert (await ask(client, "news", QUESTIONS[0]))["classified_route"] == "multi_hop"

        applied = await client.post(
            "/v1/route-outcomes/recalibration", params={"tenant": "news"}, json={"min_outcomes": 4, "apply": True}
        )
        assert applied.json()["applied"] is True
        for question in QUESTIONS:
            after = await ask(client, "news", question)
            assert after["classified_route"] == "single_hop", after["route_reason"]
            assert after["sources"][0]["id"].endswith("-kestrel")
            assert "tenant threshold" in after["route_reason"]
            unchanged = await ask(client, "control", question)
            assert unchanged["classified_route"] == "multi_hop"
            assert unchanged["p_multi_hop"] == before[question]["p_multi_hop"]
        report = (await client.get("/v1/route-outcomes", params={"tenant": "news"})).json()
        assert report["calibrated"] is True
        assert report["counts"]["right"] == len(QUESTIONS)

        # The operator's command reads the same store and proposes from the same outcomes
        monkeypatch.setenv("GATEWAY_CURATION_DATABASE_URL", uncached.curation.database_url.get_secret_value())
        command = ["recalibrate", "--tenant", "control", "--min-outcomes", "4"]
        assert await asyncio.to_thread(main, command) == 0  # a process of its own runs it; here, a thread


def outcome(verdict: str, p: float, classified: str = "multi_hop") -> RouteOutcome:
    return RouteOutcome(f"r{p}", "t", classified, classified, verdict, p, 0.0)  # type: ignore[arg-type]


def test_recalibration_separates_what_the_outcomes_wanted_nearest_the_default() -> None:
    outcomes = [
        outcome("over_routed", 0.80),
        outcome("over_routed", 0.85),
        outcome("right", 0.97),  # a multi_hop that needed its second hop
        outcome("right", 0.20, "single_hop"),
        outcome("under_routed", 0.45, "single_hop"),
    ]
    found = recalibrate("t", outcomes, None)
    assert found.accuracy_before == 0.4  # both over-routed and the escalated one were routed wrong
    assert found.accuracy_after == 0.8  # 0.45 wants multi_hop but 0.80 and 0.85 do not: no threshold has all
    assert 0.85 < found.multi_hop_threshold < 0.97
    assert recalibrate("t", [outcome("right", 0.7)], None).multi_hop_threshold == 0.5  # nothing to move for


def answered(route: str, classified: str, events: list[Any], sources: list[str], **fields: Any) -> QueryResponse:
    return msgspec.structs.replace(
        query_response(route=route),
        classified_route=classified,
        events=events,
        sources=[Source(id=s, title=s, score=0.5) for s in sources],
        response_id="r1",
        **fields,
    )


@pytest.mark.parametrize(
    ("events", "sources", "verdict"),
    [
        ([PlanHop(hop=1, done=True)], ["a"], "over_routed"),
        ([PlanHop(hop=1, query="who?"), SearchHop(hop=1, k=4, new=2)], ["a", "b"], "right"),
        ([PlanHop(hop=1, query="who?"), SearchHop(hop=1, k=4, new=0)], ["a"], None),
    ],
)
def test_a_multi_hop_answer_shows_whether_it_needed_its_route(
    events: list[Any], sources: list[str], verdict: str | None
) -> None:
    response = answered("multi_hop", "multi_hop", events, sources)
    found = route_outcome(QueryRequest(query="q", tenant="t"), response, 0.0)
    assert (found.verdict if found else None) == verdict
    forced = route_outcome(QueryRequest(query="q", tenant="t", route="multi_hop"), response, 0.0)
    assert forced is None  # a forced route says nothing about the router


def test_an_escalated_single_hop_was_under_routed_and_an_abstention_says_nothing() -> None:
    escalated = answered("multi_hop", "single_hop", [], ["a"], escalated_from="single_hop")
    found = route_outcome(QueryRequest(query="q", tenant="t"), escalated, 0.0)
    assert found is not None
    assert found.verdict == "under_routed"
    assert found.wanted_multi_hop
    abstained = answered("single_hop", "single_hop", [], [], abstained=True)
    assert route_outcome(QueryRequest(query="q", tenant="t"), abstained, 0.0) is None
