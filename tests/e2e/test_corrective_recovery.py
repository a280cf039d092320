"""End to end on the local model: the first retrieval misses, the corrective pipeline recovers.

The answer needs two documents: "Project Aurora" only names the robot (the K3), the K3 sheet only
gives its payload. With top_k=1 the first retrieval returns the bridge document alone, so plain
RAG cannot answer; the corrective pipeline searches again (a planned hop, or CRAG's search after a
failed answer) and finds the second hop.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pipelines.shared.events import Retrieve, SearchHop, SearchMore
from tests.scripted import events

pytestmark = pytest.mark.e2e
# Past the gateway's 600 s budget (tests/e2e/conftest.py): a loaded machine must not turn slowness into a failure.
TIMEOUT = httpx.Timeout(660.0)
TENANT = "aurora"
QUESTION = "What is the maximum payload of the robot developed under Project Aurora?"
DOCUMENTS = [
    {
        "id": "project-aurora",
        "title": "Project Aurora",
        "text": "Project Aurora is the internal codename for the Kumo Carrier K3, the third-generation warehouse "
        "robot. The project is led by Mei Suzuki and is scheduled to ship in 2026.",
    },
    {
        "id": "k3-spec",
        "title": "Kumo Carrier K3 specification",
        "text": "Kumo Carrier K3 specification sheet. Maximum payload: 300 kg. Battery: 14 hours of continuous "
        "operation. Top speed: 2.0 m/s.",
    },
    {
        "id": "canteen",
        "title": "Canteen",
        "text": "The Osaka canteen is open from 11:30 to 14:00; lunch costs 300 yen.",
    },
    {"id": "parking", "title": "Parking", "text": "Employees park at the north lot; visitors register at reception."},
    {"id": "vpn", "title": "VPN policy", "text": "The VPN must be used on public networks. Updated 1 February 2024."},
]


def ask(gateway_url: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(
        f"{gateway_url}/v1/query", json={"query": QUESTION, "tenant": TENANT, **body}, timeout=TIMEOUT
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.fixture(scope="module")
def aurora(gateway_url: str) -> None:
    response = httpx.post(
        f"{gateway_url}/v1/documents", json={"tenant": TENANT, "documents": DOCUMENTS}, timeout=TIMEOUT
    )
    assert response.status_code == 200, response.text


def test_plain_rag_cannot_answer_from_the_first_retrieval(gateway_url: str, aurora: None) -> None:
    plain = ask(gateway_url, route="single_hop", allow_escalation=False, top_k=1)
    assert events(plain)[0] == Retrieve(k=1, found=1)
    assert [e["id"] for e in plain["evidence"]] in ([], ["project-aurora"])  # the bridge only, or nothing
    assert "300" not in plain["answer"]


def test_corrective_pipeline_finds_the_second_hop_and_answers(gateway_url: str, aurora: None) -> None:
    result = ask(gateway_url, route="multi_hop", top_k=1)
    assert result["route"] == "multi_hop"
    steps = events(result)
    assert steps[0] == Retrieve(k=1, found=1)
    # A planned hop (search_hop) or CRAG's search after a failed answer (search_more) found the second document.
    assert any(isinstance(step, SearchHop | SearchMore) for step in steps), result["steps"]
    assert "k3-spec" in [e["id"] for e in result["evidence"]], (result["steps"], result["answer"])
    assert "300" in result["answer"], result
    assert result["abstained"] is False
    # "answered" when the usefulness critic agrees; the local model's critic sometimes rejects the right answer,
    # and then the run ends on its budget returning the best grounded answer so far (the one asserted above).
    assert result["stop_reason"] in ("answered", "max_llm_calls", "max_rewrites"), result["steps"]
    assert 2 <= result["usage"]["llm_calls"] <= 10
