"""The OpenAI-compatible endpoint through the official ``openai`` client and ``ChatOpenAI``, both modes."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from langchain_openai import ChatOpenAI

from gateway.query.steps import RewriteFollowup
from pipelines.shared.events import Check, Generate
from tests.chat_support import REWRITE_MARKER, chat_model, openai_client
from tests.scripted import events

QUESTION = "Tell me a short story about a lighthouse keeper"


async def test_openai_client_non_streaming(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, _):
        completion = await openai_client(client).chat.completions.create(
            model="gateway-direct", messages=[{"role": "user", "content": QUESTION}]
        )
    assert completion.object == "chat.completion"
    assert completion.model == "gateway-direct"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == f"Direct answer to: {QUESTION}"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0
    assert completion.usage.completion_tokens > 0
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    gateway = (completion.model_extra or {})["gateway"]
    assert gateway["route"] == "direct"
    assert gateway["cached"] is False
    assert events(gateway) == [Generate(mode="direct")]
    assert gateway["tenant"] == "default"
    assert len(gateway["trace_id"]) == 32  # the request's trace, for following it in the tracing backend


async def test_openai_client_streams_direct_answers_token_by_token(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, model):
        stream = await openai_client(client).chat.completions.create(
            model="gateway-direct",
            messages=[{"role": "user", "content": QUESTION}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    expected = f"Direct answer to: {QUESTION}"
    assert "".join(deltas) == expected
    assert len(deltas) == len(expected.split())  # one chunk per scripted token: streamed live, not re-chunked
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finals] == ["stop"]
    assert (finals[0].model_extra or {})["gateway"]["route"] == "direct"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0
    assert len(model.calls) == 1


async def test_stream_ends_with_done(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, _):
        body = {"model": "gateway-direct", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [line for line in response.text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)


# Two sentences: a grounded answer streams one chunk per checked sentence, live or replayed from the cache.
LEAVE = "Employees get 25 days of annual leave per year. Unused days carry over to the next year."


async def test_cached_and_retrieval_answers_stream_in_chunks(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, model):
        docs = {"documents": [{"id": "leave", "text": LEAVE}]}
        assert (await client.post("/v1/documents", json=docs)).status_code == 200
        api = openai_client(client)
        messages: Any = [{"role": "user", "content": "How many days of annual leave do employees get?"}]
        runs = []
        for _ in range(2):
            stream = await api.chat.completions.create(model="gateway-single-hop", messages=messages, stream=True)
            runs.append([chunk async for chunk in stream])
        calls = len(model.calls)
    for chunks in runs:
        deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
        assert deltas == [
            "Employees get 25 days of annual leave per year.",
            " Unused days carry over to the next year. [1]",
        ]
    gateway = [(c.model_extra or {})["gateway"] for run in runs for c in run if c.choices[0].finish_reason]
    assert [g["cached"] for g in gateway] == [False, True]
    assert gateway[0]["route"] == "single_hop"
    assert calls == 1  # the second answer came from the cache


async def test_upstream_failure_mid_stream_raises_in_the_client(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, model):
        model.stream_fail_after = 3
        stream = await openai_client(client).chat.completions.create(
            model="gateway-direct", messages=[{"role": "user", "content": QUESTION}], stream=True
        )
        received: list[str] = []

        async def consume() -> None:
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    received.append(chunk.choices[0].delta.content)

        with pytest.raises(openai.APIError) as caught:
            await consume()
    assert "".join(received) == "Direct answer to:"  # three tokens arrived, then the error, not a clean end
    # Part of the answer was sent: neither a retry nor the fallback may continue it, so the stream ends in an error.
    assert "LLM stream broke off in node answer_directly after part of the answer was sent" in caught.value.message


async def test_failed_stream_has_an_error_event_and_no_done(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, model):
        model.stream_fail_after = 1
        body = {"model": "gateway-direct", "messages": [{"role": "user", "content": "hi there"}], "stream": True}
        response = await client.post("/v1/chat/completions", json=body)
    events = [e for e in response.text.split("\n\n") if e]
    assert "[DONE]" not in response.text
    assert events[-1].startswith('data: {"error":')
    assert '"type":"api_error"' in events[-1]


async def test_chat_openai_pointed_at_the_gateway(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, _):
        llm = ChatOpenAI(
            model="gateway-direct",
            base_url=f"{client.base_url}/v1",
            api_key="unused",  # type: ignore[arg-type]
            http_async_client=client,
            max_retries=0,
        )
        message = await llm.ainvoke("Say hello")
        streamed = [chunk.content async for chunk in llm.astream("Say hi")]  # not cached: the tokens stream live
    assert message.content == "Direct answer to: Say hello"
    assert "".join(str(c) for c in streamed) == "Direct answer to: Say hi"
    assert len([c for c in streamed if c]) > 1


async def test_models_are_listed_and_unknown_models_are_404(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, _):
        api = openai_client(client)
        models = [m.id async for m in api.models.list()]
        one = await api.models.retrieve("gateway-multi-hop")
        with pytest.raises(openai.NotFoundError) as caught:
            await api.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert models == ["gateway-auto", "gateway-direct", "gateway-single-hop", "gateway-multi-hop"]
    assert one.id == "gateway-multi-hop"
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["code"] == "model_not_found"
    assert error["param"] == "model"
    assert "gateway-auto" in error["message"]


async def test_follow_up_is_rewritten_before_routing(make_client: Any) -> None:
    async with make_client(chat_model(rewrite="What is the population of Paris?")) as (client, model):
        completion = await openai_client(client).chat.completions.create(
            model="gateway-direct",
            messages=[
                {"role": "system", "content": "You are helpful."},
                {"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", "content": "Paris is the capital of France."},
                {"role": "user", "content": "and what about its population?"},
            ],
        )
    rewrite_prompt = str(model.calls[0][0][-1].content)
    assert REWRITE_MARKER in rewrite_prompt
    assert "User: What is the capital of France?" in rewrite_prompt
    assert "Assistant: Paris is the capital of France." in rewrite_prompt
    assert "You are helpful." not in rewrite_prompt
    assert str(model.calls[1][0][-1].content) == "What is the population of Paris?"  # what was answered
    assert completion.choices[0].message.content == "Direct answer to: What is the population of Paris?"
    gateway = (completion.model_extra or {})["gateway"]
    assert events(gateway) == [RewriteFollowup(changed=True), Generate(mode="direct")]
    assert gateway["query"] == "What is the population of Paris?"
    assert gateway["llm_calls"] == 2


async def test_single_turn_request_is_not_rewritten(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, model):
        completion = await openai_client(client).chat.completions.create(
            model="gateway-direct",
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is DNS?"}],
        )
    assert len(model.calls) == 1
    assert all(REWRITE_MARKER not in str(m.content) for m in model.calls[0][0])
    assert events((completion.model_extra or {})["gateway"]) == [Generate(mode="direct")]


async def test_rewritten_follow_up_is_what_gets_cached(make_client: Any) -> None:
    async with make_client(chat_model(rewrite="What is the population of Paris?")) as (client, model):
        api = openai_client(client)
        await api.chat.completions.create(
            model="gateway-direct", messages=[{"role": "user", "content": "What is the population of Paris?"}]
        )
        follow_up = await api.chat.completions.create(
            model="gateway-direct",
            messages=[
                {"role": "user", "content": "Tell me about Paris."},
                {"role": "assistant", "content": "Paris is the capital of France."},
                {"role": "user", "content": "How many people live there?"},
            ],
        )
    gateway = (follow_up.model_extra or {})["gateway"]
    assert gateway["cached"] is True  # the standalone question was answered before
    assert len(model.calls) == 2  # the first answer and the rewrite; no second answer


async def test_unknown_fields_are_ignored_and_content_parts_accepted(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, _):
        body = {
            "model": "gateway-direct",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "top_p": 0.3,
            "seed": 7,
            "temperature": 0.2,
            "user": "u-42",
            "max_tokens": 100,
        }
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Direct answer to: hi"


async def test_client_error_body_is_the_openai_shape(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, _):
        response = await client.post(
            "/v1/chat/completions", content=b'{"model": ', headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert "json" in error["message"].lower()


async def test_question_is_the_last_user_message(make_client: Any) -> None:
    async with make_client(chat_model(rewrite="What is the population of Paris?")) as (client, model):
        completion = await openai_client(client).chat.completions.create(
            model="gateway-direct",
            messages=[
                {"role": "user", "content": "Tell me about Paris."},
                {"role": "assistant", "content": "Paris is the capital of France."},
                {"role": "user", "content": "How many people live there?"},
                {"role": "assistant", "content": "Let me check"},  # a prefill: not part of the question
            ],
        )
    rewrite_prompt = str(model.calls[0][0][-1].content)
    assert "Last message: How many people live there?" in rewrite_prompt
    assert "Let me check" not in rewrite_prompt
    assert completion.choices[0].message.content == "Direct answer to: What is the population of Paris?"


async def test_multi_hop_streams_the_checked_answer(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, model):
        docs = {"documents": [{"id": "leave", "text": LEAVE}]}
        assert (await client.post("/v1/documents", json=docs)).status_code == 200
        stream = await openai_client(client).chat.completions.create(
            model="gateway-multi-hop",
            messages=[{"role": "user", "content": "How many days of annual leave do employees get?"}],
            stream=True,
        )
        chunks = [chunk async for chunk in stream]
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    gateway = (final.model_extra or {})["gateway"]
    assert gateway["route"] == "multi_hop"
    assert Check(critic="grounded", outcome="passed") in events(gateway), gateway["steps"]
    assert deltas == [
        "Employees get 25 days of annual leave per year.",
        " Unused days carry over to the next year. [1]",
    ]
    assert len(model.calls) >= 2  # the hop planner found the evidence sufficient, then the answer streamed
