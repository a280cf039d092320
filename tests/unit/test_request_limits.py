"""Every request limit is a setting and answers a clear 4xx: OpenAI shape on chat, problem details elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.settings import Settings
from tests.chat_support import chat_model

LIMITS = {
    "chat": {"max_messages": 3, "max_message_chars": 50, "max_tokens": 256},
    "limits": {"max_body_bytes": 4096},
}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


@pytest.mark.parametrize(
    ("body", "status", "param", "needle"),
    [
        (
            {"model": "gateway-direct", "messages": [user("a"), user("b"), user("c"), user("d")]},
            400,
            "messages",
            "maximum is 3",
        ),
        ({"model": "gateway-direct", "messages": [user("x" * 51)]}, 400, "messages[0].content", "maximum is 50"),
        (
            {
                "model": "gateway-direct",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "y" * 51}]}],
            },
            400,
            "messages[0].content",
            "maximum is 50",
        ),
        ({"model": "gateway-direct", "messages": [user("hi")], "max_tokens": 257}, 400, "max_tokens", "maximum is 256"),
        (
            {"model": "gateway-direct", "messages": [user("hi")], "max_completion_tokens": 1000},
            400,
            "max_completion_tokens",
            "maximum is 256",
        ),
        ({"model": "gateway-direct", "messages": []}, 400, None, "messages"),
        (
            {"model": "gateway-direct", "messages": [{"role": "system", "content": "be brief"}]},
            400,
            "messages",
            "No question",
        ),
        ({"model": "gateway-direct", "messages": [user("   ")]}, 400, "messages", "No question"),
        (
            {"model": "gateway-direct", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            400,
            "messages[0].content",
            "only text",
        ),
        ({"model": "gateway-direct", "messages": [user("hi")], "n": 2}, 400, None, "n"),
        ({"model": "gateway-direct", "messages": [{"role": "robot", "content": "hi"}]}, 400, None, "role"),
        ({"model": "nope", "messages": [user("hi")]}, 404, "model", "does not exist"),
    ],
)
async def test_chat_limits(
    make_client: Any, settings: Settings, body: dict[str, Any], status: int, param: str | None, needle: str
) -> None:
    async with make_client(chat_model(), settings_override=settings.replace(**LIMITS)) as (client, model):
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert needle in error["message"], error
    if param is not None:
        assert error["param"] == param
    assert model.calls == []


async def test_chat_body_size_limit_is_413(make_client: Any, settings: Settings) -> None:
    async with make_client(chat_model(), settings_override=settings.replace(**LIMITS)) as (client, _):
        body = {"model": "gateway-direct", "messages": [user("hi")], "padding": "p" * 5000}
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


async def test_native_body_size_limit_is_a_413_problem(make_client: Any, settings: Settings) -> None:
    async with make_client(chat_model(), settings_override=settings.replace(**LIMITS)) as (client, _):
        docs = {"documents": [{"id": "big", "text": "word " * 2000}]}
        response = await client.post("/v1/documents", json=docs)
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["status"] == 413


@pytest.mark.parametrize("stream", [False, True])
async def test_long_question_is_bounded_by_the_query_limit_too(
    make_client: Any, settings: Settings, stream: bool
) -> None:
    tight = settings.replace(limits={"max_query_chars": 10})
    async with make_client(chat_model(), settings_override=tight) as (client, _):
        body = {"model": "gateway-direct", "messages": [user("a question longer than ten")], "stream": stream}
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400  # a plain 4xx, also for a stream: it never starts
    assert "maximum is 10" in response.json()["error"]["message"]
    assert response.json()["error"]["param"] == "messages[0].content"
