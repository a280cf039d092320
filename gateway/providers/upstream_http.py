"""The HTTP client every model call goes out on: httpx's interface over aiohttp's connection pool (issue 17).

``ChatOpenAI`` and the OpenAI SDK under it speak httpx. httpx's own transport (httpcore and h11, in
Python) parses each response and writes each request's headers and body in two socket sends; aiohttp
parses in C and sends once. Under the SDK's httpx client, the ``httpx-aiohttp`` transport (the one the
OpenAI SDK itself offers as ``DefaultAioHttpClient``) saves ~0.35-0.55 ms of CPU per model call, about
a fifth of a ``ChatOpenAI`` call against a zero-latency upstream (``python -m tests.benchmarks.llm_layers``).

Two things it gets wrong for this gateway, fixed here:

- **Errors.** Its exception map turns a refused or dropped connection into ``httpx.ConnectTimeout``
  (``ClientConnectorError`` is also a ``ClientConnectionError``, and that entry wins), so the SDK would
  report a timeout, and the gateway a 504, for an upstream that is down (a 503 with ``httpx``). Here
  aiohttp's errors are translated as httpcore translates the same failures (:func:`translate`), for
  the request and for the response body as it streams.
- **Proxies from the environment.** httpx reads ``HTTPS_PROXY``/``NO_PROXY`` only for its own transport,
  and aiohttp reads them (and ``~/.netrc``) per request on a worker thread when ``trust_env`` is on: two
  thread hand-offs per call, most of what the transport saves. So when the environment names a proxy,
  the client is httpx's own (which routes by those variables, as the SDK's default client does), and
  otherwise aiohttp's, with nothing read from the environment per request.

The app's lifespan opens one client (:func:`upstream_client`, an :class:`UpstreamClient`: an
``httpx.AsyncClient`` and so its own async context manager) for every upstream and closes it at shutdown; its
aiohttp session is made on the first request, inside the serving event loop.

One shortcut beside httpx's interface: :meth:`UpstreamTransport.post_read`, a POST read whole on the aiohttp
pool itself, for ``GatewayChatOpenAI``'s plain calls (which build their own headers and body once). httpx's
client around the transport (auth and redirect loops, the cookie jar's urllib emulation per response, the
response stream wrappers) costs ~0.2 ms of CPU per call, as much as aiohttp's own request; without it the same
headers (the client's, merged under the caller's) and body go out, redirects are followed as the client
follows them (aiohttp's own loop), cookies live in the aiohttp session's jar, and failures are translated as
here.
"""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

# As the OpenAI SDK's own default client: many concurrent calls to one host, redirects followed.
CONNECTIONS = httpx.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=5.0)

Transport = Literal["aiohttp", "httpx"]


def translate(exc: BaseException) -> httpx.TransportError | None:
    """The httpx error httpcore raises for the failure aiohttp reported as ``exc``; None if ``exc`` is not one.

    Only a timeout becomes an ``httpx.TimeoutException`` (which the SDK reports as ``APITimeoutError``);
    a refused, reset or dropped connection is a network error (the SDK's ``APIConnectionError``).
    Order matters: aiohttp's timeouts are also ``asyncio.TimeoutError`` and some also connection errors.
    """
    message = str(exc) or type(exc).__name__
    match exc:
        case aiohttp.ConnectionTimeoutError():
            return httpx.ConnectTimeout(message)
        case aiohttp.ServerTimeoutError() | TimeoutError():
            return httpx.ReadTimeout(message)
        case aiohttp.ClientProxyConnectionError() | aiohttp.ClientHttpProxyError():
            return httpx.ProxyError(message)
        case aiohttp.ClientConnectorError():  # refused, unreachable, name not resolved
            return httpx.ConnectError(message)
        case aiohttp.ServerDisconnectedError():  # closed before or while answering
            return httpx.RemoteProtocolError(message)
        case aiohttp.ClientPayloadError() | aiohttp.ClientOSError():  # cut body, connection reset
            return httpx.ReadError(message)
        case aiohttp.InvalidURL() | aiohttp.NonHttpUrlClientError():
            return httpx.UnsupportedProtocol(message)
        case aiohttp.ClientResponseError():  # an unparseable status line or headers
            return httpx.RemoteProtocolError(message)
        case aiohttp.ClientError():
            return httpx.NetworkError(message)
    return None


def _aiohttp_cause(exc: BaseException) -> BaseException:
    """The aiohttp error behind ``exc``: httpx-aiohttp raises its own mapping ``from`` the original."""
    cause = exc.__cause__
    return cause if isinstance(cause, aiohttp.ClientError | TimeoutError) else exc


@contextmanager
def _translating(request: httpx.Request | None = None) -> Iterator[None]:
    """aiohttp's failures (raw, or as httpx-aiohttp mapped them) raised as :func:`translate` maps them."""
    try:
        yield
    except (TimeoutError, httpx.TransportError, aiohttp.ClientError) as exc:
        cause = _aiohttp_cause(exc)
        translated = translate(cause)
        if translated is None:  # not a transport failure: as it was raised
            raise
        if request is not None:
            translated.request = request
        raise translated from cause


class _TranslatedStream(httpx.AsyncByteStream):
    """A response body whose read errors are translated as the request's are."""

    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _translating():
            async for chunk in self._inner:
                yield chunk

    async def aclose(self) -> None:
        with _translating():
            await self._inner.aclose()


class UpstreamTransport(AiohttpTransport):
    """httpx-aiohttp's transport with httpcore's error translation, and a direct POST (:meth:`post_read`)."""

    def get_client(self) -> aiohttp.ClientSession:
        """httpx-aiohttp's session, but with a cookie jar that keeps an IP-addressed upstream's cookies too (as
        httpx's does: aiohttp's default jar drops them), so a direct POST sends back what httpx would have."""
        if self.client is not None:
            return super().get_client()
        connector = aiohttp.TCPConnector(
            keepalive_timeout=self.limits.keepalive_expiry,
            ssl=self.ssl_context,
            limit=self.limits.max_connections if self.limits.max_connections is not None else 100,  # aiohttp's default
        )
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.CookieJar(unsafe=True))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        with _translating(request):
            response = await super().handle_async_request(request)
        if isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = _TranslatedStream(response.stream)
        return response

    async def post_read(
        self,
        url: httpx.URL,
        content: bytes,
        headers: Sequence[tuple[str, str]],
        budget: httpx.Timeout,
        *,
        follow_redirects: bool,
    ) -> httpx.Response:
        """POST ``content`` to ``url`` on the aiohttp pool and read the whole response, without httpx's client.

        ``budget`` is httpx's timeout, mapped as the transport maps it. ``headers`` go out as given (the caller
        merges the client's own in); the body is left encoded, as this transport leaves it, for httpx's response
        to decode. Failures raise the httpx errors :func:`translate` makes, with no ``request`` attached: the
        caller builds one when it reports them.
        """
        if not isinstance(self.client, aiohttp.ClientSession):
            self.client = self.get_client()
        with _translating():
            async with self.client.post(
                str(url),
                data=content,
                headers=list(headers),
                allow_redirects=follow_redirects,
                auto_decompress=False,
                compress=False,
                timeout=aiohttp.ClientTimeout(sock_connect=budget.connect, sock_read=budget.read, connect=budget.pool),
            ) as response:
                body = await response.read()
        extensions = {"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode()}
        return httpx.Response(response.status, headers=response.raw_headers, content=body, extensions=extensions)


class UpstreamClient(httpx.AsyncClient):
    """The model calls' httpx client; :attr:`direct` is its aiohttp transport (None on httpx's own)."""

    def __init__(self, *, transport: UpstreamTransport | None = None, **options: object) -> None:
        super().__init__(transport=transport, **options)  # type: ignore[arg-type]
        self.direct = transport


def upstream_client(transport: Transport, timeout_s: float) -> UpstreamClient:
    """The httpx client for model calls: over aiohttp, or httpx's own transport (``GATEWAY_LLM_TRANSPORT=httpx``,
    or a proxy named by the environment)."""
    timeout = httpx.Timeout(timeout_s, connect=5.0)
    if transport == "httpx" or urllib.request.getproxies():
        return UpstreamClient(timeout=timeout, limits=CONNECTIONS, follow_redirects=True)
    return UpstreamClient(transport=UpstreamTransport(limits=CONNECTIONS), timeout=timeout, follow_redirects=True)
