"""The HTTP client every model call goes out on: httpx's interface, over aiohttp's connection pool or httpx's own.

``ChatOpenAI`` and the OpenAI SDK under it speak httpx; a custom transport is httpx's supported way to change what
is under that interface. The ``httpx-aiohttp`` transport (the one the OpenAI SDK itself offers as
``DefaultAioHttpClient``) parses responses in C and sends each request in one socket write, where httpx's own
transport (httpcore and h11, in Python) parses in Python: ``GATEWAY_LLM_TRANSPORT`` chooses, and
``tests/benchmarks/RESULTS.md`` gives what each costs per model call.

Two things the aiohttp transport gets wrong for this gateway, fixed here:

- **Errors.** Its exception map turns a refused or dropped connection into ``httpx.ConnectTimeout``
  (``ClientConnectorError`` is also a ``ClientConnectionError``, and that entry wins), so the SDK would
  report a timeout, and the gateway a 504, for an upstream that is down (a 503 with ``httpx``). Here
  aiohttp's errors are translated as httpcore translates the same failures (:func:`translate`), for
  the request and for the response body as it streams.
- **Proxies from the environment.** httpx reads ``HTTPS_PROXY``/``NO_PROXY`` only for its own transport,
  and aiohttp reads them (and ``~/.netrc``) per request on a worker thread when ``trust_env`` is on. So when
  the environment names a proxy, the client is httpx's own (which routes by those variables, as the SDK's
  default client does).

The platform opens one client (:func:`upstream_client`) for every upstream and closes it at shutdown; the aiohttp
session is made on the first request, inside the serving event loop.
"""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator, Iterator
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
    """httpx-aiohttp's transport with httpcore's error translation."""

    def get_client(self) -> aiohttp.ClientSession:
        """httpx-aiohttp's session, but with a cookie jar that keeps an IP-addressed upstream's cookies too (as
        httpx's does: aiohttp's default jar drops them)."""
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


def upstream_client(transport: Transport, timeout_s: float) -> httpx.AsyncClient:
    """The httpx client for model calls: over aiohttp, or httpx's own transport (``GATEWAY_LLM_TRANSPORT=httpx``,
    or a proxy named by the environment)."""
    timeout = httpx.Timeout(timeout_s, connect=5.0)
    if transport == "httpx" or urllib.request.getproxies():
        return httpx.AsyncClient(timeout=timeout, limits=CONNECTIONS, follow_redirects=True)
    return httpx.AsyncClient(transport=UpstreamTransport(limits=CONNECTIONS), timeout=timeout, follow_redirects=True)
