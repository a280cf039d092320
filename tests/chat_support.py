"""Helpers for the OpenAI-compatible API tests: an ``openai`` client on the in-process app, keyed settings."""

from __future__ import annotations

from typing import Any

import openai
from langchain_core.messages import BaseMessage

from gateway.access.keys import hash_key
from gateway.settings import ApiKeyConfig, Settings
from tests.scripted import structured_reply

ACME_KEY = "rgw-acme-chatbot-key"
ACME_ADMIN_KEY = "rgw-acme-admin-key"
GLOBEX_KEY = "rgw-globex-chatbot-key"
REWRITE_MARKER = "Standalone version of the last message"


def openai_client(test_client: Any, key: str = "unused", **kwargs: Any) -> openai.AsyncOpenAI:
    """The official client, sending through the Litestar test client (an ``httpx.AsyncClient``)."""
    return openai.AsyncOpenAI(
        base_url=f"{test_client.base_url}/v1", api_key=key, http_client=test_client, max_retries=0, **kwargs
    )


def keyed(settings: Settings, **limits: Any) -> Settings:
    """Three keys: an acme chatbot (query), an acme ingester (admin) and a globex chatbot."""
    keys = [
        ApiKeyConfig(name="acme-chatbot", key_sha256=hash_key(ACME_KEY), tenant="acme", scopes=["query"], **limits),
        ApiKeyConfig(name="acme-admin", key_sha256=hash_key(ACME_ADMIN_KEY), tenant="acme", scopes=["admin"]),
        ApiKeyConfig(name="globex-chatbot", key_sha256=hash_key(GLOBEX_KEY), tenant="globex", scopes=["query"]),
    ]
    return settings.replace(access={"api_keys": keys})


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def chat_model(rewrite: str = "What is the population of Paris?") -> Any:
    """A scripted model for chats: rewrites follow-ups to ``rewrite``, answers from passage 1 or directly."""

    def respond(messages: list[BaseMessage], kwargs: dict[str, Any]) -> str:
        structured = structured_reply(kwargs)
        if structured is not None:
            return structured
        last = str(messages[-1].content)
        if REWRITE_MARKER in last:
            return rewrite
        if "Context passages" in last:
            first = last.split("[1] ", 1)[1].split("\n\n", 1)[0]
            return first.split(") ", 1)[1] + " [1]"
        return f"Direct answer to: {last}"

    return respond
