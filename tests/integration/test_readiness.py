"""/readyz against the real Redis, and 503s that name the dependency that is down."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.settings import Settings
from tests.fakes.identity_provider import AUDIENCE, ISSUER, JwksServer, jwks_server, rsa_key, token

REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")


@pytest.mark.redis  # the other tests point at ports where nothing listens: no Redis needed
async def test_ready_when_redis_answers(make_client: Any, settings: Settings) -> None:
    async with make_client(settings_override=settings.replace(redis={"url": REDIS_TEST_URL})) as (client, _):
        response = await client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"llm": "ok", "vector_store": "ok", "redis": "ok", "curation_store": "ok"}


async def test_redis_down_is_reported_degraded_and_queries_still_answer(make_client: Any, settings: Settings) -> None:
    down = settings.replace(redis={"url": "redis://127.0.0.1:1/0"})
    async with make_client(settings_override=down) as (client, _):
        response = await client.get("/readyz")
        alive = await client.get("/healthz")
        answered = await client.post("/v1/query", json={"query": "hello", "route": "direct"})
    assert response.status_code == 200  # still serving: answers are computed without the cache
    body = response.json()
    assert body["status"] == "degraded"
    assert body["checks"]["redis"].startswith("degraded: error")
    assert body["checks"]["llm"] == "ok"
    assert "identity_provider" not in body["checks"]  # no provider configured: nothing to check
    assert alive.status_code == 200
    assert answered.status_code == 200
    assert answered.json()["cached"] is False


async def test_llm_down_is_reported_degraded_not_unready(settings: Settings, embeddings: Any) -> None:
    """No scripted model here: the real ChatOpenAI wiring, pointed at a port where nothing listens.

    The LLM is shared by every replica: were its outage to fail readiness, every pod would leave the
    Service at once and even cached answers would stop. So the pod stays ready, says what is degraded,
    and questions fail fast with problem details naming the provider."""
    app = create_app(settings, ProviderOverrides(embeddings=embeddings))
    async with AsyncTestClient(app) as client:
        response = await client.get("/readyz")
        query = await client.post("/v1/query", json={"query": "hello", "route": "direct"})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    assert body["checks"]["llm"].startswith("degraded: error")
    assert "127.0.0.1:9" in body["checks"]["llm"]
    assert body["checks"]["vector_store"] == "ok"
    assert body["llm"] == {"primary": "closed"}
    assert query.status_code == 503
    assert query.headers["content-type"].startswith("application/problem+json")
    assert query.json()["provider"] == "llm"


@pytest.fixture
def idp() -> Iterator[JwksServer]:
    with jwks_server(rsa_key("readiness-key")) as server:
        yield server


def with_idp(settings: Settings, idp: JwksServer) -> Settings:
    """Open mode (no keys: tokens are taken as sent) with an identity provider, and its default interval of 30 s
    between two fetches of its keys."""
    return settings.replace(identity={"issuer": ISSUER, "audience": AUDIENCE, "jwks_url": idp.url})


async def test_the_identity_providers_keys_are_fetched_at_start_up_and_probes_read_them(
    make_client: Any, settings: Settings, idp: JwksServer
) -> None:
    async with make_client(settings_override=with_idp(settings, idp)) as (client, _):
        assert idp.fetched() == 1  # before the first request
        probes = [await client.get("/readyz") for _ in range(5)]
    assert {response.status_code for response in probes} == {200}
    assert {response.json()["checks"]["identity_provider"] for response in probes} == {"ok"}
    assert idp.fetched() == 1  # fresh keys: no probe fetched them again


async def test_an_identity_provider_down_degrades_readiness_and_probes_do_not_hammer_it(
    make_client: Any, settings: Settings, idp: JwksServer
) -> None:
    """Down at start-up: the gateway starts anyway and answers requests naming no user; readiness says what is
    wrong and where, and five probes within the 30 s between fetches cost the provider no request at all."""
    idp.status = 503
    async with make_client(settings_override=with_idp(settings, idp)) as (client, _):
        assert idp.fetched() == 1  # the start-up's try
        probes = [await client.get("/readyz") for _ in range(5)]
        answered = await client.post("/v1/query", json={"query": "hello", "route": "direct"})
        key = rsa_key("readiness-key")
        by_token = await client.post(
            "/v1/query", json={"query": "hello", "route": "direct"}, headers={"X-Gateway-User-Token": token(key)}
        )
        metrics = client.app.state.telemetry.metrics
        assert metrics is not None
        registry = metrics.registry
        gauge = registry.get_sample_value("gateway_dependency_up", {"dependency": "identity_provider"})
        went_down = registry.get_sample_value(
            "gateway_dependency_transitions_total", {"dependency": "identity_provider", "state": "down"}
        )
    host = idp.url.split("/")[2]
    assert {response.status_code for response in probes} == {200}  # degradable: the pod stays in service
    for response in probes:
        body = response.json()
        assert body["status"] == "degraded"
        assert body["checks"]["identity_provider"] == (
            f"degraded: error: No signing keys from {host}: The identity provider's JWKS answered 503."
        )
        assert body["checks"]["vector_store"] == "ok"
    assert answered.status_code == 200, answered.text
    assert by_token.status_code == 503, by_token.text
    assert by_token.json()["provider"] == "identity_provider"
    assert "answered 503" in by_token.json()["detail"]
    assert idp.fetched() == 1  # neither the probes nor the token fetched again within the interval
    assert (gauge, went_down) == (0.0, 1.0)
