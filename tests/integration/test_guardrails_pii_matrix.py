"""The PII matrix end to end: each category, English and Japanese, under each policy, against a recording
upstream (real HTTP), with content tracing on, every log record captured and the answer cache on Redis.

What is asserted is what the issue asks to see: what the upstream received, what the user got back, and
that no raw value sits in a log record, a span attribute or the cache.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis
from litestar.testing import AsyncTestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import Settings
from tests.fakes.openai_server import Answer, Echo, FakeOpenAI

pytestmark = pytest.mark.redis

REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
MY_NUMBER = "123456789018"  # a valid check digit (tests/unit/test_guardrails_pii.py derives it)

# (case id, category, question, the raw value it holds)
CASES = [
    (
        "en-email",
        "EMAIL",
        "Draft a short reply to taro.yamada@example.co.jp saying thanks",
        "taro.yamada@example.co.jp",
    ),
    ("ja-email", "EMAIL", "taro.yamada@example.co.jpに送るお礼のメールを書いて", "taro.yamada@example.co.jp"),
    ("en-phone", "PHONE", "Remind me to call +81 90-1234-5678 tomorrow", "+81 90-1234-5678"),
    ("ja-phone", "PHONE", "03-1234-5678に明日電話するとリマインドして", "03-1234-5678"),
    ("en-card", "CREDIT_CARD", "Is 4111 1111 1111 1111 a test card number?", "4111 1111 1111 1111"),
    ("ja-card", "CREDIT_CARD", "カード番号5555555555554444は使えますか", "5555555555554444"),
    ("en-my-number", "MY_NUMBER", f"Store my My Number {MY_NUMBER} for the form", MY_NUMBER),
    ("ja-my-number", "MY_NUMBER", f"マイナンバー{MY_NUMBER}を書類に記入して", MY_NUMBER),
    ("en-ip", "IP_ADDRESS", "Why can't I ping 192.168.10.24 from home?", "192.168.10.24"),
    ("ja-ip", "IP_ADDRESS", "2001:db8::8a2e:370:7334に接続できない理由は？", "2001:db8::8a2e:370:7334"),
]


@pytest.fixture
def upstream() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(Echo()) as server:
        yield server


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def guarded(settings: Settings, upstream: FakeOpenAI, policy: str, prefix: str) -> Settings:
    return settings.replace(
        llm_endpoint={"base_url": upstream.base_url, "timeout_s": 10.0, "max_retries": 0},
        redis={"url": REDIS_TEST_URL, "timeout_s": 0.5},
        cache={"prefix": prefix},
        guard={"pii_policy": policy},
        observability={"trace_include_content": True},
    )


@asynccontextmanager
async def gateway(
    settings: Settings, embeddings: USEEmbeddings, exporter: InMemorySpanExporter
) -> AsyncIterator[AsyncTestClient[Any]]:
    app = create_app(settings, ProviderOverrides(embeddings=embeddings, span_exporter=exporter))
    async with AsyncTestClient(app) as client:
        yield client


def span_text(exporter: InMemorySpanExporter) -> str:
    return json.dumps([dict(span.attributes or {}) for span in exporter.get_finished_spans()], ensure_ascii=False)


def log_text(logs: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{r.getMessage()} {r.__dict__}" for r in logs.records)


def cache_text(prefix: str) -> str:
    client = redis.Redis.from_url(REDIS_TEST_URL)
    try:
        parts: list[str] = []
        for key in client.scan_iter(f"{prefix}*"):
            parts.append(key.decode("utf-8", "replace"))
            if client.type(key) == b"string":
                parts.append((client.get(key) or b"").decode("utf-8", "replace"))
            elif client.type(key) == b"hash":
                parts.extend(v.decode("utf-8", "replace") for v in client.hgetall(key).values())
            client.delete(key)
        return "\n".join(parts)
    finally:
        client.close()


@pytest.mark.parametrize(("case", "category", "question", "value"), CASES, ids=[c[0] for c in CASES])
async def test_mask_sends_placeholders_and_gives_the_user_the_values(
    settings: Settings,
    embeddings: USEEmbeddings,
    upstream: FakeOpenAI,
    logs: pytest.LogCaptureFixture,
    case: str,
    category: str,
    question: str,
    value: str,
) -> None:
    prefix, exporter = f"pii-{uuid.uuid4().hex[:8]}", InMemorySpanExporter()
    async with gateway(guarded(settings, upstream, "mask", prefix), embeddings, exporter) as client:
        response = await client.post("/v1/query", json={"query": question, "route": "direct"})
        again = await client.post("/v1/query", json={"query": question, "route": "direct"})
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 200, response.text
    assert value in response.json()["answer"]  # the echo of the masked question, restored
    assert again.json()["cached"] is True
    assert value in again.json()["answer"]
    assert upstream.calls == 1
    assert value not in upstream.received
    assert f"<{category}_1>" in upstream.received
    assert value not in span_text(exporter)
    assert f"<{category}_1>" in span_text(exporter)
    assert value not in log_text(logs)
    assert value not in cache_text(prefix)
    assert f'gateway_guard_pii_total{{action="masked",category="{category}"}} 2.0' in metrics  # both requests
    assert value not in metrics


@pytest.mark.parametrize(("case", "category", "question", "value"), CASES, ids=[c[0] for c in CASES])
async def test_block_refuses_naming_the_category_never_the_value(
    settings: Settings,
    embeddings: USEEmbeddings,
    upstream: FakeOpenAI,
    logs: pytest.LogCaptureFixture,
    case: str,
    category: str,
    question: str,
    value: str,
) -> None:
    prefix, exporter = f"pii-{uuid.uuid4().hex[:8]}", InMemorySpanExporter()
    async with gateway(guarded(settings, upstream, "block", prefix), embeddings, exporter) as client:
        response = await client.post("/v1/query", json={"query": question, "route": "direct"})
        chat = await client.post(
            "/v1/chat/completions",
            json={"model": "gateway-direct", "messages": [{"role": "user", "content": question}]},
        )
    assert response.status_code == 422
    body = response.json()
    assert body["categories"] == [category]
    assert category in body["detail"]
    assert value not in response.text
    assert chat.status_code == 422
    assert chat.json()["error"]["code"] == "personal_data_blocked"
    assert value not in chat.text
    assert upstream.calls == 0
    assert value not in span_text(exporter)
    assert value not in log_text(logs)
    assert value not in cache_text(prefix)


@pytest.mark.parametrize(("case", "category", "question", "value"), CASES[:2], ids=[c[0] for c in CASES[:2]])
async def test_off_sends_the_text_as_it_is(
    settings: Settings,
    embeddings: USEEmbeddings,
    upstream: FakeOpenAI,
    case: str,
    category: str,
    question: str,
    value: str,
) -> None:
    prefix = f"pii-{uuid.uuid4().hex[:8]}"
    async with gateway(guarded(settings, upstream, "off", prefix), embeddings, InMemorySpanExporter()) as client:
        response = await client.post("/v1/query", json={"query": question, "route": "direct"})
    cache_text(prefix)
    assert response.status_code == 200
    assert value in response.json()["answer"]
    assert value in upstream.received


async def test_streamed_chat_restores_values_in_live_tokens_and_masks_every_turn(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI, logs: pytest.LogCaptureFixture
) -> None:
    prefix, exporter = f"pii-{uuid.uuid4().hex[:8]}", InMemorySpanExporter()
    messages = [
        {"role": "user", "content": "My address is hanako@example.jp and my phone 090-1234-5678."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Write hanako@example.jp a note that 090-1234-5678 changed."},
    ]
    # The follow-up rewrite, as a model would write it from the masked turns; then the answer echoes it.
    upstream.script(Answer("Write <EMAIL_1> a note that <PHONE_1> changed."))
    async with gateway(guarded(settings, upstream, "mask", prefix), embeddings, exporter) as client:
        response = await client.post(
            "/v1/chat/completions", json={"model": "gateway-direct", "messages": messages, "stream": True}
        )
    assert response.status_code == 200
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert "hanako@example.jp" in streamed
    assert "090-1234-5678" in streamed
    assert "<EMAIL_1>" not in streamed
    assert upstream.calls == 2  # the follow-up rewrite and the answer
    cached = cache_text(prefix)
    for value in ("hanako@example.jp", "090-1234-5678"):
        assert value not in upstream.received
        assert value not in span_text(exporter)
        assert value not in log_text(logs)
        assert value not in cached
    assert "<EMAIL_1>" in upstream.received
    assert "<PHONE_1>" in upstream.received
