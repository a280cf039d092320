"""The response cache through the HTTP API, on the real Redis: hits, invalidation, tenant isolation."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from gateway.query.steps import SemanticCacheHit
from gateway.settings import Settings
from routes.calibration import Calibration
from tests.scripted import answer_with_first_passage, events

pytestmark = pytest.mark.redis

REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")


def cached_settings(settings: Settings) -> Settings:
    """A generous Redis budget: these tests are about caching behaviour (test_cache_outage is about timeouts),
    and a loaded machine can stall a first call, connection set-up included, past the production 50 ms."""
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    return settings.replace(redis={"url": REDIS_TEST_URL, "timeout_s": 0.5}, cache={"prefix": prefix})


async def upsert(client: Any, tenant: str, text: str) -> None:
    body = {"tenant": tenant, "documents": [{"id": "leave", "title": "Leave", "text": text}]}
    assert (await client.post("/v1/documents", json=body)).status_code == 200


async def ask(client: Any, tenant: str, query: str = "How many days of annual leave?") -> dict[str, Any]:
    response = await client.post("/v1/query", json={"tenant": tenant, "query": query, "route": "single_hop"})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_repeat_is_a_hit_with_zero_new_usage(make_client: Any, settings: Settings) -> None:
    async with make_client(answer_with_first_passage, settings_override=cached_settings(settings)) as (client, model):
        await upsert(client, "acme", "Acme employees get 25 days of annual leave.")
        first = await ask(client, "acme")
        calls_after_first = len(model.calls)
        again = await ask(client, "acme", "  how many DAYS of annual leave?  ")  # normalised to the same key
    assert first["cached"] is False
    assert first["usage"]["llm_calls"] == 1
    assert again["cached"] is True
    assert again["usage"] == {"llm_calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
    assert again["answer"] == first["answer"]
    assert len(model.calls) == calls_after_first  # no model call for the hit


async def test_changed_document_is_never_answered_from_the_cache(make_client: Any, settings: Settings) -> None:
    async with make_client(answer_with_first_passage, settings_override=cached_settings(settings)) as (client, _):
        await upsert(client, "acme", "Acme employees get 25 days of annual leave.")
        before = await ask(client, "acme")
        await upsert(client, "acme", "Acme employees get 28 days of annual leave.")
        after = await ask(client, "acme")
        assert (await client.delete("/v1/documents/leave?tenant=acme")).status_code == 200
        gone = await ask(client, "acme")
    assert "25 days" in before["answer"]
    assert after["cached"] is False
    assert "28 days" in after["answer"]
    assert gone["cached"] is False
    assert gone["abstained"]


async def test_same_query_two_tenants_two_answers(make_client: Any, settings: Settings) -> None:
    async with make_client(answer_with_first_passage, settings_override=cached_settings(settings)) as (client, _):
        await upsert(client, "acme", "Acme employees get 25 days of annual leave.")
        await upsert(client, "globex", "Globex employees get 30 days of annual leave.")
        acme = await ask(client, "acme")
        globex = await ask(client, "globex")
    assert "25 days" in acme["answer"]
    assert "30 days" in globex["answer"]
    assert globex["cached"] is False


async def test_semantic_cache_serves_a_paraphrase_but_not_a_contrast(
    make_client: Any, settings: Settings, calibration: Calibration
) -> None:
    semantic = cached_settings(settings).replace(semantic_cache={"enabled": True})
    async with make_client(answer_with_first_passage, settings_override=semantic) as (client, model):
        await upsert(client, "acme", "In 2023 Acme employees got 25 days of annual leave; in 2024 they got 27.")
        first = await ask(client, "acme", "How many days of annual leave did employees get in 2023?")
        paraphrase = await ask(client, "acme", "In 2023, how many days of annual leave did employees get?")
        other_year = await ask(client, "acme", "How many days of annual leave did employees get in 2024?")
        negated = await ask(client, "acme", "How many days of annual leave did employees not get in 2023?")
    assert first["cached"] is False
    assert paraphrase["cached"] is True
    assert paraphrase["answer"] == first["answer"]
    (hit,) = events(paraphrase)
    assert isinstance(hit, SemanticCacheHit)
    assert hit.similarity >= semantic.semantic_cache.similarity_threshold(calibration)
    assert paraphrase["usage"]["llm_calls"] == 0
    assert other_year["cached"] is False  # a different number never hits (GPTCache issue 694)
    assert negated["cached"] is False  # nor does a negation
    assert sum("Context passages" in str(m[-1].content) for m, _ in model.calls) == 3
