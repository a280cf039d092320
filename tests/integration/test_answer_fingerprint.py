"""The answer cache's key follows the settings that shape answers, on the real Redis (where replicas share it)."""

from __future__ import annotations

import pytest

from gateway.cache.layer import open_cache
from gateway.providers.redis import open_redis
from gateway.query.schemas import QueryResponse
from gateway.settings import Settings
from pipelines.shared.visibility import Visibility
from tests.integration.conftest import REDIS_TEST_URL

pytestmark = pytest.mark.redis


async def test_switching_the_router_classifier_changes_the_answer_cache_key(
    monkeypatch: pytest.MonkeyPatch, prefix: str
) -> None:
    """An ``auto`` answer was routed by the classifier: after switching it, the cached answer is not served.

    Both layers share one Redis (and so one knowledge version), as two deploys of the gateway do: only
    the settings tell their keys apart. Before the fingerprint was computed from whole settings groups it
    left ``router_classifier`` out, and both deploys read and wrote the same key.
    """
    monkeypatch.setenv("REDIS_URL", REDIS_TEST_URL)
    monkeypatch.setenv("GATEWAY_CACHE_PREFIX", prefix)
    keys = []
    for classifier in ("logistic", "llm"):
        monkeypatch.setenv("GATEWAY_ROUTER_CLASSIFIER", classifier)
        settings = Settings()
        redis = open_redis(settings.redis)
        answers = open_cache(redis, settings.cache).answers(QueryResponse, namespace=settings.answer_fingerprint())
        assert redis is not None
        try:
            params = {"top_k": None, "allow_escalation": True}
            keys.append(
                await answers.key_for(
                    "default", "auto", "How do I reset the VPN?", params, visibility=Visibility.everything()
                )
            )
        finally:
            await redis.aclose()
    assert keys[0] is not None
    assert keys[0] != keys[1]
