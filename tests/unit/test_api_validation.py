"""Bad input gets a 4xx problem-details answer that says what to fix; never a 500."""

from __future__ import annotations

from typing import Any

import pytest

PROBLEM = "application/problem+json"


def assert_problem(response: Any, status: int, needle: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status
    assert needle.lower() in body["detail"].lower(), body


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"query": ""}, "empty"),
        ({"query": "   \n\t "}, "empty"),
        ({"query": "x" * 4001}, "maximum is 4000"),
        ({"query": "hi", "route": "sideways"}, "route"),
        ({"query": 42}, "query"),
        ({"query": ["a"]}, "query"),
        ({}, "query"),
        ({"query": "hi", "tenant": "../other"}, "tenant"),
        ({"query": "hi", "tenant": ""}, "tenant"),
        ({"query": "hi", "top_k": 0}, "top_k"),
        ({"query": "hi", "top_k": "three"}, "top_k"),
    ],
)
async def test_query_rejects_bad_input(client: Any, body: dict[str, Any], needle: str) -> None:
    assert_problem(await client.post("/v1/query", json=body), 400, needle)


async def test_malformed_json_is_a_problem_not_a_500(client: Any) -> None:
    response = await client.post("/v1/query", content=b'{"query": "hi",', headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith(PROBLEM)
    assert "json" in response.json()["detail"].lower()


async def test_query_limit_is_configurable(make_client: Any, settings: Any) -> None:
    small = settings.replace(limits={"max_query_chars": 10})
    async with make_client(settings_override=small) as (client, _):
        assert_problem(
            await client.post("/v1/query", json={"query": "a question longer than ten"}), 400, "maximum is 10"
        )


async def test_route_endpoint_validates_too(client: Any) -> None:
    assert_problem(await client.post("/v1/route", json={"query": " "}), 400, "empty")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"documents": []}, "documents"),
        ({"documents": [{"id": "a"}]}, "text"),
        ({"documents": [{"id": "", "text": "x"}]}, "id"),
        ({"documents": [{"id": "a", "text": "   "}]}, "no text"),
        ({"documents": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, "twice"),
        ({"documents": [{"id": "a", "text": "x", "metadata": "nope"}]}, "metadata"),
        ({"tenant": "bad tenant!", "documents": [{"id": "a", "text": "x"}]}, "tenant"),
    ],
)
async def test_documents_reject_bad_input(client: Any, body: dict[str, Any], needle: str) -> None:
    assert_problem(await client.post("/v1/documents", json=body), 400, needle)


async def test_delete_unknown_document_is_404(client: Any) -> None:
    assert_problem(await client.delete("/v1/documents/missing?tenant=acme"), 404, "no document")


async def test_delete_with_bad_tenant_is_400(client: Any) -> None:
    response = await client.delete("/v1/documents/x?tenant=../../etc")
    assert response.status_code == 400
    assert response.headers["content-type"].startswith(PROBLEM)


async def test_bad_input_loses_nothing(client: Any) -> None:
    """A rejected upsert leaves earlier documents intact and searchable."""
    ok = await client.post(
        "/v1/documents", json={"documents": [{"id": "kept", "text": "The VPN gateway is vpn.example."}]}
    )
    assert ok.status_code == 200
    bad = await client.post(
        "/v1/documents", json={"documents": [{"id": "kept", "text": "x"}, {"id": "kept", "text": "y"}]}
    )
    assert bad.status_code == 400
    answer = await client.post("/v1/query", json={"query": "What is the VPN gateway?", "route": "single_hop"})
    assert [s["id"] for s in answer.json()["sources"]] == ["kept"]


async def test_openapi_schema_lists_every_endpoint(client: Any) -> None:
    paths = (await client.get("/schema/openapi.json")).json()["paths"]
    for path in ("/v1/query", "/v1/route", "/v1/documents", "/v1/documents/{doc_id}", "/healthz", "/readyz"):
        assert path in paths
