"""The OpenAI-compatible API on the real local model: the official client, streaming with usage, a follow-up."""

from __future__ import annotations

import openai
import pytest

from gateway.query.steps import RewriteFollowup
from tests.scripted import events

pytestmark = pytest.mark.e2e


def client(gateway_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="local", max_retries=0, timeout=300)


def test_streams_token_by_token_with_usage(gateway_url: str) -> None:
    stream = client(gateway_url).chat.completions.create(
        model="gateway-direct",
        messages=[{"role": "user", "content": "Name the three primary colours of light."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    answer = "".join(deltas).lower()
    assert len(deltas) > 3  # live tokens from llama.cpp, not one block
    assert "red" in answer
    assert "green" in answer
    assert "blue" in answer
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens > 0  # llama.cpp reports usage on streamed calls (stream_usage)
    assert usage.prompt_tokens > 0


def test_follow_up_is_made_self_contained(gateway_url: str) -> None:
    completion = client(gateway_url).chat.completions.create(
        model="gateway-direct",
        messages=[
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is Paris."},
            {"role": "user", "content": "And what about its population?"},
        ],
    )
    gateway = (completion.model_extra or {})["gateway"]
    assert isinstance(events(gateway)[0], RewriteFollowup)
    assert "paris" in gateway["query"].lower()
    assert "population" in gateway["query"].lower()
    assert completion.choices[0].message.content
