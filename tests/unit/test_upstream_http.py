"""The model calls' HTTP client over aiohttp: real sockets on loopback, failures as httpcore reports them.

The OpenAI SDK decides timeout (``APITimeoutError``, a 504 here) against unreachable (``APIConnectionError``,
a 503) by the httpx error class, so each failure below is produced for real by the fake upstream the fault
tests use (:class:`tests.fakes.openai_server.FakeOpenAI`: a closed port, a server that hangs up, a body cut
short, a server that never answers) and the class is what is checked.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from gateway.providers.upstream_http import UpstreamTransport, translate, upstream_client
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
    async with upstream_client("aiohttp", 5.0) as client:
        model = chat_model(ChatOpenAI, upstream.base_url, client, timeout=None)
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
        model = chat_model(ChatOpenAI, f"http://127.0.0.1:{free_port()}/v1", client, timeout=None)
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


class Recording:
    """An aiohttp server on loopback that records each POST's headers and answers as ``reply`` says."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.gzip = False
        self.status = 200
        self.cookie: str | None = None

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.path, {k.lower(): v for k, v in request.headers.items()}, await request.json()))
        if request.path.endswith("/moved/chat/completions"):
            raise web.HTTPTemporaryRedirect("/v1/chat/completions")
        if self.status != 200:
            return web.json_response({"error": {"message": "boom", "type": "server_error"}}, status=self.status)
        body = json.dumps(completion_body("Paris.")).encode()
        headers = {"Content-Type": "application/json"}
        if self.gzip:
            body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        response = web.Response(body=body, headers=headers)
        if self.cookie:
            response.set_cookie("affinity", self.cookie)
        return response


def completion_body(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "fake-gpt",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13},
    }


@pytest.fixture
async def recording() -> AsyncIterator[tuple[Recording, str]]:
    server = Recording()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.completions)
    app.router.add_post("/moved/chat/completions", server.completions)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_over_aiohttp_a_gzip_body_is_decoded_a_redirect_followed_and_an_ip_hosts_cookie_sent_back(
    recording: tuple[Recording, str],
) -> None:
    """What httpx's own transport does with these, the aiohttp one does too (aiohttp's default cookie jar would
    drop the cookie of an upstream addressed by IP, as most in-cluster ones are)."""
    server, root = recording
    server.gzip, server.cookie = True, "replica-2"
    async with upstream_client("aiohttp", 5.0) as client:
        model = chat_model(ChatOpenAI, f"{root}/moved", client)
        first = await model.ainvoke([HumanMessage("hello")])
        await model.ainvoke([HumanMessage("again")])
    assert first.content == "Paris."
    paths = [path for path, _, _ in server.seen]
    assert paths == ["/moved/chat/completions", "/v1/chat/completions"] * 2
    assert "cookie" not in server.seen[0][1]
    assert server.seen[2][1]["cookie"] == "affinity=replica-2"


async def test_an_error_status_over_aiohttp_is_the_sdks_error_for_that_status(
    recording: tuple[Recording, str],
) -> None:
    server, root = recording
    server.status = 503
    async with upstream_client("aiohttp", 5.0) as client:
        with pytest.raises(openai.InternalServerError) as raised:
            await chat_model(ChatOpenAI, f"{root}/v1", client).ainvoke([HumanMessage("hello")])
    assert raised.value.status_code == 503
