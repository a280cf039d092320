"""The model calls' HTTP client over aiohttp: real sockets on loopback, failures as httpcore reports them.

The OpenAI SDK decides timeout (``APITimeoutError``, a 504 here) against unreachable (``APIConnectionError``,
a 503) by the httpx error class, so each failure below is produced for real by the fake upstream the fault
tests use (:class:`tests.fakes.openai_server.FakeOpenAI`: a closed port, a server that hangs up, a body cut
short, a server that never answers) and the class is what is checked.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage
from pydantic import SecretStr

from gateway.providers.chat_openai import GatewayChatOpenAI
from gateway.providers.upstream_http import UpstreamTransport, translate, upstream_client
from tests.fakes.openai_server import Answer, Cut, FakeOpenAI, Hang
from tests.ports import free_port


@pytest.fixture
def upstream() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(Answer("Paris.")) as server:
        yield server


async def test_a_completion_round_trips_and_the_body_is_sent_whole(upstream: FakeOpenAI) -> None:
    async with upstream_client("aiohttp", 5.0) as client:
        model = GatewayChatOpenAI(
            model="fake-gpt",
            base_url=upstream.base_url,
            api_key=SecretStr("k"),
            max_retries=0,
            http_async_client=client,
        )
        first = await model.ainvoke([HumanMessage("What is the capital of France?")])
        second = await model.ainvoke([HumanMessage("And of Japan?")])
    assert isinstance(client._transport, UpstreamTransport)
    assert (first.content, second.content) == ("Paris.", "Paris.")
    assert first.usage_metadata is not None
    assert first.usage_metadata["total_tokens"] == 13
    assert [seen.messages for seen in upstream.seen] == [("What is the capital of France?",), ("And of Japan?",)]


async def test_a_refused_connection_is_a_connect_error_not_a_timeout() -> None:
    async with upstream_client("aiohttp", 5.0) as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.post(f"http://127.0.0.1:{free_port()}/v1/chat/completions", json={})
    assert not isinstance(caught.value, httpx.TimeoutException)
    assert caught.value.request.url.port is not None


async def test_the_sdk_reports_a_refused_connection_as_unreachable() -> None:
    async with upstream_client("aiohttp", 5.0) as client:
        model = GatewayChatOpenAI(
            model="fake-gpt",
            base_url=f"http://127.0.0.1:{free_port()}/v1",
            api_key=SecretStr("k"),
            max_retries=0,
            http_async_client=client,
        )
        with pytest.raises(openai.APIConnectionError) as caught:
            await model.ainvoke([HumanMessage("hello")])
    assert not isinstance(caught.value, openai.APITimeoutError)


async def test_a_server_that_hangs_up_without_answering_is_a_protocol_error(upstream: FakeOpenAI) -> None:
    upstream.script(Hang(0.0))
    async with upstream_client("aiohttp", 5.0) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post(f"{upstream.base_url}/chat/completions", json={})


async def test_a_body_cut_short_is_a_read_error_while_it_streams(upstream: FakeOpenAI) -> None:
    upstream.script(Cut())
    async with (
        upstream_client("aiohttp", 5.0) as client,
        client.stream("POST", f"{upstream.base_url}/chat/completions", json={}) as response,
    ):
        assert response.status_code == 200
        with pytest.raises(httpx.ReadError):
            await response.aread()


async def test_an_upstream_that_never_answers_is_a_read_timeout(upstream: FakeOpenAI) -> None:
    upstream.script(Hang(5.0))
    async with upstream_client("aiohttp", 5.0) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(f"{upstream.base_url}/chat/completions", json={}, timeout=httpx.Timeout(0.2))


def test_what_is_not_an_aiohttp_failure_is_left_alone() -> None:
    assert translate(ValueError("not a transport failure")) is None
    assert isinstance(translate(TimeoutError()), httpx.ReadTimeout)


async def test_a_proxy_in_the_environment_gets_httpx_which_routes_by_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    proxied = upstream_client("aiohttp", 5.0)
    try:
        assert not isinstance(proxied._transport, UpstreamTransport)
        assert proxied._transport_for_url(httpx.URL("https://api.openai.com/v1")) is not proxied._transport
        assert proxied._transport_for_url(httpx.URL("http://127.0.0.1:8081/v1")) is proxied._transport
    finally:
        await proxied.aclose()


async def test_without_a_proxy_aiohttp_reads_nothing_from_the_environment_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    direct = upstream_client("aiohttp", 5.0)
    try:
        assert isinstance(direct._transport, UpstreamTransport)
        session = direct._transport.get_client()
        assert session.trust_env is False  # True would read the proxy variables and ~/.netrc on a thread per call
        await session.close()
    finally:
        await direct.aclose()
    plain = upstream_client("httpx", 5.0)
    try:
        assert not isinstance(plain._transport, UpstreamTransport)
    finally:
        await plain.aclose()
