"""Routing that learns from a tenant's own traffic: outcomes recorded per answer, a report, and an operator's
recalibration that routes the tenant's repeated-knowledge questions right while other tenants stay as they were.

The tenant's knowledge base is three outlets' reports of one ferry delay (the same facts in different words, dates
written out, so the probe finds no figure two reports repeat) and an unrelated report: the router's probe reads "a
second document holds words the best one lacks" and sends the questions to ``multi_hop``, whose planner finds the
first round sufficient and whose answer cites one report.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import pytest

from gateway.curation.cli import main
from gateway.curation.routing import (
    MIN_NAMED_OUTCOMES,
    Calibration,
    NoRouterProbabilityError,
    NotEnoughOutcomesError,
    RouteOutcome,
    recalibrate,
    recalibrate_tenant,
    route_outcome,
    route_report,
)
from gateway.curation.store import CurationStore
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
        (version,) = {b["router_version"] for b in before.values()}  # one router answered them all
        assert re.fullmatch(r"[0-9a-f]{12}", version)

        report = (await client.get("/v1/route-outcomes", params={"tenant": "news"})).json()
        assert report["counts"] == {"right": 0, "over_routed": 4, "under_routed": 0}
        assert report["accuracy_estimate"] == 0.0
        assert report["calibrated"] is False
        assert (report["router_version"], report["stale_outcomes"], report["calibration_stale"]) == (version, 0, False)

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
        assert applied.json()["router_version"] == version  # made for the router that computed the probabilities
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

        # The operator's command reads the same store and proposes from the same outcomes, for the router the
        # gateway's settings load (the same artefact)
        monkeypatch.setenv("GATEWAY_CURATION_DATABASE_URL", uncached.curation.database_url.get_secret_value())
        monkeypatch.setenv("GATEWAY_ROUTER_CACHE_DIR", str(uncached.router_artefact.cache_dir))
        command = ["recalibrate", "--tenant", "control", "--min-outcomes", "4", "--apply"]
        assert await asyncio.to_thread(main, command) == 0  # a process of its own runs it; here, a thread
        report = (await client.get("/v1/route-outcomes", params={"tenant": "control"})).json()
        assert (report["calibrated"], report["calibration_stale"]) == (True, False)


# Pages titled by product names that users join in one request, where one page answers: "Beacon and Tidewater" asks
# whether the two work together, and Beacon's page says so.
PRODUCT_DOCS = [
    {
        "id": "beacon",
        "title": "Beacon",
        "text": "Beacon is the fleet telemetry service. Beacon sends its trip reports to Tidewater every night, so "
        "Tidewater users see them in the morning without any setup.",
    },
    {
        "id": "tidewater",
        "title": "Tidewater",
        "text": "Tidewater is the warehouse planning suite used by the logistics team for pick paths and dock doors.",
    },
    {
        "id": "ledgerline",
        "title": "Ledgerline",
        "text": "Ledgerline is the invoicing tool used by the finance team.",
    },
]
PRODUCT_QUESTIONS = [
    "Do Beacon and Tidewater share trip reports?",
    "How often do Beacon and Tidewater exchange trip reports?",
    "Does Tidewater or Beacon need setup for the nightly trip reports?",
    "When do Tidewater users see trip reports from Beacon and Tidewater's nightly sync?",
    "Are trip reports sent between Beacon and Tidewater every night?",
]


async def test_a_tenant_whose_named_questions_one_page_answers_turns_the_rule_off_and_others_keep_it(
    make_client: Callable[..., Any], uncached: Settings
) -> None:
    fresh_profiles = uncached.replace(profiles={"cache_ttl_s": 0.0})  # every request reads the stored calibration
    async with make_client(settings_override=fresh_profiles) as (client, _):
        for tenant in ("products", "control"):
            posted = await client.post("/v1/documents", json={"tenant": tenant, "documents": PRODUCT_DOCS})
            assert posted.status_code == 200
        before = {q: await ask(client, "products", q) for q in PRODUCT_QUESTIONS}
        for question, answer in before.items():
            assert answer["named_documents"] is True, question
            assert answer["classified_route"] == "multi_hop", answer["route_reason"]
            assert "by title" in answer["route_reason"]
            assert len(answer["sources"]) == 1  # the first round was enough: Beacon's page answered
        report = (await client.get("/v1/route-outcomes", params={"tenant": "products"})).json()
        assert (report["named_outcomes"], report["named_accuracy_estimate"]) == (len(PRODUCT_QUESTIONS), 0.0)
        assert report["named_documents_rule"] is True

        applied = await client.post(
            "/v1/route-outcomes/recalibration",
            params={"tenant": "products"},
            json={"min_outcomes": len(PRODUCT_QUESTIONS), "apply": True},
        )
        found = applied.json()
        assert (found["current_named_documents_rule"], found["named_documents_rule"]) == (True, False)
        assert (found["named_outcomes"], found["accuracy_before"], found["accuracy_after"]) == (
            len(PRODUCT_QUESTIONS),
            0.0,
            1.0,
        )
        for question in PRODUCT_QUESTIONS:
            after = await ask(client, "products", question)
            assert after["classified_route"] == "single_hop", after["route_reason"]
            assert "turned that rule off" in after["route_reason"]
            assert after["named_documents"] is True  # still recorded, for the next recalibration
            unchanged = await ask(client, "control", question)
            assert unchanged["classified_route"] == "multi_hop"
            assert "turned that rule off" not in unchanged["route_reason"]
        report = (await client.get("/v1/route-outcomes", params={"tenant": "products"})).json()
        assert report["named_documents_rule"] is False
        # /v1/route says what a query would run on: the tenant's routing too
        said = await client.post("/v1/route", json={"query": PRODUCT_QUESTIONS[0], "tenant": "products"})
        assert said.json()["classified_route"] == "single_hop", said.text

        # A calibration made for another router version is set aside whole: the rule decides again
        store = CurationStore.open(uncached.curation.database_url.get_secret_value())
        try:
            current = await store.calibration("products")
            assert current is not None
            await store.set_calibration(dataclasses.replace(current, router_version="0" * 12))
            stale = await ask(client, "products", PRODUCT_QUESTIONS[0])
            assert stale["classified_route"] == "multi_hop", stale["route_reason"]
            assert "turned that rule off" not in stale["route_reason"]
        finally:
            await store.close()


async def test_a_threshold_calibrated_for_another_router_version_is_set_aside_and_one_for_this_version_applies(
    make_client: Callable[..., Any], uncached: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A new release retrains the router: the threshold an operator fitted to the old one's probabilities is not
    applied to the new one's (the default routes, with one warning), until a calibration for this version is."""
    fresh_profiles = uncached.replace(profiles={"cache_ttl_s": 0.0})  # every request reads the stored calibration
    async with make_client(settings_override=fresh_profiles) as (client, _):
        assert (await client.post("/v1/documents", json={"tenant": "news", "documents": DOCS})).status_code == 200
        version = {(await ask(client, "news", q))["router_version"] for q in QUESTIONS}.pop()
        applied = await client.post(
            "/v1/route-outcomes/recalibration", params={"tenant": "news"}, json={"min_outcomes": 4, "apply": True}
        )
        assert applied.json()["router_version"] == version
        calibrated = await ask(client, "news", QUESTIONS[0])
        assert calibrated["classified_route"] == "single_hop"
        assert "tenant threshold" in calibrated["route_reason"]

        store = CurationStore.open(uncached.curation.database_url.get_secret_value())
        try:
            current = await store.calibration("news")
            assert current is not None
            warnings: list[str] = []
            for other in ("0" * 12, None):  # another router's; one stored before versions were recorded
                await store.set_calibration(dataclasses.replace(current, router_version=other))
                with caplog.at_level(logging.WARNING, logger="gateway.query.service"):
                    for question in QUESTIONS[:2]:
                        routed = await ask(client, "news", question)
                        assert routed["classified_route"] == "multi_hop", routed["route_reason"]
                        assert "tenant threshold" not in routed["route_reason"]
                        assert routed["router_version"] == version
                warnings += [
                    r.getMessage() for r in caplog.records if "calibrated for router version" in r.getMessage()
                ]
                caplog.clear()
                report = (await client.get("/v1/route-outcomes", params={"tenant": "news"})).json()
                assert (report["calibrated"], report["calibration_stale"]) == (True, True)
                assert report["multi_hop_threshold"] == 0.5  # what routes now: the default
            (warning,) = warnings  # once per tenant and process, not per request
            assert "'news'" in warning
            assert "0" * 12 in warning
            assert version in warning

            await store.set_calibration(current)  # recalibrated for the router in use: applied again
            again = await ask(client, "news", QUESTIONS[0])
            assert again["classified_route"] == "single_hop"
            assert "tenant threshold" in again["route_reason"]
        finally:
            await store.close()


def outcome(
    verdict: str, p: float | None, classified: str = "multi_hop", version: str | None = None, at: float = 0.0
) -> RouteOutcome:
    return RouteOutcome(f"r{p}-{version}", "t", classified, classified, verdict, p, at, router_version=version)  # type: ignore[arg-type]


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


def named(verdict: str, p: float, classified: str = "multi_hop") -> RouteOutcome:
    """An outcome of a question that asked about two documents by title (the named-documents rule's)."""
    return dataclasses.replace(outcome(verdict, p, classified), id=f"named-{verdict}-{p}", named_documents=True)


def test_recalibration_turns_the_named_documents_rule_off_where_the_threshold_routes_its_questions_better() -> None:
    """The rule sent three questions naming two pages multi_hop, and one page answered each: with it off the
    threshold routes them single_hop (their probabilities are low) and everything else as before."""
    ordinary = [outcome("right", 0.9), outcome("right", 0.2, "single_hop"), outcome("under_routed", 0.6, "single_hop")]
    rule = [named("over_routed", p) for p in (0.1, 0.15, 0.2, 0.25, 0.3)]
    found = recalibrate("t", [*ordinary, *rule], None)
    assert (found.current_named_documents, found.named_documents) == (True, False)
    assert (found.outcomes, found.named_outcomes) == (8, 5)
    assert found.accuracy_before == 0.375  # the five named ones routed wrong by the rule
    assert found.accuracy_after == 1.0
    assert 0.3 < found.multi_hop_threshold <= 0.6
    # Fewer of them than MIN_NAMED_OUTCOMES do not overturn a rule measured on the whole training set
    few = recalibrate("t", [*ordinary, *rule[: MIN_NAMED_OUTCOMES - 1]], None)
    assert few.named_documents is True
    # ... while a rule turned off comes back on as soon as its questions show they wanted their second document
    back = recalibrate("t", [*ordinary, named("right", 0.1)], None, current_named_documents=False)
    assert back.named_documents is True
    # Where the rule's questions did need their second document, it stays on, and they do not move the threshold
    needed = [named("right", 0.1), named("right", 0.2), named("right", 0.3)]
    kept = recalibrate("t", [*ordinary, *needed], None)
    assert kept.named_documents is True
    assert kept.multi_hop_threshold == recalibrate("t", ordinary, None).multi_hop_threshold
    assert kept.accuracy_after == 1.0


def test_a_tie_leaves_the_named_documents_rule_as_it_is() -> None:
    split = [named("over_routed", 0.9), named("right", 0.1)]  # either way one of the two is routed wrong
    assert recalibrate("t", split, None).named_documents is True
    assert recalibrate("t", split, None, current_named_documents=False).named_documents is False
    # no outcome of the rule's questions: nothing to say about it either way
    assert recalibrate("t", [outcome("right", 0.9)], None, current_named_documents=False).named_documents is False


OLD, NEW = "0123456789ab", "ba9876543210"


def test_recalibration_reads_only_the_outcomes_of_the_router_it_is_for() -> None:
    """The old router's outcomes wanted multi_hop at probabilities the new router gives repeated knowledge: mixed in,
    they would pull the threshold back under the new router's over-routed questions."""
    new = [outcome("over_routed", 0.80, version=NEW), outcome("over_routed", 0.85, version=NEW)]
    new.append(outcome("right", 0.97, version=NEW))
    old = [outcome("right", p, version=OLD) for p in (0.82, 0.83, 0.84, 0.86)]
    legacy = [outcome("right", 0.81)]  # recorded before versions were: no router version
    found = recalibrate("t", [*old, *new, *legacy], None, NEW)
    assert (found.outcomes, found.router_version) == (3, NEW)
    assert 0.85 < found.multi_hop_threshold < 0.97
    assert found.accuracy_after == 1.0
    mixed = recalibrate("t", [dataclasses.replace(o, router_version=NEW) for o in [*old, *new]], None, NEW)
    assert mixed.multi_hop_threshold < 0.82  # what the old outcomes would have done
    assert recalibrate("t", [*old, *new], None, OLD).outcomes == 4


class MemoryStore:
    """The curation store's route outcomes and calibration, in memory."""

    def __init__(self, outcomes: Sequence[RouteOutcome], applied: Calibration | None = None) -> None:
        self.outcomes = list(outcomes)
        self.applied = applied

    async def route_outcomes(self, tenant: str, since: float) -> list[RouteOutcome]:
        return [o for o in self.outcomes if o.tenant == tenant and o.created_at >= since]

    async def calibration(self, tenant: str) -> Calibration | None:
        return self.applied

    async def set_calibration(self, calibration: Calibration) -> None:
        self.applied = calibration


def calibration(threshold: float, version: str | None) -> Calibration:
    return Calibration("t", 20, threshold, threshold, 0.2, 0.9, version)


NOW = 100 * 86_400.0
MIXED = [
    outcome("right", 0.2, "single_hop", NEW, NOW - 10),
    dataclasses.replace(outcome("over_routed", 0.8, version=NEW, at=NOW - 10), disliked=True),
    outcome("right", 0.9, version=OLD, at=NOW - 10),
    outcome("under_routed", 0.3, "single_hop", OLD, NOW - 10),
    outcome("right", 0.95, at=NOW - 10),  # before versions were recorded
    outcome("over_routed", 0.7, version=OLD, at=NOW - 40 * 86_400),  # outside the window
]


@pytest.mark.parametrize(
    ("applied", "stale", "threshold"),
    [
        (None, False, 0.5),
        (calibration(0.9, NEW), False, 0.9),
        (calibration(0.9, OLD), True, 0.5),
        (calibration(0.9, None), True, 0.5),  # made before versions were recorded: for no known router
    ],
)
async def test_the_report_is_of_the_router_in_use_and_counts_the_others_apart(
    applied: Calibration | None, stale: bool, threshold: float
) -> None:
    report = await route_report(MemoryStore(MIXED, applied), "t", 30, NOW, NEW)
    assert report.router_version == NEW
    assert report.counts == {"right": 1, "over_routed": 1, "under_routed": 0}
    assert report.accuracy == 0.5  # of the current router's two, not 3 of 5
    assert report.disliked == 1
    assert report.stale_outcomes == 3
    assert report.calibrated is (applied is not None)
    assert report.calibration_stale is stale
    assert report.multi_hop_threshold == threshold


async def test_recalibrating_a_tenant_fits_the_router_in_use_and_replaces_a_stale_calibration() -> None:
    store = MemoryStore(MIXED, calibration(0.99, OLD))
    found = await recalibrate_tenant(store, "t", days=30, min_outcomes=2, apply=True, now=NOW, router_version=NEW)
    assert (found.outcomes, found.router_version) == (2, NEW)
    assert found.current_threshold == 0.5  # the old router's 0.99 was set aside: the default routed
    assert found.multi_hop_threshold > 0.8  # both of this router's outcomes wanted single_hop
    assert (found.accuracy_before, found.accuracy_after) == (0.5, 1.0)
    assert store.applied == found
    assert not found.stale_for(NEW)
    assert found.stale_for(OLD)


async def test_outcomes_of_another_router_are_not_enough_to_recalibrate_and_the_llm_router_has_no_threshold() -> None:
    store = MemoryStore(MIXED)
    with pytest.raises(NotEnoughOutcomesError, match=r"2 route outcome.*3 more were recorded under another router"):
        await recalibrate_tenant(store, "t", days=30, min_outcomes=3, apply=True, now=NOW, router_version=NEW)
    with pytest.raises(NoRouterProbabilityError):
        await recalibrate_tenant(store, "t", days=30, min_outcomes=1, apply=True, now=NOW, router_version=None)
    assert store.applied is None


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
    response = answered("multi_hop", "multi_hop", events, sources, p_multi_hop=0.9, router_version=NEW)
    found = route_outcome(QueryRequest(query="q", tenant="t"), response, 0.0)
    assert (found.verdict if found else None) == verdict
    if found is not None:  # recorded with the router that computed its probability
        assert (found.p_multi_hop, found.router_version) == (0.9, NEW)
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
