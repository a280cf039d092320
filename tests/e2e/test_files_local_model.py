"""Files in, answered on the real local model: a Word file and a PDF in English, a PDF in Japanese, each uploaded
through ``POST /v1/files`` to a tenant of its own and asked the fact it holds; the best source names its section."""

from __future__ import annotations

import httpx
import pytest

from tests.sample_files import FACTS, sample

pytestmark = pytest.mark.e2e
TIMEOUT = httpx.Timeout(660.0)  # past the gateway's 600 s budget (tests/e2e/conftest.py)


@pytest.mark.parametrize(("kind", "lang"), [("docx", "en"), ("pdf", "en"), ("pdf", "ja")])
def test_an_uploaded_file_answers_its_question_from_its_section(gateway_url: str, kind: str, lang: str) -> None:
    fact = FACTS[lang]
    tenant = f"files-{kind}-{lang}"
    name, data = sample(kind, lang)
    uploaded = httpx.post(
        f"{gateway_url}/v1/files", params={"tenant": tenant}, files=[("files", (name, data))], timeout=TIMEOUT
    )
    assert uploaded.status_code == 200, uploaded.text
    body = {"query": fact.question, "tenant": tenant, "route": "single_hop", "include_passages": True}
    result = httpx.post(f"{gateway_url}/v1/query", json=body, timeout=TIMEOUT).json()
    assert not result["abstained"], result
    assert result["sources"][0]["id"] == name
    assert result["sources"][0]["section"].startswith(f"{fact.chapter} › {fact.section}")
    held = fact.answer in result["answer"] or (lang == "en" and "4" in result["answer"])
    assert held, result["answer"]
