"""The console in Debian's chromium, driven by Playwright, on a live gateway (uvicorn, scripted model, real Redis
for the knowledge versions, an admin key of tenant ``acme``).

Sign in; upload a folder holding an English Markdown manual and a Japanese PDF, each file with its own progress
and outcome; open the PDF's chunks under their sections; ask in the playground and see the route, the waterfall
and the citation linked to its passage; delete the Markdown document and see the version move; ask again and see
the deleted document gone from the evidence. Screenshots go to ``CONSOLE_SCREENSHOTS`` (default
``reports/screenshots/console``), one per step: look at them, Japanese included (fonts-noto-cjk).
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from playwright.async_api import Page, async_playwright

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import ApiKeyConfig, Settings
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, serving
from tests.fakes.scripted_chat import ScriptedChatModel
from tests.sample_files import FACTS, sample

pytestmark = [pytest.mark.browser, pytest.mark.redis]

KEY = "acme-admin-key-for-the-console-test"
REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
SCREENSHOTS = Path(os.environ.get("CONSOLE_SCREENSHOTS", "reports/screenshots/console"))
_FIRST_PASSAGE = re.compile(r"\[1\] \(.*?\) (.+?(?:[.!?](?=\s)|[。！？]))", re.DOTALL)


def quoting_model(messages: list[BaseMessage], _: dict[str, Any]) -> str:
    """Answers with passage 1's first sentence, cited: grounded, so the sentence gate lets it through."""
    last = str(messages[-1].content)
    found = _FIRST_PASSAGE.search(last)
    if "Context passages" in last and found:
        return f"{found.group(1).strip()} [1]"
    return "Hello! I am the company assistant."


@pytest.fixture
def live_gateway(settings: Settings, embeddings: USEEmbeddings) -> Iterator[str]:
    key = ApiKeyConfig(
        name="acme-admin", key_sha256=hashlib.sha256(KEY.encode()).hexdigest(), tenant="acme", scopes=["admin"]
    )
    configured = settings.replace(
        access={"api_keys": [key]},
        redis={"url": REDIS_TEST_URL},
        cache={"prefix": f"console-test-{uuid.uuid4().hex[:8]}"},
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    model = ScriptedChatModel(responder=quoting_model)
    with serving(create_app(configured, ProviderOverrides(chat_model=model, embeddings=embeddings))) as url:
        yield url


async def shot(page: Page, name: str) -> None:
    await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


async def version(page: Page) -> int:
    return int(await page.locator("#version").inner_text())


async def ask(page: Page, question: str) -> None:
    await page.goto(page.url.split("/console/")[0] + "/console/playground/")
    await page.fill("textarea[name=query]", question)
    await page.click("#ask button[type=submit]")
    await page.wait_for_selector("#result")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed: run `make chromium`")
async def test_a_team_fills_its_knowledge_base_asks_and_deletes_from_the_console(
    live_gateway: str, tmp_path: Path
) -> None:
    folder = tmp_path / "manuals"
    (folder / "ja").mkdir(parents=True)
    md_name, md = Path(sample("md", "en")[0]).name, sample("md", "en")[1]
    pdf_name, pdf = Path(sample("pdf", "ja")[0]).name, sample("pdf", "ja")[1]
    (folder / md_name).write_bytes(md)
    (folder / "ja" / pdf_name).write_bytes(pdf)
    md_id, pdf_id = f"manuals/{md_name}", f"manuals/ja/{pdf_name}"

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            await page.goto(f"{live_gateway}/console/knowledge/")
            assert "/console/sign-in" in page.url
            await page.fill("input[name=key]", "not-the-key")
            await page.click("button[type=submit]")
            assert await page.locator("#sign-in-error").inner_text() == "That key is not valid."
            await page.fill("input[name=key]", KEY)
            await shot(page, "01-sign-in")
            await page.click("button[type=submit]")
            await page.wait_for_url("**/console/knowledge**")
            assert await page.locator("#tenant").inner_text() == "acme"
            cookies = {c["name"]: c for c in await page.context.cookies()}
            session = cookies["gateway_console"]
            assert session["httpOnly"]
            assert session["sameSite"] == "Strict"
            assert KEY not in session["value"]

            empty_version = await version(page)
            await page.set_input_files("#folder", str(folder))
            await page.click("#upload")
            await page.wait_for_selector("body[data-uploaded='2']")
            rows = page.locator("#uploads tr.upload")
            outcomes = {
                await rows.nth(i).locator("td").nth(0).inner_text(): await rows.nth(i).locator("td").nth(2).inner_text()
                for i in range(await rows.count())
            }
            assert set(outcomes) == {md_id, pdf_id}
            assert all(text.startswith("indexed:") for text in outcomes.values()), outcomes
            uploaded_version = await version(page)
            assert uploaded_version > empty_version
            assert await page.locator("tr.document").count() == 2  # the list refreshed in place
            await shot(page, "02-uploaded")

            await page.click(f"tr.document[data-id='{pdf_id}'] a")
            fact = FACTS["ja"]
            sections = await page.locator(".chunk .section").all_inner_texts()
            assert any(s.startswith(f"{fact.chapter} › {fact.section}") for s in sections), sections
            await shot(page, "03-document-ja")

            await ask(page, fact.question)
            assert await page.locator("#route").inner_text() in ("single_hop", "multi_hop")
            steps = await page.locator("#waterfall .step").evaluate_all("rows => rows.map(r => r.dataset.step)")
            assert steps[:2] == ["cache_lookup", "route"]
            assert "retrieve" in steps
            widths = await page.locator("#waterfall .bar").evaluate_all("bars => bars.map(b => b.style.width)")
            assert all(w.endswith("%") for w in widths)
            assert fact.answer in await page.locator("#answer").inner_text()
            await page.click("#answer a.cite")
            assert page.url.endswith("#passage-1")
            assert fact.answer in await page.locator("#passage-1").inner_text()
            assert await page.locator("#probe tr.signal").count() > 0
            await shot(page, "04-playground-ja")

            await ask(page, FACTS["en"].question)
            assert md_id in await page.locator("#evidence").inner_text()
            await shot(page, "05-playground-en")

            await page.goto(f"{live_gateway}/console/knowledge/")
            await page.click(f"tr.document[data-id='{md_id}'] button.delete")
            await page.wait_for_selector("#deleted")
            assert await page.locator("tr.document").count() == 1
            deleted_version = await version(page)
            assert deleted_version > uploaded_version
            await shot(page, "06-deleted")

            await ask(page, FACTS["en"].question)
            assert md_id not in await page.locator("#evidence").inner_text()
            assert await page.locator("#result").get_attribute("data-cached") == "false"  # the version moved on
            await shot(page, "07-asked-again")

            await page.click("header button[type=submit]")  # sign out
            await page.goto(f"{live_gateway}/console/knowledge/")
            assert "/console/sign-in" in page.url
        finally:
            await browser.close()
