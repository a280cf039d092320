"""The model calls' HTTP client: real sockets on loopback, every byte received handed over, failures classed.

The OpenAI SDK decides timeout (``APITimeoutError``, a 504 here) against unreachable (``APIConnectionError``,
a 503) by the httpx error class, so each failure below is produced for real by the fake upstream the fault
tests use (:class:`tests.fakes.openai_server.FakeOpenAI`: a closed port, a server that hangs up, a body cut
short, a server that never answers) and the class is what is checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from gateway.providers.upstream_http import upstream_client
from tests.fakes.openai_server import Answer, Cut, FakeOpenAI, Hang
from tests.ports import free_port


@pytest.fixture
def upstream() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(Answer("Paris.")) as server:
        yield server


def chat_model(
    cls: type[ChatOpenAI], base_url: str, client: httpx.AsyncClient, *, timeout: float | None = 30.0
) -> ChatOpenAI:
    """A model as the gateway builds one (no SDK retries) on ``client``."""
    return cls(
        model="fake-gpt",
        base_url=base_url,
        api_key=SecretStr("k"),
        max_retries=0,
        timeout=timeout,
        http_async_client=client,
    )


async def test_a_completion_round_trips_and_the_body_is_sent_whole(upstream: FakeOpenAI) -> None:
    async with upstream_client(5.0) as client:
        model = chat_model(ChatOpenAI, upstream.base_url, client, timeout=None)
        first = await model.ainvoke([HumanMessage("What is the capital of France?")])
        second = await model.ainvoke([HumanMessage("And of Japan?")])
    assert (first.content, second.content) == ("Paris.", "Paris.")
    assert first.usage_metadata is not None
    assert first.usage_metadata["total_tokens"] == 13
    assert [seen.messages for seen in upstream.seen] == [("What is the capital of France?",), ("And of Japan?",)]


async def test_a_refused_connection_is_a_connect_error_not_a_timeout() -> None:
    async with upstream_client(5.0) as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.post(f"http://127.0.0.1:{free_port()}/v1/chat/completions", json={})
    assert not isinstance(caught.value, httpx.TimeoutException)
    assert caught.value.request.url.port is not None


async def test_the_sdk_reports_a_refused_connection_as_unreachable() -> None:
    async with upstream_client(5.0) as client:
        model = chat_model(ChatOpenAI, f"http://127.0.0.1:{free_port()}/v1", client, timeout=None)
        with pytest.raises(openai.APIConnectionError) as caught:
            await model.ainvoke([HumanMessage("hello")])
    assert not isinstance(caught.value, openai.APITimeoutError)


async def test_a_server_that_hangs_up_without_answering_is_a_protocol_error(upstream: FakeOpenAI) -> None:
    upstream.script(Hang(0.0))
    async with upstream_client(5.0) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post(f"{upstream.base_url}/chat/completions", json={})


async def test_a_body_cut_short_hands_over_what_arrived_then_fails(upstream: FakeOpenAI) -> None:
    """The upstream writes three events and hangs up: all three reach the reader before the error, every time.
    (aiohttp's reader raised the error first when the bytes and the hang-up arrived in one event-loop turn, so the
    tokens before a cut were lost at random.) Twenty streams, because the loss depended on timing."""
    for _ in range(20):
        upstream.script(Cut(chunks=3))
        received = bytearray()
        async with (
            upstream_client(5.0) as client,
            client.stream("POST", f"{upstream.base_url}/chat/completions", json={"stream": True}) as response,
        ):
            assert response.status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                await _read_into(response, received)
        contents = [
            json.loads(line[6:])["choices"][0]["delta"].get("content")
            for line in received.decode().splitlines()
            if line.startswith("data: {")
        ]
        assert contents == ["", "this", " answer", " will"]


async def test_an_upstream_that_never_answers_is_a_read_timeout(upstream: FakeOpenAI) -> None:
    upstream.script(Hang(5.0))
    async with upstream_client(5.0) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(f"{upstream.base_url}/chat/completions", json={}, timeout=httpx.Timeout(0.2))


async def _read_into(response: httpx.Response, received: bytearray) -> None:
    async for chunk in response.aiter_bytes():
        received += chunk
