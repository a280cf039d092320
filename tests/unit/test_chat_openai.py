"""``GatewayChatOpenAI`` against ``ChatOpenAI``: the same request on the wire, the same result, the same errors.

Both models talk to one scripted ``httpx.MockTransport``; every request body is recorded, so the
subclass's shortcuts (no thread hop for the result, messages sent through ``extra_body``, a JSON
completion read without the SDK's response models) are checked for what they must not change.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.callbacks import AsyncCallbackHandler, AsyncCallbackManager, get_usage_metadata_callback
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import LLMResult
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, SecretStr

from gateway.providers.chat_openai import GatewayChatOpenAI
from gateway.providers.llm import build_chat_model
from gateway.settings import LLMEndpointSettings, LLMSettings

MESSAGES: list[BaseMessage] = [
    SystemMessage("Answer briefly."),
    HumanMessage("What is the capital of France?"),
    AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": "France"}, "id": "call_1"}]),
    ToolMessage("Paris is the capital.", tool_call_id="call_1"),
    HumanMessage(
        content=[
            {"type": "text", "text": "And this picture? 東京"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ]
    ),
]


def completion(content: str, prompt_tokens: int = 11, completion_tokens: int = 3) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "fake-gpt",
        "system_fingerprint": "fp_1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> dict[str, Any]:
    choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "fake-gpt",
        "choices": choices,
        "usage": usage,
    }


Reply = Callable[[dict[str, Any]], httpx.Response]


class Upstream:
    """Records each request's JSON body and answers with ``reply``."""

    def __init__(self, reply: Reply) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.requests: list[httpx.Request] = []
        self._reply = reply

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        self.requests.append(request)
        return self._reply(body)

    def model(self, cls: type[ChatOpenAI], **fields: Any) -> ChatOpenAI:
        return cls(
            model="fake-gpt",
            base_url="http://upstream.test/v1",
            api_key=SecretStr("key"),
            temperature=0.0,
            stream_usage=True,
            http_async_client=httpx.AsyncClient(transport=httpx.MockTransport(self.handler)),
            **{"timeout": 30.0, "max_retries": 0, **fields},
        )


def answering(content: str) -> Reply:
    return lambda body: httpx.Response(200, json=completion(content))


def both(reply: Reply, **fields: Any) -> tuple[Upstream, ChatOpenAI, ChatOpenAI]:
    upstream = Upstream(reply)
    return upstream, upstream.model(ChatOpenAI, **fields), upstream.model(GatewayChatOpenAI, **fields)


def test_it_is_a_chat_openai_and_the_gateway_builds_it() -> None:
    model = build_chat_model(LLMSettings(), LLMEndpointSettings())
    assert isinstance(model, GatewayChatOpenAI)
    assert isinstance(model, ChatOpenAI)


async def test_the_request_body_is_the_same_as_chat_openai_sends() -> None:
    upstream, plain, ours = both(answering("Paris."), max_tokens=64)
    await plain.ainvoke(MESSAGES)
    await ours.ainvoke(MESSAGES)
    sent_plain, sent_ours = upstream.bodies
    assert sent_ours == sent_plain
    assert [m["role"] for m in sent_ours["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert sent_ours["messages"][4]["content"][1]["image_url"]["url"].startswith("data:image/png")
    assert sent_ours["max_completion_tokens"] == 64


def wire_of(request: httpx.Request) -> tuple[str, str, list[tuple[str, str]], Any]:
    """Method, URL, headers (sorted, names lower-cased) and the request's timeout extension."""
    headers = sorted((name.lower(), value) for name, value in request.headers.multi_items())
    return request.method, str(request.url), headers, request.extensions.get("timeout")


async def test_a_plain_call_is_posted_as_the_sdk_posts_it_without_the_sdks_request_machinery() -> None:
    upstream, plain, ours = both(answering("Paris."), max_tokens=64, default_headers={"X-Team": "search"})
    await plain.ainvoke(MESSAGES[:2])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(openai.AsyncOpenAI, "_build_request", refuse)  # the SDK's request machinery is not used
        await ours.ainvoke(MESSAGES[:2])
        await ours.ainvoke(MESSAGES[:2])  # the second call reuses the first one's headers and URL
    sdk, direct, again = upstream.requests
    assert wire_of(direct) == wire_of(sdk) == wire_of(again)
    method, url, headers, timeout = wire_of(direct)
    assert (method, url) == ("POST", "http://upstream.test/v1/chat/completions")
    assert ("authorization", "Bearer key") in headers
    assert ("x-team", "search") in headers
    assert ("x-stainless-async", "async:asyncio") in headers
    assert ("x-stainless-read-timeout", "30.0") in headers
    assert timeout == {"connect": 30.0, "read": 30.0, "write": 30.0, "pool": 30.0}
    assert json.loads(direct.content) == json.loads(sdk.content)


async def test_a_client_with_per_call_hooks_keeps_the_sdk_path() -> None:
    keys = iter(["key-1", "key-2"])

    async def rotating_key() -> str:
        return next(keys)

    upstream = Upstream(answering("Paris."))
    ours = upstream.model(GatewayChatOpenAI)
    ours.root_async_client._api_key_provider = rotating_key  # what the SDK sets for ``api_key=<callable>``
    await ours.ainvoke(MESSAGES[:2])
    await ours.ainvoke(MESSAGES[:2])
    assert [r.headers["authorization"] for r in upstream.requests] == ["Bearer key-1", "Bearer key-2"]
    assert upstream.bodies[0]["messages"][1]["content"] == "What is the capital of France?"


async def test_a_model_with_sdk_retries_keeps_the_sdk_path_and_its_retries() -> None:
    upstream = Upstream(lambda body: httpx.Response(500, json={"error": {"message": "boom", "type": "server_error"}}))
    ours = upstream.model(GatewayChatOpenAI, max_retries=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(openai.AsyncOpenAI, "_calculate_retry_timeout", lambda *_: 0.0)
        with pytest.raises(openai.InternalServerError):
            await ours.ainvoke(MESSAGES[:2])
    assert [r.headers["x-stainless-retry-count"] for r in upstream.requests] == ["0", "1", "2"]


async def test_sampling_parameters_reach_the_wire_as_chat_openai_sends_them() -> None:
    upstream, plain, ours = both(answering("Paris."), top_p=0.5, seed=7, n=1, frequency_penalty=0.1, logprobs=True)
    await plain.bind(stop=["\n"], max_tokens=12).ainvoke(MESSAGES[:2])
    await ours.bind(stop=["\n"], max_tokens=12).ainvoke(MESSAGES[:2])
    sent_plain, sent_ours = upstream.bodies
    assert sent_ours == sent_plain
    assert sent_ours["stop"] == ["\n"]
    assert sent_ours["max_completion_tokens"] == 12
    assert (sent_ours["top_p"], sent_ours["seed"], sent_ours["logprobs"]) == (0.5, 7, True)


async def test_the_sdk_still_reads_what_it_reads_itself() -> None:
    ours = Upstream(answering("Paris.")).model(GatewayChatOpenAI, max_tokens=8)
    payload = ours._get_request_payload(MESSAGES[:2])
    assert payload["model"] == "fake-gpt"
    assert payload["stream"] is False
    assert payload["messages"] == []
    assert payload["extra_body"]["max_completion_tokens"] == 8
    assert len(payload["extra_body"]["messages"]) == 2


async def test_a_callers_own_extra_body_is_kept_and_wins_as_with_chat_openai() -> None:
    extra = {"cache_prompt": True, "top_k": 20, "temperature": 0.9}
    upstream, plain, ours = both(answering("Paris."), extra_body=extra)
    await plain.ainvoke(MESSAGES[:2])
    await ours.ainvoke(MESSAGES[:2])
    assert upstream.bodies[1] == upstream.bodies[0]
    assert upstream.bodies[1]["cache_prompt"] is True
    assert upstream.bodies[1]["temperature"] == 0.9
    assert len(upstream.bodies[1]["messages"]) == 2


async def test_the_result_is_the_same_and_built_on_the_event_loop_thread() -> None:
    _upstream, plain, ours = both(answering("Paris."))
    threads: list[threading.Thread] = []
    build = GatewayChatOpenAI._create_chat_result

    def recording(self: GatewayChatOpenAI, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return build(self, *args, **kwargs)

    expected = await plain.ainvoke(MESSAGES[:2])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GatewayChatOpenAI, "_create_chat_result", recording)
        got = await ours.ainvoke(MESSAGES[:2])
    assert threads == [threading.current_thread()]  # ChatOpenAI builds it on a worker thread
    assert got.content == expected.content == "Paris."
    assert got.usage_metadata == expected.usage_metadata
    assert got.usage_metadata is not None
    assert got.usage_metadata["input_tokens"] == 11
    # The SDK's model fills the usage fields the upstream did not send with None; the JSON body has none of them.
    assert got.response_metadata["token_usage"] == without_none(expected.response_metadata["token_usage"])
    assert {k: v for k, v in got.response_metadata.items() if k != "token_usage"} == {
        k: v for k, v in expected.response_metadata.items() if k != "token_usage"
    }
    assert got.response_metadata["finish_reason"] == "stop"


def without_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


async def test_a_json_completion_is_read_without_the_sdks_response_models() -> None:
    _upstream, _plain, ours = both(answering("Paris."))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(openai._legacy_response.LegacyAPIResponse, "parse", refuse)
        got = await ours.ainvoke(MESSAGES[:2])
    assert got.content == "Paris."
    assert got.usage_metadata is not None
    assert got.usage_metadata["output_tokens"] == 3


async def test_a_body_that_is_not_json_is_left_to_the_sdk_as_chat_openai_does() -> None:
    html = "<html>maintenance</html>"
    _upstream, plain, ours = both(lambda _: httpx.Response(200, text=html, headers={"content-type": "text/html"}))
    with pytest.raises(ValueError, match="Unexpected response type") as expected:
        await plain.ainvoke(MESSAGES[:2])
    with pytest.raises(ValueError, match="Unexpected response type") as got:
        await ours.ainvoke(MESSAGES[:2])
    assert str(got.value) == str(expected.value)


def refuse(*_: Any, **__: Any) -> Any:
    raise AssertionError("the SDK's response models were built")


def refuse_run(*_: Any, **__: Any) -> Any:
    raise AssertionError("the run bookkeeping ran")


class Capital(BaseModel):
    city: str
    country: str


async def test_structured_output_by_response_format_parses_and_sends_the_same_body() -> None:
    upstream, plain, ours = both(answering('{"city": "Paris", "country": "France"}'))
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "Capital", "schema": Capital.model_json_schema(), "strict": True},
    }
    expected = await plain.bind(response_format=response_format).ainvoke(MESSAGES[:2])
    got = await ours.bind(response_format=response_format).ainvoke(MESSAGES[:2])
    assert upstream.bodies[1] == upstream.bodies[0]
    assert upstream.bodies[1]["response_format"]["json_schema"]["name"] == "Capital"
    assert Capital.model_validate_json(str(got.content)) == Capital(city="Paris", country="France")
    assert got.usage_metadata == expected.usage_metadata


async def test_with_structured_output_parses_a_pydantic_schema() -> None:
    upstream, _, ours = both(answering('{"city": "Tokyo", "country": "Japan"}'))
    result = await ours.with_structured_output(Capital, method="json_schema").ainvoke(MESSAGES[:2])
    assert result == Capital(city="Tokyo", country="Japan")
    assert upstream.bodies[0]["messages"][1]["content"] == "What is the capital of France?"


async def test_streaming_sends_the_same_body_and_reports_usage() -> None:
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Par"}),
        chunk({"content": "is."}, finish="stop"),
        chunk({}, usage={"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}),
    ]
    upstream, plain, ours = both(
        lambda body: httpx.Response(200, content=sse(chunks), headers={"content-type": "text/event-stream"})
    )
    expected = [c async for c in plain.astream(MESSAGES[:2])]
    got = [c async for c in ours.astream(MESSAGES[:2])]
    assert upstream.bodies[1] == upstream.bodies[0]
    assert upstream.bodies[1]["stream"] is True
    assert upstream.bodies[1]["stream_options"] == {"include_usage": True}
    assert "".join(str(c.content) for c in got) == "Paris."
    merged = got[0]
    for part in got[1:]:
        merged = merged + part
    assert merged.usage_metadata is not None
    assert merged.usage_metadata["output_tokens"] == 2
    assert [c.content for c in got] == [c.content for c in expected]


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (
            400,
            {"error": {"message": "context_length_exceeded", "type": "invalid_request_error"}},
            openai.BadRequestError,
        ),
        (429, {"error": {"message": "slow down", "type": "rate_limit"}}, openai.RateLimitError),
        (500, {"error": {"message": "boom", "type": "server_error"}}, openai.InternalServerError),
        (404, {"error": {"message": "no such model", "type": "not_found"}}, openai.NotFoundError),
    ],
)
async def test_errors_are_translated_as_chat_openai_translates_them(
    status: int, body: dict[str, Any], error: type[openai.APIStatusError]
) -> None:
    _, plain, ours = both(lambda _: httpx.Response(status, json=body, headers={"retry-after": "3"}))
    with pytest.raises(error) as expected:
        await plain.ainvoke(MESSAGES[:2])
    with pytest.raises(error) as got:
        await ours.ainvoke(MESSAGES[:2])
    assert type(got.value) is type(expected.value)
    assert isinstance(got.value, openai.APIStatusError)
    assert got.value.status_code == status
    assert got.value.response.headers["retry-after"] == "3"


def failing_models(fail: Callable[[httpx.Request], httpx.Response]) -> list[ChatOpenAI]:
    """``ChatOpenAI`` and ``GatewayChatOpenAI`` on a transport whose every request ``fail`` answers or raises."""
    return [
        cls(
            model="fake-gpt",
            base_url="http://upstream.test/v1",
            api_key=SecretStr("key"),
            max_retries=0,
            http_async_client=httpx.AsyncClient(transport=httpx.MockTransport(fail)),
        )
        for cls in (ChatOpenAI, GatewayChatOpenAI)
    ]


async def test_a_timeout_is_translated_as_chat_openai_translates_it() -> None:
    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    raised = []
    for model in failing_models(hang):
        with pytest.raises(openai.APITimeoutError) as caught:
            await model.ainvoke(MESSAGES[:2])
        raised.append(type(caught.value))
    assert raised[0] is raised[1]


async def test_a_call_nobody_listens_to_skips_the_run_bookkeeping_and_returns_the_same_result() -> None:
    _upstream, plain, ours = both(answering("Paris."))
    expected = await plain.agenerate([MESSAGES[:2]])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AsyncCallbackManager, "on_chat_model_start", refuse_run)
        got = await ours.agenerate([MESSAGES[:2]])
        with pytest.raises(AssertionError, match="run bookkeeping"):
            await plain.agenerate([MESSAGES[:2]])  # what the patch would catch: ChatOpenAI does report the run
    assert got.llm_output == expected.llm_output
    assert [[g.text for g in gs] for gs in got.generations] == [[g.text for g in gs] for gs in expected.generations]
    assert got.run is None  # no run was started, so none is reported
    assert expected.run is not None


async def test_an_unheard_call_folds_the_metadata_as_langchains_generation_does() -> None:
    """Without a model cache or rate limiter the call skips ``_agenerate_with_cache`` and does its metadata rewrite
    itself: the message is the one LangChain's generation makes of the same reply."""
    upstream, _plain, ours = both(answering("Paris."))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GatewayChatOpenAI, "_agenerate_with_cache", refuse_run)
        fast = (await ours.agenerate([MESSAGES[:2]])).generations[0][0].message
    langchains = (await ours._agenerate_with_cache(MESSAGES[:2])).generations[0].message
    assert fast.content == langchains.content == "Paris."
    assert fast.response_metadata == langchains.response_metadata
    assert fast.response_metadata["model_name"]  # the call's llm_output, folded in
    assert fast.response_metadata["token_usage"]
    assert fast.usage_metadata == langchains.usage_metadata
    assert len(upstream.bodies) == 2


async def test_an_unheard_call_with_a_model_cache_is_langchains_own() -> None:
    upstream, _plain, ours = both(answering("Paris."), cache=InMemoryCache())
    first = await ours.agenerate([MESSAGES[:2]])
    again = await ours.agenerate([MESSAGES[:2]])
    assert len(upstream.bodies) == 1  # the second was served by LangChain's model cache
    assert again.generations[0][0].text == first.generations[0][0].text == "Paris."


class Recorder(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.events: list[str] = []
        self.ends: list[LLMResult] = []

    async def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.events.append("start")

    async def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        self.events.append("end")
        self.ends.append(response)


async def test_a_call_with_a_callback_handler_is_reported_as_chat_openai_reports_it() -> None:
    _upstream, plain, ours = both(answering("Paris."))
    heard_plain, heard_ours = Recorder(), Recorder()
    await plain.ainvoke(MESSAGES[:2], config={"callbacks": [heard_plain]})
    got = await ours.ainvoke(MESSAGES[:2], config={"callbacks": [heard_ours]})
    assert heard_ours.events == heard_plain.events == ["start", "end"]
    assert heard_ours.ends[0].generations[0][0].text == heard_plain.ends[0].generations[0][0].text == "Paris."
    assert got.content == "Paris."


async def test_a_configure_hook_still_hears_the_call() -> None:
    _upstream, plain, ours = both(answering("Paris."))
    with get_usage_metadata_callback() as expected:
        await plain.ainvoke(MESSAGES[:2])
    with get_usage_metadata_callback() as got:
        await ours.ainvoke(MESSAGES[:2])
    assert got.usage_metadata == expected.usage_metadata
    assert got.usage_metadata["fake-gpt"]["input_tokens"] == 11


async def test_a_refused_connection_is_translated_as_chat_openai_translates_it() -> None:
    def refuse_connection(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    raised = []
    for model in failing_models(refuse_connection):
        with pytest.raises(openai.APIConnectionError) as caught:
            await model.ainvoke(MESSAGES[:2])
        causes = []
        cause: BaseException | None = caught.value
        while cause is not None:
            causes.append(type(cause))
            cause = cause.__cause__
        raised.append(causes)
    assert raised[1] == raised[0]
    assert httpx.ConnectError in raised[1]


async def test_concurrent_calls_each_get_their_own_answer() -> None:
    upstream = Upstream(lambda body: httpx.Response(200, json=completion(body["messages"][-1]["content"][::-1])))
    model = upstream.model(GatewayChatOpenAI)
    questions = [f"question {i}" for i in range(20)]
    answers = await asyncio.gather(*(model.ainvoke([HumanMessage(q)]) for q in questions))
    assert [a.content for a in answers] == [q[::-1] for q in questions]
