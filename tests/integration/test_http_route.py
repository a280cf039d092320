"""``POST /v1/route`` over HTTP with the real embeddings, LanceDB and the trained router: it routes on
what the tenant's knowledge base holds and says which signals it read."""

from __future__ import annotations

from typing import Any

import pytest

DOCUMENTS = [
    {
        "id": "skylark",
        "title": "Skylark (route planner)",
        "text": "Skylark is Korvale's route planner for delivery vans. It is built by the Routing team, "
        "which sits in the Tampere office. Skylark 3 was released in March 2024.",
    },
    {
        "id": "tampere",
        "title": "Korvale Tampere office",
        "text": "The Tampere office opened in 2017 in the old paper mill by the rapids. About 85 people work "
        "there, most of them engineers. The office manager is Liisa Rantanen.",
    },
    {
        "id": "bergen",
        "title": "Korvale Bergen office",
        "text": "The Bergen office opened in 2012 and is Korvale's headquarters. About 210 people work there, "
        "in sales, finance and support.",
    },
    {
        "id": "leave",
        "title": "Annual leave policy",
        "text": "Employees get 27 days of paid annual leave per year. Unused days can be carried over until "
        "the end of March of the following year.",
    },
    {
        "id": "kestrel",
        "title": "Kestrel (fleet billing)",
        "text": "Kestrel is Korvale's billing system for fleet customers, built by the Billing team in Bergen. "
        "It sends invoices on the first working day of each month.",
    },
]


async def route(client: Any, tenant: str, query: str) -> dict[str, Any]:
    response = await client.post("/v1/route", json={"tenant": tenant, "query": query})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
async def korvale(make_client: Any) -> Any:
    async with make_client() as (client, model):
        ingested = await client.post("/v1/documents", json={"tenant": "korvale", "documents": DOCUMENTS})
        assert ingested.status_code == 200, ingested.text
        yield client, model


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("When did the Tampere office open?", "single_hop"),
        ("How many days of paid annual leave do employees get?", "single_hop"),
        ("How many people work at the office where the team that builds Skylark sits?", "multi_hop"),
        ("Which office opened first, the one where Skylark is built or the one where Kestrel is built?", "multi_hop"),
        ("Hello! How are you today?", "direct"),
        ("Translate 'thank you very much' into French.", "direct"),
        ("こんにちは！", "direct"),
    ],
)
async def test_routes_on_the_tenant_knowledge(korvale: Any, query: str, expected: str) -> None:
    client, model = korvale
    body = await route(client, "korvale", query)
    assert body["route"] == expected, body
    assert body["classifier"] == "logistic"
    probe = body["probe"]
    assert probe["tenant"] == "korvale"
    assert probe["depth"] >= 8
    assert {"top_score", "best_coverage", "union_coverage", "covering_documents"} <= set(probe["signals"])
    assert probe["documents"]
    assert {d["id"] for d in probe["documents"]} <= {d["id"] for d in DOCUMENTS}
    assert model.calls == []  # the default router asks no model


async def test_the_signals_explain_a_multi_hop_decision(korvale: Any) -> None:
    client, _ = korvale
    body = await route(client, "korvale", "How many people work at the office where the team that builds Skylark sits?")
    signals = body["probe"]["signals"]
    assert signals["covering_documents"] >= 2
    assert signals["union_coverage"] > signals["best_coverage"]
    assert {"skylark", "tampere"} <= set(body["probe"]["covering_documents"])
    assert "p(multi_hop)=" in body["reason"]


async def test_an_empty_tenant_routes_everything_direct(korvale: Any) -> None:
    client, _ = korvale
    for query in ("When did the Tampere office open?", "How many people work where Skylark is built?", "hi"):
        body = await route(client, "nobody", query)
        assert body["route"] == "direct", body
        assert body["probe"]["signals"]["passages"] == 0
        assert body["probe"]["documents"] == []
