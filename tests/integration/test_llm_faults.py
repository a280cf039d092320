"""Upstream faults end to end: the real ChatOpenAI wiring against a real HTTP upstream that injects them.

Each test scripts :class:`tests.fakes.openai_server.FakeOpenAI` (429 with Retry-After, 5xx bursts,
hangs, refused connections, streams cut mid-way) and asks the gateway over HTTP; what is asserted
is what a client sees (status, problem details, Retry-After, time) and what the upstream received.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import Settings
from tests.fakes.openai_server import Answer, Cut, FakeOpenAI, Hang, Status

REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
DIRECT = {"route": "direct"}
# Small numbers so a test takes a second, not a minute: the policy is the production one.
FAST = {
    "timeout_s": 2.0,
    "max_retries": 2,
    "retry_backoff_s": 0.05,
    "retry_max_backoff_s": 0.2,
    "breaker_failures": 3,
    "breaker_cooldown_s": 0.6,
}


@pytest.fixture
def upstream() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(name="primary") as server:
        yield server


@pytest.fixture
def backup() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(Answer("Answered by the fallback."), name="fallback") as server:
        yield server


def against(settings: Settings, primary: FakeOpenAI, fallback: FakeOpenAI | None = None, **endpoint: Any) -> Settings:
    fields: dict[str, Any] = {"base_url": primary.base_url, **FAST, **endpoint}
    if fallback is not None:
        fields |= {"fallback_base_url": fallback.base_url, "fallback_model": "fallback-model"}
    return settings.replace(llm_endpoint=fields, cache={"enabled": False})


@asynccontextmanager
async def gateway(settings: Settings, embeddings: USEEmbeddings) -> AsyncIterator[AsyncTestClient[Any]]:
    """The app with its production LLM wiring (no scripted model)."""
    async with AsyncTestClient(create_app(settings, ProviderOverrides(embeddings=embeddings))) as client:
        yield client


async def ask(client: AsyncTestClient[Any], query: str = "hello there") -> tuple[Any, float]:
    started = time.perf_counter()
    response = await client.post("/v1/query", json={"query": query, **DIRECT})
    return response, time.perf_counter() - started


async def metric(client: AsyncTestClient[Any], name: str, **labels: str) -> float:
    text = (await client.get("/metrics")).text
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}{{{wanted}}} in /metrics")


# --- retries --------------------------------------------------------------------------------------


async def test_a_burst_of_5xx_is_retried_and_answered(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI
) -> None:
    upstream.script(Status(503), Status(500), Answer("Recovered."))
    async with gateway(against(settings, upstream), embeddings) as client:
        response, _ = await ask(client)
        retries = await metric(client, "gateway_llm_retries_total", upstream="primary", reason="http_5xx")
    assert response.status_code == 200
    assert response.json()["answer"] == "Recovered."
    assert upstream.calls == 3  # the SDK's own retries are off: every attempt is ours, counted once
    assert retries == 2


async def test_retries_are_bounded(settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI) -> None:
    upstream.default = Status(500)
    async with gateway(against(settings, upstream, max_retries=1), embeddings) as client:
        response, _ = await ask(client)
    assert response.status_code == 502
    assert response.json()["title"] == "Upstream provider failed"
    assert response.json()["upstream_status"] == 500
    assert upstream.calls == 2


@pytest.mark.parametrize("form", ["seconds", "http-date"])
async def test_retry_after_is_honoured(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI, form: str
) -> None:
    async with gateway(against(settings, upstream, timeout_s=5.0), embeddings) as client:
        # An HTTP date has one-second resolution: ask for 2 s so at least ~1 s remains when it is read. Dated
        # once the app is up: a start-up slower than 2 s on a loaded machine would leave a date already past.
        value = "1" if form == "seconds" else email.utils.formatdate(time.time() + 2, usegmt=True)
        upstream.script(Status(429, retry_after=value), Answer("After waiting."))
        response, _ = await ask(client)
        retries = await metric(client, "gateway_llm_retries_total", upstream="primary", reason="rate_limited")
    assert response.status_code == 200
    first, second = upstream.seen
    assert second.at - first.at >= 0.95  # waited as told (jittered backoff alone is <= 0.2 s here)
    assert retries == 1


async def test_retry_after_beyond_the_budget_fails_fast_with_the_upstreams_retry_after(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI
) -> None:
    upstream.script(Status(429, retry_after="30"))
    async with gateway(against(settings, upstream), embeddings) as client:
        response, took = await ask(client)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "30"
    assert response.json()["title"] == "Upstream provider rate limited"
    assert upstream.calls == 1
    assert took < 1.0  # not 2 s of waiting for a retry that could not be made in time


async def test_a_hanging_upstream_costs_the_call_budget_not_more(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI
) -> None:
    upstream.default = Hang(30)
    async with gateway(against(settings, upstream, timeout_s=1.0), embeddings) as client:
        response, took = await ask(client)
    assert response.status_code == 504
    assert response.json()["title"] == "Upstream provider timed out"
    assert 0.9 <= took < 1.6  # the first attempt used the whole budget: no retry after it
    assert upstream.calls == 1


async def test_refused_connections_are_retried_then_reported_unavailable(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI
) -> None:
    upstream.refuse()
    async with gateway(against(settings, upstream), embeddings) as client:
        response, took = await ask(client)
        retries = await metric(client, "gateway_llm_retries_total", upstream="primary", reason="unavailable")
    assert response.status_code == 503
    assert response.json()["title"] == "Upstream provider unavailable"
    assert retries == 2
    assert took < 1.0


# --- circuit breaker ------------------------------------------------------------------------------


async def test_breaker_opens_after_consecutive_failures_and_fails_fast_without_calling(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI
) -> None:
    upstream.default = Status(500)
    async with gateway(against(settings, upstream, max_retries=0), embeddings) as client:
        failures = [(await ask(client))[0].status_code for _ in range(3)]
        refused, took = await ask(client)
        state = await metric(client, "gateway_llm_breaker_state", upstream="primary")
        opened = await metric(client, "gateway_llm_breaker_transitions_total", upstream="primary", state="open")
    assert failures == [502, 502, 502]
    assert refused.status_code == 503
    assert refused.json()["title"] == "Upstream provider circuit open"
    assert 1 <= int(refused.headers["retry-after"]) <= 1  # ceil of the 0.6 s cool-down left
    assert refused.json()["upstream"] == "primary"
    assert upstream.calls == 3  # the fourth request never reached the upstream
    assert took < 0.5
    assert (state, opened) == (2.0, 1.0)


async def open_breaker_and_wait(client: AsyncTestClient[Any]) -> None:
    """Three failures (FAST's threshold) open the breaker; then its 0.6 s cool-down passes."""
    for _ in range(3):
        await ask(client)
    assert (await ask(client))[0].json()["title"] == "Upstream provider circuit open"
    await asyncio.sleep(0.7)


async def test_half_open_probe_closes_the_breaker_when_the_upstream_is_back(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI
) -> None:
    async with gateway(against(settings, upstream, max_retries=0), embeddings) as client:
        upstream.script(Status(503), Status(503), Status(503))
        upstream.default = Answer("Back again.")  # after the three failures
        await open_breaker_and_wait(client)
        probe, _ = await ask(client)
        after, _ = await ask(client)
        ready = (await client.get("/readyz")).json()
        transitions = {
            state: await metric(client, "gateway_llm_breaker_transitions_total", upstream="primary", state=state)
            for state in ("open", "half_open", "closed")
        }
    assert probe.status_code == 200
    assert after.status_code == 200
    assert upstream.calls == 5  # three failures, the probe, the next call
    assert ready["llm"] == {"primary": "closed"}
    assert transitions == {"open": 1.0, "half_open": 1.0, "closed": 1.0}


async def test_a_failed_probe_opens_the_breaker_again(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI
) -> None:
    upstream.default = Status(500)
    async with gateway(against(settings, upstream, max_retries=0), embeddings) as client:
        await open_breaker_and_wait(client)
        probe, _ = await ask(client)
        refused, _ = await ask(client)
    assert probe.status_code == 502  # the probe reached the upstream and failed
    assert refused.json()["title"] == "Upstream provider circuit open"
    assert upstream.calls == 4


# --- fallback -------------------------------------------------------------------------------------


async def test_fallback_answers_when_the_primary_is_down(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI, backup: FakeOpenAI
) -> None:
    upstream.refuse()
    async with gateway(against(settings, upstream, backup, max_retries=0), embeddings) as client:
        response, took = await ask(client)
        used = await metric(client, "gateway_llm_fallbacks_total", reason="unavailable")
    assert response.status_code == 200
    assert response.json()["answer"] == "Answered by the fallback."
    assert [seen.model for seen in backup.seen] == ["fallback-model"]
    assert used == 1
    assert took < 1.0


async def test_fallback_is_not_used_while_the_primary_answers(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI, backup: FakeOpenAI
) -> None:
    upstream.script(Status(503))  # one blip: retried on the primary, not handed to the fallback
    async with gateway(against(settings, upstream, backup), embeddings) as client:
        responses = [(await ask(client, f"question {i}"))[0] for i in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert backup.calls == 0
    assert upstream.calls == 4


async def test_a_hanging_primary_leaves_the_fallback_half_the_budget(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI, backup: FakeOpenAI
) -> None:
    upstream.default = Hang(30)
    endpoint = {"max_retries": 0, "timeout_s": 1.0, "breaker_failures": 1, "breaker_cooldown_s": 30.0}
    async with gateway(against(settings, upstream, backup, **endpoint), embeddings) as client:
        first, first_took = await ask(client)  # the primary hangs for its half of the budget, then the fallback
        second, second_took = await ask(client)  # the breaker is open: straight to the fallback
        reasons = {
            reason: await metric(client, "gateway_llm_fallbacks_total", reason=reason)
            for reason in ("timeout", "circuit_open")
        }
    assert first.status_code == 200
    assert first.json()["answer"] == "Answered by the fallback."
    assert 0.45 <= first_took < 1.0
    assert second.status_code == 200
    assert second_took < 0.3  # no time spent on the hanging primary
    assert upstream.calls == 1
    assert backup.calls == 2
    assert reasons == {"timeout": 1.0, "circuit_open": 1.0}


# --- caches and readiness while the LLM is down ----------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def test_cached_answers_are_served_while_the_llm_is_down(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI, backend: str
) -> None:
    configured = against(settings, upstream, max_retries=0).replace(
        cache={"enabled": True, "prefix": f"faults-{time.time_ns()}"},
        redis={"url": REDIS_TEST_URL if backend == "redis" else None},
    )
    async with gateway(configured, embeddings) as client:
        first, _ = await ask(client, "what is the capital of France?")
        upstream.refuse()
        again, _ = await ask(client, "what is the capital of France?")
        chat = await client.post(
            "/v1/chat/completions",
            json={
                "model": "gateway-direct",
                "messages": [{"role": "user", "content": "what is the capital of France?"}],
            },
        )
        fresh, _ = await ask(client, "a question nobody asked before")
    assert first.status_code == 200
    assert first.json()["cached"] is False
    assert again.status_code == 200
    assert again.json()["cached"] is True
    assert again.json()["answer"] == first.json()["answer"]
    assert chat.status_code == 200
    assert chat.json()["gateway"]["cached"] is True
    assert upstream.calls == 1  # the cache hits made no LLM call
    assert fresh.status_code == 503


async def test_readiness_reports_the_llm_degraded_and_stays_ready(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI, backup: FakeOpenAI
) -> None:
    upstream.default = Status(500)
    async with gateway(against(settings, upstream, backup, max_retries=0), embeddings) as client:
        healthy = await client.get("/readyz")
        for _ in range(3):
            await ask(client)
        degraded = await client.get("/readyz")
    assert healthy.json()["status"] == "ready"
    assert healthy.json()["checks"] == {"vector_store": "ok", "llm": "ok", "llm_fallback": "ok", "curation_store": "ok"}
    assert degraded.status_code == 200  # cached answers and the fallback still serve: stay in the Service
    body = degraded.json()
    assert body["status"] == "degraded"
    assert body["checks"]["llm"].startswith("degraded: error: circuit open")
    assert body["checks"]["llm_fallback"] == "ok"
    assert body["llm"] == {"primary": "open", "fallback": "closed"}


# --- streams --------------------------------------------------------------------------------------


def _stream_events(text: str) -> list[Any]:
    events = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


async def _stream(client: AsyncTestClient[Any]) -> list[Any]:
    body = {"model": "gateway-direct", "stream": True, "messages": [{"role": "user", "content": "say something"}]}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    return _stream_events(response.text)


async def test_a_stream_cut_after_tokens_were_sent_ends_with_an_error_and_is_not_retried(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI, backup: FakeOpenAI
) -> None:
    upstream.script(Cut(chunks=3))
    async with gateway(against(settings, upstream, backup), embeddings) as client:
        events = await _stream(client)
    content = "".join(
        e["choices"][0]["delta"].get("content", "") for e in events if isinstance(e, dict) and e.get("choices")
    )
    assert content == "this answer will"
    assert events[-1] != "[DONE]"
    assert "interrupted" in events[-1]["error"]["message"] or "broke off" in events[-1]["error"]["message"]
    assert upstream.calls == 1  # a retry would have repeated the words already sent
    assert backup.calls == 0


async def test_a_stream_cut_before_any_token_is_retried(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI
) -> None:
    upstream.script(Cut(chunks=0), Answer("A whole answer."))
    async with gateway(against(settings, upstream), embeddings) as client:
        events = await _stream(client)
    content = "".join(
        e["choices"][0]["delta"].get("content", "") for e in events if isinstance(e, dict) and e.get("choices")
    )
    assert content == "A whole answer."
    assert events[-1] == "[DONE]"
    assert upstream.calls == 2
