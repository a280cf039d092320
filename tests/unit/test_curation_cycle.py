"""The whole curation cycle through the API on the scripted model and an SQLite store: the relocation
scenario (knowledge_gap → verified document → re-run scored higher → fresh answer), feedback and
training pairs, and the ranking and generation diagnoses."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from litestar.testing import AsyncTestClient

from gateway.settings import Settings
from tests.curation_support import OLD_DOC, QUESTION, ask, gaps, ingest, relocation_cycle, relocation_model


async def test_relocation_cycle_closes_the_gap_with_proof(make_client: Callable[..., Any]) -> None:
    async with make_client(relocation_model) as (client, _):
        result = await relocation_cycle(client)
    print("relocation resolution:", json.dumps(result, ensure_ascii=False, indent=1))


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
        await ingest(client, "rank", RANKING_DOCS)
        answer = await ask(client, "rank", "What is the guest wifi password?", top_k=1, allow_escalation=False)
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
        (gap,) = await gaps(client, "rank")
        assert gap["diagnosis"] == "ranking", gap
        assert gap["evidence"]["found_at_rank"] > gap["evidence"]["top_k"] == 1


async def _rated_down_with_the_answer_in_hand(client: AsyncTestClient[Any]) -> list[dict[str, Any]]:
    """The office hours asked; the passage held them and the answer gave them; the user rated it down anyway."""
    await ingest(client, "gen", [OLD_DOC])
    answer = await ask(client, "gen", "本社の受付時間は？")
    assert "9時から18時" in answer["answer"]
    rating = {
        "tenant": "gen",
        "response_id": answer["response_id"],
        "rating": "down",
        "expected_answer": "平日9時から18時",
    }
    await client.post("/v1/feedback", json=rating)
    return await gaps(client, "gen")


async def test_evidence_in_hand_and_a_wrong_answer_is_a_generation_gap(make_client: Callable[..., Any]) -> None:
    async with make_client(relocation_model) as (client, _):
        (gap,) = await _rated_down_with_the_answer_in_hand(client)
        assert gap["diagnosis"] == "generation", gap


async def test_feedback_must_name_an_answer(make_client: Callable[..., Any]) -> None:
    async with make_client(relocation_model) as (client, _):
        response = await client.post("/v1/feedback", json={"rating": "down"})
        assert response.status_code == 400
        assert response.headers["content-type"].startswith("application/problem+json")


async def test_an_answer_citing_a_document_changed_since_is_stale(make_client: Callable[..., Any]) -> None:
    async with make_client(relocation_model) as (client, _):
        await ingest(client, "stale", [OLD_DOC])
        answer = await ask(client, "stale", "本社の受付時間は？")
        await client.post(
            "/v1/feedback", json={"tenant": "stale", "response_id": answer["response_id"], "rating": "down"}
        )
        changed = {**OLD_DOC, "text": OLD_DOC["text"].replace("18時", "17時")}
        await ingest(client, "stale", [changed])
        (gap,) = await gaps(client, "stale")
        assert gap["diagnosis"] == "stale", gap
        (change,) = gap["evidence"]["changed_documents"]
        assert change["document"] == OLD_DOC["id"]
        assert change["changed_at"] > change["answered_at"]


async def test_open_gaps_are_counted_by_diagnosis_without_tenant_labels(make_client: Callable[..., Any]) -> None:
    async with make_client(relocation_model) as (client, _):
        await _rated_down_with_the_answer_in_hand(client)
        metrics = (await client.get("/metrics")).text
        assert 'gateway_knowledge_gaps_open{diagnosis="generation"} 1.0' in metrics
        assert 'gateway_knowledge_gaps_open{diagnosis="knowledge_gap"} 0.0' in metrics
        assert 'tenant="gen"' not in metrics


async def test_the_review_page_escapes_what_users_asked(make_client: Callable[..., Any]) -> None:
    async with make_client(relocation_model) as (client, _):
        await ingest(client, "page", [OLD_DOC])
        answer = await ask(client, "page", "<script>alert(1)</script> 本社の住所は？")
        await client.post(
            "/v1/feedback", json={"tenant": "page", "response_id": answer["response_id"], "rating": "down"}
        )
        sign_in = await client.get("/console/sign-in")
        token = re.search(r'name="csrf-token" content="([^"]+)"', sign_in.text)
        assert token is not None
        await client.post("/console/sign-in", data={"tenant": "page", "_csrf_token": token.group(1)})
        page = await client.get("/console/review/", params={"tenant": "page"})
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
        assert "<script>alert" not in page.text
        assert f'action="/console/review/gaps/gap_{answer["response_id"]}/resolve"' in page.text


async def test_chat_completions_return_an_id_to_rate(make_client: Callable[..., Any]) -> None:
    async with make_client(relocation_model) as (client, _):
        await ingest(client, "default", [OLD_DOC])  # open mode: chat answers for the default tenant
        completion = await client.post(
            "/v1/chat/completions",
            json={"model": "gateway-single-hop", "messages": [{"role": "user", "content": QUESTION}]},
        )
        assert completion.status_code == 200, completion.text
        response_id = completion.json()["gateway"]["response_id"]
        assert response_id.startswith("resp_")
        rated = await client.post(
            "/v1/feedback", json={"response_id": response_id, "rating": "down", "expected_answer": "渋谷区神南2-3-4"}
        )
        assert rated.json()["linked"]
        assert rated.json()["recorded"]
        (gap,) = await gaps(client, "default")
        assert gap["examples"] == [QUESTION]


async def test_a_resolution_obeys_the_document_limits_of_every_knowledge_write(
    make_client: Callable[..., Any], settings: Settings
) -> None:
    """A curator's verified documents go through the same limits as ``POST /v1/documents``: an oversized or blank
    document is a 400 before anything is looked up or written."""
    limited = settings.replace(limits={"max_document_chars": 50})
    async with make_client(relocation_model, settings_override=limited) as (client, _):
        for document in ({"id": "too-long", "text": "x" * 51}, {"id": "blank", "text": "   "}):
            response = await client.post(
                "/v1/knowledge-gaps/no-such-gap/resolution", json={"tenant": "default", "documents": [document]}
            )
            assert response.status_code == 400, response.text
            assert response.headers["content-type"].startswith("application/problem+json")
            assert document["id"] in response.json()["detail"]


async def test_feedback_is_kept_with_personal_data_masked(make_client: Callable[..., Any]) -> None:
    # Curators read feedback: a comment or an expected answer a user writes holds no raw personal data on record.
    async with make_client(relocation_model) as (client, _):
        await ingest(client, "pii", [OLD_DOC])
        answer = await ask(client, "pii", "本社の受付時間は？")
        rated = await client.post(
            "/v1/feedback",
            json={
                "tenant": "pii",
                "response_id": answer["response_id"],
                "rating": "down",
                "comment": "Wrong hours; ask taro.yamada@example.co.jp or call 090-1234-5678",
                "expected_answer": "平日9時から18時（問い合わせ: 03-1234-5678）",
            },
        )
        assert rated.status_code == 202, rated.text
        (item,) = await client.app.state.curation.store.feedback_of("pii")
    assert item.comment == "Wrong hours; ask <EMAIL_1> or call <PHONE_1>"
    assert item.expected_answer == "平日9時から18時（問い合わせ: <PHONE_2>）"
