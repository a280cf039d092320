"""The curators' review page in a real headless browser: Debian's chromium driven by Playwright.

The relocation scenario on a live gateway (uvicorn, scripted model, SQLite store, an admin API key): the curator
signs in to the console with the key; the gap shows up on the page diagnosed ``knowledge_gap``; the curator fills
in the new-address document and the rules and submits; the result page shows the gap closed with the score risen
and the breakdown; the next identical query through the API answers with the new address, uncached.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import async_playwright
from pydantic import SecretStr

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import ApiKeyConfig, Settings
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, serving
from tests.curation_support import FORM_RULES, NEW_ADDRESS, NEW_DOC, OLD_DOC, OTHER_DOCS, QUESTION, relocation_model
from tests.fakes.scripted_chat import ScriptedChatModel

pytestmark = pytest.mark.browser

KEY = "curator-key-for-the-browser-test"


@pytest.fixture
def live_gateway(settings: Settings, embeddings: USEEmbeddings, tmp_path: Path) -> Iterator[str]:
    """The gateway on a free port, served by uvicorn in a thread of its own (its own event loop)."""
    key = ApiKeyConfig(
        name="curator", key_sha256=hashlib.sha256(KEY.encode()).hexdigest(), tenant="acme", scopes=["query", "admin"]
    )
    configured = settings.replace(
        access={"api_keys": [key]},
        curation={"database_url": SecretStr(f"sqlite+aiosqlite:///{tmp_path}/browser.db")},
    )
    app = create_app(
        configured, ProviderOverrides(chat_model=ScriptedChatModel(responder=relocation_model), embeddings=embeddings)
    )
    with serving(app) as url:
        yield url


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed: run `make chromium`")
async def test_a_curator_closes_the_relocation_gap_from_the_review_page(live_gateway: str) -> None:
    headers = {"x-api-key": KEY}
    async with httpx.AsyncClient(base_url=live_gateway, headers=headers, timeout=60) as api:
        ingested = await api.post("/v1/documents", json={"documents": [OLD_DOC, *OTHER_DOCS]})
        assert ingested.status_code == 200, ingested.text
        first = (await api.post("/v1/query", json={"query": QUESTION, "route": "single_hop"})).json()
        assert "丸の内" in first["answer"]
        rated = await api.post(
            "/v1/feedback",
            json={"response_id": first["response_id"], "rating": "down", "expected_answer": "東京都渋谷区神南2-3-4"},
        )
        assert rated.json()["recorded"]

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            await page.goto(f"{live_gateway}/console/review/")  # no session: the console asks to sign in first
            assert "/console/sign-in" in page.url
            await page.fill("input[name=key]", KEY)
            await page.click("button[type=submit]")
            await page.wait_for_url("**/console/review**")
            gap = page.locator("section.gap").first
            assert await gap.get_attribute("data-diagnosis") == "knowledge_gap"
            assert QUESTION in await gap.locator("h2").inner_text()
            await gap.locator("input[name=doc_id]").fill(NEW_DOC["id"])
            await gap.locator("input[name=title]").fill(NEW_DOC["title"])
            await gap.locator("textarea[name=text]").fill(NEW_DOC["text"])
            for field, value in FORM_RULES.items():
                await gap.locator(f"textarea[name={field}]").fill(value)
            await gap.locator("button[type=submit]").click()
            await page.wait_for_selector("#status")
            assert await page.locator("#status").inner_text() == "closed"
            before = float(await page.locator("#score-before").inner_text())
            after = float(await page.locator("#score-after").inner_text())
            assert after > before
            assert NEW_ADDRESS in await page.locator(".answer-after").first.inner_text()
            assert "丸の内ビル5階" in await page.locator(".answer-before").first.inner_text()
            assert await page.locator("tr.rule").count() == 3
            print(f"review page: score {before} -> {after}")
        finally:
            await browser.close()

    async with httpx.AsyncClient(base_url=live_gateway, headers=headers, timeout=60) as api:
        again = (await api.post("/v1/query", json={"query": QUESTION, "route": "single_hop"})).json()
        assert NEW_ADDRESS in again["answer"]
        assert again["cached"] is False
