"""The HTTP client every model call goes out on: one httpx client, with httpx's own transport, for every upstream.

``ChatOpenAI`` and the OpenAI SDK under it speak httpx. An aiohttp transport under that interface saved about a
quarter of a millisecond of CPU per call, but aiohttp's stream reader raises a dropped connection's error before it
hands over the body bytes that had already arrived: the tokens an upstream sent just before it cut a stream were
lost, or not, by the timing of one event-loop turn. httpx (httpcore and h11) hands over every byte received and then
raises, and maps each failure to the error class the SDK reports (a refused connection is unreachable, a 503; a
hang is a timeout, a 504), and routes by ``HTTPS_PROXY``/``NO_PROXY`` as the SDK's own client does.

The platform opens the client (:func:`upstream_client`) once and closes it at shutdown.
"""

from __future__ import annotations

import httpx

# As the OpenAI SDK's own default client: many concurrent calls to one host, redirects followed.
CONNECTIONS = httpx.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=5.0)
CONNECT_TIMEOUT_S = 5.0


def upstream_client(timeout_s: float) -> httpx.AsyncClient:
    """The httpx client for model calls; ``timeout_s`` bounds each read (a call's own budget is the adapter's)."""
    timeout = httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
    return httpx.AsyncClient(timeout=timeout, limits=CONNECTIONS, follow_redirects=True)
