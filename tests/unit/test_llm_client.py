"""The LLM adapter: usage and cost accounting, structured output, and error translation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel

from gateway.errors import MalformedOutputError, ProviderError, ProviderTimeoutError, ProviderUnavailableError
from gateway.providers.llm import LLMClient
from gateway.settings import ModelPrice
from pipelines.shared.deps import StructuredOutputError
from tests.fakes.scripted_chat import ScriptedChatModel

PROBLEM = "application/problem+json"
REQUEST = httpx.Request("POST", "http://llm.test/v1/chat/completions")


class Verdict(BaseModel):
    label: str
    score: float


def failing_model(error: Exception) -> ScriptedChatModel:
    """A scripted model whose every call fails with ``error``, as the OpenAI client would."""

    def respond(_messages: list[BaseMessage], _kwargs: dict[str, Any]) -> str:
        raise error

    return ScriptedChatModel(responder=respond)


def answering(text: str) -> tuple[LLMClient, ScriptedChatModel]:
    model = ScriptedChatModel(responder=lambda _messages, _kwargs: text)
    return LLMClient(model, model_name="scripted-1", price=ModelPrice()), model


def raising(error: Exception) -> LLMClient:
    return LLMClient(failing_model(error), model_name="failing-1", price=ModelPrice())


# --- usage accounting -----------------------------------------------------------------------------


async def test_chat_records_tokens_cost_node_and_model() -> None:
    model = ScriptedChatModel(responder=lambda _messages, _kwargs: "y" * 80)
    client = LLMClient(model, model_name="priced-model", price=ModelPrice(input=2.0, output=10.0))

    reply = await client.chat([HumanMessage("x" * 400)], node="answer_directly")

    assert reply.text == "y" * 80
    call = reply.call
    # ScriptedChatModel reports usage_metadata of ~4 characters per token.
    assert call.input_tokens == 100
    assert call.output_tokens == 20
    assert call.cost_usd == pytest.approx((100 * 2.0 + 20 * 10.0) / 1_000_000)
    assert call.node == "answer_directly"
    assert call.model == "priced-model"
    assert call.duration_s >= 0.0


async def test_free_model_costs_nothing() -> None:
    client, _ = answering("hello")
    reply = await client.chat([HumanMessage("hi")], node="n")
    assert reply.call.cost_usd == 0.0
    assert reply.call.input_tokens > 0


async def test_chat_passes_max_tokens_to_the_model_and_strips_the_reply() -> None:
    client, model = answering("  padded answer \n")
    reply = await client.chat([SystemMessage("s"), HumanMessage("q")], node="n", max_tokens=64)
    assert reply.text == "padded answer"
    (messages, kwargs) = model.calls[0]
    assert kwargs.get("max_tokens") == 64
    assert [m.content for m in messages] == ["s", "q"]


# --- structured output ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"label": "ok", "score": 0.5}',
        '```json\n{"label": "ok", "score": 0.5}\n```',
        '```\n{"label": "ok", "score": 0.5}\n```',
        '  \n{"label": "ok", "score": 0.5}\n',
    ],
)
async def test_structured_parses_json_also_inside_fences(text: str) -> None:
    client, model = answering(text)
    verdict, call = await client.structured([HumanMessage("judge")], Verdict, node="grade")
    assert verdict == Verdict(label="ok", score=0.5)
    assert call.node == "grade"
    assert call.model == "scripted-1"
    (_messages, kwargs) = model.calls[0]
    response_format = kwargs["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "Verdict"
    assert response_format["json_schema"]["schema"] == Verdict.model_json_schema()


@pytest.mark.parametrize(
    "text",
    ["not json at all", '{"label": "ok", "score": ', '{"label": "ok"}', '{"label": "ok", "score": "high"}', ""],
)
async def test_structured_raises_provider_error_on_invalid_output(text: str) -> None:
    client, _ = answering(text)
    with pytest.raises(ProviderError) as info:
        await client.structured([HumanMessage("judge")], Verdict, node="grade")
    error = info.value
    assert type(error) is MalformedOutputError  # a ProviderError that pipelines may degrade on
    assert isinstance(error, StructuredOutputError)
    assert error.call is not None  # the failed call is still accounted for
    assert error.provider == "llm"
    assert error.extra["node"] == "grade"
    assert "Verdict" in error.detail
    assert error.__cause__ is not None


def cut_off_completion() -> openai.types.chat.ChatCompletion:
    """What the OpenAI client parses when a JSON-schema reply hits ``max_tokens`` (seen on llama.cpp)."""
    return openai.types.chat.ChatCompletion.model_validate(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": "local",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "message": {"role": "assistant", "content": '{"unsupported_claims": ["a claim that never en'},
                }
            ],
            "usage": {"prompt_tokens": 423, "completion_tokens": 320, "total_tokens": 743},
        }
    )


@pytest.mark.parametrize(
    ("error", "tokens"),
    [
        (openai.LengthFinishReasonError(completion=cut_off_completion()), (423, 320)),
        (openai.ContentFilterFinishReasonError(), (0, 0)),
    ],
)
async def test_structured_reply_cut_short_is_malformed_output_with_its_tokens_counted(
    error: Exception, tokens: tuple[int, int]
) -> None:
    """A judgement cut off at max_tokens must degrade that judgement, not fail the request with a 500."""
    client = LLMClient(failing_model(error), model_name="local", price=ModelPrice(input=1.0, output=1.0))
    with pytest.raises(StructuredOutputError) as info:
        await client.structured([HumanMessage("judge")], Verdict, node="check_grounded")
    assert type(info.value) is MalformedOutputError
    assert info.value.__cause__ is error
    call = info.value.call
    assert call is not None
    assert (call.input_tokens, call.output_tokens) == tokens
    assert call.node == "check_grounded"
    assert call.cost_usd == pytest.approx(sum(tokens) / 1_000_000)


# --- error translation ----------------------------------------------------------------------------


async def test_timeout_becomes_provider_timeout() -> None:
    original = openai.APITimeoutError(request=REQUEST)
    with pytest.raises(ProviderTimeoutError) as info:
        await raising(original).chat([HumanMessage("hi")], node="answer_directly")
    assert info.value.__cause__ is original
    assert info.value.provider == "llm"
    assert info.value.status_code == 504
    assert "answer_directly" in info.value.detail


async def test_connection_error_becomes_provider_unavailable() -> None:
    original = openai.APIConnectionError(request=REQUEST)
    with pytest.raises(ProviderUnavailableError) as info:
        await raising(original).chat([HumanMessage("hi")], node="n")
    assert type(info.value) is ProviderUnavailableError  # not the timeout subclass
    assert info.value.__cause__ is original
    assert info.value.provider == "llm"
    assert info.value.status_code == 503


async def test_upstream_status_error_becomes_provider_error_with_status() -> None:
    response = httpx.Response(500, request=REQUEST, json={"error": {"message": "boom"}})
    original = openai.APIStatusError("boom", response=response, body={"message": "boom"})
    with pytest.raises(ProviderError) as info:
        await raising(original).chat([HumanMessage("hi")], node="generate")
    error = info.value
    assert type(error) is ProviderError
    assert error.__cause__ is original
    assert error.extra["upstream_status"] == 500
    assert error.extra["provider"] == "llm"
    assert error.status_code == 502
    assert "500" in error.detail


async def test_errors_are_translated_for_structured_calls_too() -> None:
    original = openai.APITimeoutError(request=REQUEST)
    with pytest.raises(ProviderTimeoutError) as info:
        await raising(original).structured([HumanMessage("hi")], Verdict, node="route_query")
    assert info.value.__cause__ is original


async def test_transport_error_becomes_provider_unavailable() -> None:
    original = httpx.ConnectError("refused", request=REQUEST)
    with pytest.raises(ProviderUnavailableError) as info:
        await raising(original).chat([HumanMessage("hi")], node="n")
    assert info.value.__cause__ is original


async def test_unrelated_errors_are_not_disguised_as_provider_errors() -> None:
    with pytest.raises(ValueError, match="a bug"):
        await raising(ValueError("a bug")).chat([HumanMessage("hi")], node="n")


# --- over HTTP ------------------------------------------------------------------------------------


async def test_unreachable_llm_is_a_503_problem_naming_the_provider(make_client: Callable[..., Any]) -> None:
    def unreachable(_messages: list[BaseMessage], _kwargs: dict[str, Any]) -> str:
        raise openai.APIConnectionError(request=httpx.Request("POST", "http://x"))

    async with make_client(unreachable) as (client, model):
        response = await client.post("/v1/query", json={"query": "hello", "route": "direct"})

    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["provider"] == "llm"
    assert body["status"] == 503
    assert body["instance"] == "/v1/query"
    assert model.calls  # the failure came from the model call, not from earlier wiring
