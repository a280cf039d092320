"""Checked streaming on the real local model: the streamed text is the answer, at temperature 0 the same text as
without streaming, and the cache replays it as it was streamed.

The gateway runs on a model server that decodes a request the same whatever ran before it (one slot, no prompt
cache: ``repeatable_gateway_url``), so a difference is the gateway's, not llama.cpp's floating point. Each question
is asked three times: streamed on one tenant, not streamed on a second tenant holding the same
documents (so neither is a cache hit), and streamed again on the first (the in-process cache's replay). English
and Japanese, ``single_hop`` and ``multi_hop``: the written knowledge base's documents (``routes/data``), a SQuAD
paragraph and a JSQuAD one.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from pipelines.shared.events import Generate, Withhold
from routes.offline.eval.datasets import load
from routes.offline.eval.sentence_answers import DATA
from routes.written_kb import load_written_kb
from tests.e2e.conftest import REPEATABLE_BUDGET_S
from tests.scripted import events

pytestmark = pytest.mark.e2e
TIMEOUT = httpx.Timeout(REPEATABLE_BUDGET_S + 60.0)  # past the repeatable gateway's budget


def _paragraph(file: str, question_id: str) -> tuple[list[dict[str, str]], str]:
    dataset = load(DATA / file)
    question = next(q for q in dataset.questions if q.id == question_id)
    documents = [d for d in dataset.documents if d["id"] in question.gold_doc_ids]
    return documents, question.text


def _written(lang: str, ids: set[str] | None = None) -> list[dict[str, str]]:
    documents = [d for d in load_written_kb().documents if d.lang == lang and (ids is None or d.id in ids)]
    return [{"id": d.id, "title": d.title, "text": d.text} for d in documents]


# The company's teams, products and offices (two of them the bridge, the rest look-alikes), not the whole knowledge
# base: the model server here reads every prompt from its first token, and eight long passages double the cost.
HALVORSEN = {
    "en-beacon",
    "en-beacon-lite",
    "en-team-telemetry",
    "en-team-warehouse",
    "en-lisbon",
    "en-austin",
    "en-rotterdam",
}


SQUAD_DOCS, SQUAD_QUESTION = _paragraph("squad_v2_dev_normans.json", "56ddde6b9a695914005b9629")
JSQUAD_DOCS, JSQUAD_QUESTION = _paragraph("jsquad_valid_sample.json", "a10336p0q1")
CASES = {
    "single_hop-en": ("gateway-single-hop", SQUAD_DOCS, SQUAD_QUESTION),
    "single_hop-ja": ("gateway-single-hop", JSQUAD_DOCS, JSQUAD_QUESTION),
    "multi_hop-en": (
        "gateway-multi-hop",
        _written("en", HALVORSEN),
        "How many people work at the office where the team that develops Beacon is based?",
    ),
    "multi_hop-ja": (
        "gateway-multi-hop",
        _written("ja"),
        "1ユーザーあたり50GBのストレージが使えるプランでは、APIを1分間に何回まで呼び出せますか？",
    ),
}


def _ingest(gateway_url: str, tenant: str, documents: list[dict[str, str]]) -> None:
    body = {"tenant": tenant, "documents": [{"id": d["id"], "title": d["title"], "text": d["text"]} for d in documents]}
    response = httpx.post(f"{gateway_url}/v1/documents", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text


def _chat(model: str, tenant: str, question: str, stream: bool) -> dict[str, Any]:
    return {"model": model, "tenant": tenant, "stream": stream, "messages": [{"role": "user", "content": question}]}


def _streamed(gateway_url: str, body: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    chunks: list[str] = []
    final: dict[str, Any] = {}
    with httpx.stream("POST", f"{gateway_url}/v1/chat/completions", json=body, timeout=TIMEOUT) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            payload = json.loads(line[6:])
            assert "error" not in payload, payload
            choice = payload["choices"][0] if payload.get("choices") else {}
            if choice.get("delta", {}).get("content"):
                chunks.append(choice["delta"]["content"])
            if choice.get("finish_reason"):
                final = payload["gateway"]
    return chunks, final


@pytest.mark.parametrize("case", sorted(CASES))
def test_streamed_equals_not_streamed_and_the_replay_equals_the_stream(repeatable_gateway_url: str, case: str) -> None:
    gateway_url = repeatable_gateway_url
    model, documents, question = CASES[case]
    live, whole = f"stream-{case}", f"whole-{case}"
    _ingest(gateway_url, live, documents)
    _ingest(gateway_url, whole, documents)

    chunks, info = _streamed(gateway_url, _chat(model, live, question, stream=True))
    response = httpx.post(
        f"{gateway_url}/v1/chat/completions", json=_chat(model, whole, question, stream=False), timeout=TIMEOUT
    )
    assert response.status_code == 200, response.text
    completion = response.json()
    replayed, replay_info = _streamed(gateway_url, _chat(model, live, question, stream=True))

    text = "".join(chunks)
    assert text == completion["choices"][0]["message"]["content"], (info["steps"], completion["gateway"]["steps"])
    held = [e for e in events(info) if isinstance(e, Withhold)]
    assert held == [e for e in events(completion["gateway"]) if isinstance(e, Withhold)]
    assert any(isinstance(e, Generate) for e in events(info))
    assert info["cached"] is False
    if not info["abstained"]:  # an abstention is not kept (it failed its checks): asked again, it is computed again
        assert replay_info["cached"] is True
        assert replayed == chunks
    else:
        assert "".join(replayed) == text
