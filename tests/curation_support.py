"""The relocation scenario shared by the curation cycle tests (API, PostgreSQL, browser)."""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import BaseMessage
from litestar.testing import AsyncTestClient

from tests.scripted import structured_reply

TENANT = "acme"
QUESTION = "現在の本社オフィスの住所を教えてください。"
OLD_DOC = {
    "id": "office-2019",
    "title": "本社オフィスの所在地",
    "text": "当社の本社オフィスは東京都千代田区丸の内1-1-1 丸の内ビル5階にあります。受付は平日9時から18時までです。",
}
OTHER_DOCS = [
    {
        "id": "vacation",
        "title": "休暇制度",
        "text": "年次有給休暇は入社半年後に10日付与されます。申請は勤怠システムから行います。",
    },
    {
        "id": "expenses",
        "title": "経費精算",
        "text": "経費は発生から30日以内に精算システムで申請してください。領収書の画像を添付します。",
    },
]
NEW_DOC = {
    "id": "office-2024",
    "title": "本社オフィス移転のお知らせ",
    "text": "2024年4月1日、本社オフィスは東京都渋谷区神南2-3-4 神南タワー10階に移転しました。"
    "旧所在地での業務は終了しています。",
}
NEW_ADDRESS = "渋谷区神南2-3-4"
OLD_AS_CURRENT = "丸の内ビル5階にあります"
RULES = [
    {"kind": "must_contain", "value": NEW_ADDRESS, "weight": 2.0},
    {"kind": "must_not_contain", "value": OLD_AS_CURRENT, "weight": 2.0},
    {"kind": "pattern", "value": r"2024年0?4月0?1日", "weight": 1.0},
]
# The rules as the review page's form takes them (one per line, "weight | text").
FORM_RULES = {
    "must_contain": f"2 | {NEW_ADDRESS}",
    "must_not_contain": f"2 | {OLD_AS_CURRENT}",
    "pattern": RULES[2]["value"],
}


def _passages(prompt: str) -> list[str]:
    return [m.split(") ", 1)[1].strip() for m in re.findall(r"\[\d+\] (.*?)(?=\n\n\[\d+\] |\Z)", prompt, re.S)]


def relocation_model(messages: list[BaseMessage], kwargs: dict[str, Any]) -> str:
    """A scripted model: answers from the passage announcing a move if there is one (as a careful model
    would), else from the first; the judge scores an answer naming the new address high."""
    prompt = str(messages[-1].content)
    if "Answer to grade" in prompt:
        graded = prompt.split("Answer to grade:", 1)[1]
        if NEW_ADDRESS in graded:
            return json.dumps({"score": 1.0, "reason": "states the new Shibuya address and the move date"})
        return json.dumps({"score": 0.2, "reason": "gives the old Marunouchi address as current"})
    structured = structured_reply(kwargs)
    if structured is not None:
        return structured
    if "Context passages" not in prompt:
        return "こんにちは。"
    passages = _passages(prompt.split("Context passages", 1)[1])
    index = next((i for i, p in enumerate(passages) if "移転" in p), 0)
    return f"{passages[index].split(chr(10) + chr(10), 1)[0]} [{index + 1}]" if passages else "わかりません。"


async def ingest(client: AsyncTestClient[Any], tenant: str, documents: list[dict[str, Any]]) -> None:
    response = await client.post("/v1/documents", json={"tenant": tenant, "documents": documents})
    assert response.status_code == 200, response.text


async def ask(client: AsyncTestClient[Any], tenant: str, query: str, **extra: Any) -> dict[str, Any]:
    response = await client.post("/v1/query", json={"query": query, "tenant": tenant, "route": "single_hop", **extra})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def gaps(client: AsyncTestClient[Any], tenant: str) -> list[dict[str, Any]]:
    response = await client.get("/v1/knowledge-gaps", params={"tenant": tenant})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["gaps"]
    return found


async def relocation_cycle(client: AsyncTestClient[Any]) -> dict[str, Any]:
    """The relocation scenario through the API; returns the resolution. Asserts every step."""
    await ingest(client, TENANT, [OLD_DOC, *OTHER_DOCS])
    first = await ask(client, TENANT, QUESTION)
    assert "丸の内" in first["answer"]
    assert first["response_id"].startswith("resp_")

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
    assert rated.json()["linked"]
    assert rated.json()["recorded"]

    (gap,) = await gaps(client, TENANT)
    assert gap["diagnosis"] == "knowledge_gap", gap
    assert gap["examples"] == [QUESTION]
    assert gap["count"] == 1
    assert "negative_feedback" in gap["reasons"]
    assert all(not p["answers"] for p in gap["evidence"]["best_passages"])

    resolved = await client.post(
        f"/v1/knowledge-gaps/{gap['id']}/resolution",
        json={"tenant": TENANT, "documents": [NEW_DOC], "rules": RULES},
    )
    assert resolved.status_code == 200, resolved.text
    result: dict[str, Any] = resolved.json()
    case = result["cases"][0]
    assert result["closed"]
    assert result["score_after"] > result["score_before"]
    assert [r["passed"] for r in case["before"]["rules"]] == [False, False, False]
    assert [r["passed"] for r in case["after"]["rules"]] == [True, True, True]
    assert case["before"]["judge"]["score"] < case["after"]["judge"]["score"]
    assert NEW_ADDRESS in case["after"]["answer"]
    assert "丸の内ビル5階" in case["before"]["answer"]

    again = await ask(client, TENANT, QUESTION)
    assert NEW_ADDRESS in again["answer"]
    assert again["cached"] is False
    assert gap["id"] not in [g["id"] for g in await gaps(client, TENANT)]  # closed: off the open list

    up = await client.post("/v1/feedback", json={"tenant": TENANT, "response_id": again["response_id"], "rating": "up"})
    assert up.status_code == 202
    assert up.json()["linked"]
    exported = await client.get("/v1/training-pairs", params={"tenant": TENANT})
    assert exported.status_code == 200
    rows = [json.loads(line) for line in exported.text.splitlines()]
    tenant_open = client.app.state.identity.nobody.visibility.key()  # no user named: what the tenant may all read
    assert {
        "question": QUESTION,
        "positive_ids": ["office-2024"],
        "negative_ids": ["office-2019"],
        "source": "resolution",
        "tenant": TENANT,
        "user_id": None,
        "visibility": tenant_open,
    } in rows
    feedback_rows = [(r["positive_ids"], r["negative_ids"]) for r in rows if r["source"] == "feedback"]
    assert (["office-2024"], []) in feedback_rows  # rated up: what it cited answers the question
    assert ([], ["office-2019"]) in feedback_rows  # rated down: what it cited does not
    return result
