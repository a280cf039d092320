"""The whole curation cycle through the API on the scripted model and an SQLite store: the relocation
scenario (knowledge_gap → verified document → re-run scored higher → fresh answer), feedback and
training pairs, and the ranking and generation diagnoses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from litestar.testing import AsyncTestClient

from tests.curation_support import NEW_ADDRESS, NEW_DOC, OLD_DOC, OTHER_DOCS, QUESTION, RULES, TENANT, relocation_model


async def _ingest(client: AsyncTestClient[Any], tenant: str, documents: list[dict[str, Any]]) -> None:
    response = await client.post("/v1/documents", json={"tenant": tenant, "documents": documents})
    assert response.status_code == 200, response.text


async def _ask(client: AsyncTestClient[Any], tenant: str, query: str, **extra: Any) -> dict[str, Any]:
    response = await client.post("/v1/query", json={"query": query, "tenant": tenant, "route": "single_hop", **extra})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _gaps(client: AsyncTestClient[Any], tenant: str) -> list[dict[str, Any]]:
    response = await client.get("/v1/knowledge-gaps", params={"tenant": tenant})
    assert response.status_code == 200, response.text
    gaps: list[dict[str, Any]] = response.json()["gaps"]
    return gaps


async def test_relocation_cycle_closes_the_gap_with_proof(make_client: Callable[..., Any]) -> None:
    async with make_client(relocation_model) as (client, _):
        await _ingest(client, TENANT, [OLD_DOC, *OTHER_DOCS])
        first = await _ask(client, TENANT, QUESTION)
        assert "丸の内" in first["answer"] and first["response_id"].startswith("resp_")

        rated = await client.post(
            "/v1/feedback",
            json={
                "tenant": TENANT,
                "response_id": first["response_id"],
                "rating": "down",
                "comment": "本社は移転済みです",
                "expected_answer": "東京都渋谷区神南2-3-4 神南タワー10階",
            },
        )
        assert rated.status_code == 202, rated.text
        assert rated.json()["linked"] and rated.json()["recorded"]

        gaps = await _gaps(client, TENANT)
        assert len(gaps) == 1
        gap = gaps[0]
        assert gap["diagnosis"] == "knowledge_gap", gap
        assert gap["examples"] == [QUESTION] and gap["count"] == 1
        assert "negative_feedback" in gap["reasons"]
        assert all(not p["answers"] for p in gap["evidence"]["best_passages"])

        resolved = await client.post(
            f"/v1/knowledge-gaps/{gap['id']}/resolution",
            json={"tenant": TENANT, "documents": [NEW_DOC], "rules": RULES},
        )
        assert resolved.status_code == 200, resolved.text
        result = resolved.json()
        case = result["cases"][0]
        print("relocation resolution:", json.dumps(result, ensure_ascii=False, indent=1))
        assert result["closed"] and result["score_after"] > result["score_before"]
        assert [r["passed"] for r in case["before"]["rules"]] == [False, False, False]
        assert [r["passed"] for r in case["after"]["rules"]] == [True, True, True]
        assert case["before"]["judge"]["score"] < case["after"]["judge"]["score"]
        assert NEW_ADDRESS in case["after"]["answer"] and "丸の内ビル5階" in case["before"]["answer"]

        again = await _ask(client, TENANT, QUESTION)
        assert NEW_ADDRESS in again["answer"] and again["cached"] is False
        assert gap["id"] not in [g["id"] for g in await _gaps(client, TENANT)]  # closed: off the open list

        up = await client.post(
            "/v1/feedback", json={"tenant": TENANT, "response_id": again["response_id"], "rating": "up"}
        )
        assert up.status_code == 202 and up.json()["linked"]
        exported = await client.get("/v1/training-pairs", params={"tenant": TENANT})
        assert exported.status_code == 200
        rows = [json.loads(line) for line in exported.text.splitlines()]
        print("training pairs:", rows)
        assert {
            "question": QUESTION,
            "positive_ids": ["office-2024"],
            "negative_ids": ["office-2019"],
            "source": "resolution",
            "tenant": TENANT,
        } in rows
        assert any(r["source"] == "feedback" and r["positive_ids"] == ["office-2024"] for r in rows)
        assert any(r["source"] == "feedback" and r["negative_ids"] == ["office-2019"] for r in rows)


RANKING_DOCS = [
    {
        "id": "guest-wifi",
        "title": "Guest wifi",
        "text": "Guests can use the guest wifi network in the lobby and the meeting rooms.",
    },
    {
        "id": "wifi-rooms",
        "title": "Wifi for guests",
        "text": "The guest wifi covers every meeting room; guests ask reception for help with wifi.",
    },
    {
        "id": "visitor-pass",
        "title": "Visitor network",
        "text": "Visitor network passphrase this month: Tulip-4821 (changes monthly).",
    },
]


async def test_an_answer_below_top_k_is_a_ranking_gap(make_client: Callable[..., Any]) -> None:
    async with make_client(relocation_model) as (client, _):
        await _ingest(client, "rank", RANKING_DOCS)
        answer = await _ask(client, "rank", "What is the guest wifi password?", top_k=1, allow_escalation=False)
        assert "Tulip" not in answer["answer"]
        rated = await client.post(
            "/v1/feedback",
            json={
                "tenant": "rank",
                "response_id": answer["response_id"],
                "rating": "down",
                "expected_answer": "Tulip-4821",
            },
        )
        assert rated.json()["recorded"]
        (gap,) = await _gaps(client, "rank")
        assert gap["diagnosis"] == "ranking", gap
        assert gap["evidence"]["found_at_rank"] > gap["evidence"]["top_k"] == 1


async def test_evidence_in_hand_and_a_wrong_answer_is_a_generation_gap(make_client: Callable[..., Any]) -> None:
    async with make_client(relocation_model) as (client, _):
        await _ingest(client, "gen", [OLD_DOC])
        answer = await _ask(client, "gen", "本社の受付時間は？")
        assert "9時から18時" in answer["answer"]  # the passage held it; the user still found the answer wrong
        await client.post(
            "/v1/feedback",
            json={
                "tenant": "gen",
                "response_id": answer["response_id"],
                "rating": "down",
                "expected_answer": "平日9時から18時",
            },
        )
        (gap,) = await _gaps(client, "gen")
        assert gap["diagnosis"] == "generation", gap


async def test_feedback_must_name_an_answer(make_client: Callable[..., Any]) -> None:
    async with make_client(relocation_model) as (client, _):
        response = await client.post("/v1/feedback", json={"rating": "down"})
        assert response.status_code == 400
        assert response.headers["content-type"].startswith("application/problem+json")
