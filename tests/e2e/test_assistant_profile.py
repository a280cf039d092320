"""On the real local model: asked who it is, ``direct`` answers with the tenant's assistant name, in the
question's language (it answered "I am an AI language model created by OpenAI" before profiles)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from pipelines.shared.events import Generate
from tests.scripted import events

pytestmark = pytest.mark.e2e
# Past the gateway's 600 s budget (tests/e2e/conftest.py): a loaded machine must not turn slowness into a failure.
TIMEOUT = httpx.Timeout(660.0)
TENANT = "zentrix"
NAME = "Zentrix"
KANA = re.compile(r"[\u3040-\u30ff]")
VENDORS = ("openai", "alibaba", "qwen", "chatgpt")


@pytest.fixture(scope="module")
def profiled_tenant(gateway_url: str) -> str:
    profile = {"tenant": TENANT, "name": NAME, "persona": "the IT help desk assistant of Kumo Robotics"}
    response = httpx.put(f"{gateway_url}/v1/assistant-profile", json=profile, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.json()["configured"] is True
    return TENANT


def ask(gateway_url: str, query: str) -> dict[str, Any]:
    body = {"query": query, "tenant": TENANT, "route": "direct"}
    response = httpx.post(f"{gateway_url}/v1/query", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    assert result["route"] == "direct"
    assert events(result) == [Generate(mode="direct")]
    return result


@pytest.mark.parametrize("question", ["Who are you?", "What is your name?"])
def test_direct_introduces_the_tenants_assistant_in_english(
    gateway_url: str, profiled_tenant: str, question: str
) -> None:
    answer = ask(gateway_url, question)["answer"]
    assert NAME.lower() in answer.lower(), answer
    assert not KANA.search(answer), answer
    assert not any(vendor in answer.lower() for vendor in VENDORS), answer


@pytest.mark.parametrize("question", ["あなたは誰ですか？", "あなたの名前は何ですか？"])
def test_direct_introduces_the_tenants_assistant_in_japanese(
    gateway_url: str, profiled_tenant: str, question: str
) -> None:
    answer = ask(gateway_url, question)["answer"]
    assert NAME.lower() in answer.lower(), answer
    assert KANA.search(answer), answer  # Japanese, not an English reply to a Japanese question
    assert not any(vendor in answer.lower() for vendor in VENDORS), answer
