"""The LLM adapter: every model call of every pipeline goes through :class:`LLMClient`.

It wraps a LangChain chat model, so production uses ``ChatOpenAI`` against any OpenAI-compatible
endpoint and tests inject a scripted model the way httpx injects ``transport=``. Here usage and
cost are recorded per call and upstream errors become :mod:`gateway.errors` provider errors.

Resilience is layered, not written here: each attempt is translated into a gateway error and
:class:`gateway.providers.resilience.ResilientUpstream` decides whether to retry it, wait for the
upstream's ``Retry-After``, or fail fast because the upstream's breaker is open. ``ChatOpenAI`` is
built with ``max_retries=0`` so the SDK's own retries neither hide faults from the breaker nor
count twice. With a fallback configured, a call the primary cannot answer (down, open breaker, rate
limited past the budget) goes to the fallback upstream, within the same deadline.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, SecretStr, ValidationError

from gateway.errors import (
    MalformedOutputError,
    ProviderError,
    ProviderRateLimitedError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    StreamInterruptedError,
)
from gateway.observability import BreakerState, Telemetry
from gateway.providers.deadline import deadline_after
from gateway.providers.resilience import (
    CircuitBreaker,
    ResilientUpstream,
    RetryPolicy,
    UpstreamEvents,
    fault_of,
    parse_retry_after,
)
from gateway.settings import LLMEndpointSettings, LLMSettings, ModelPrice
from pipelines.shared import ChatReply, LLMCall, SchemaT, TextSink

PROVIDER = "llm"
PRIMARY = "primary"
FALLBACK = "fallback"
# With a fallback, the primary's share of a call's budget (retries included); the fallback gets what is left.
PRIMARY_SHARE = 0.5

# A call's own parameters (``max_tokens``, ``response_format``), passed with the call as ``ainvoke``'s keyword
# arguments: the same request as ``model.bind(**params)``, without a ``RunnableBinding`` (a pydantic model) built and
# its config merged on every call (~40 µs of CPU).
CallParams = Mapping[str, Any]


def build_chat_model(
    llm: LLMSettings,
    endpoint: LLMEndpointSettings,
    *,
    base_url: str | None = None,
    model: str | None = None,
    api_key: SecretStr | None = None,
    http_client: httpx.AsyncClient | None = None,
) -> ChatOpenAI:
    """One ``ChatOpenAI`` per upstream; only ``base_url``/model/key differ between local, prod and fallback.

    No SDK retries: :class:`ResilientUpstream` retries, so each retry is counted once and seen by the breaker.
    ``http_client``: the app's upstream client (:mod:`gateway.providers.upstream_http`); without it the SDK's own.
    """
    return ChatOpenAI(
        model=model or llm.model,
        base_url=base_url or endpoint.base_url,
        api_key=api_key or endpoint.api_key,
        timeout=endpoint.timeout_s,
        max_retries=0,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        # Streamed answers (the chat endpoint) report token usage too, so budgets count them.
        stream_usage=True,
        http_async_client=http_client,
    )


@dataclass(frozen=True, slots=True)
class Upstream:
    """One model behind one endpoint, with its own breaker and retries."""

    model: BaseChatModel
    model_name: str
    price: ModelPrice
    resilience: ResilientUpstream

    @property
    def name(self) -> str:
        return self.resilience.name


def resilient(name: str, endpoint: LLMEndpointSettings, events: UpstreamEvents) -> ResilientUpstream:
    """The retry policy and breaker the endpoint settings describe, for upstream ``name``."""
    breaker = CircuitBreaker(
        name,
        failure_threshold=endpoint.breaker_failures,
        cooldown_s=endpoint.breaker_cooldown_s,
        provider=PROVIDER,
        events=events,
    )
    policy = RetryPolicy(endpoint.max_retries, endpoint.retry_backoff_s, endpoint.retry_max_backoff_s)
    return ResilientUpstream(breaker, policy, events=events)


def open_llm_client(
    llm: LLMSettings,
    endpoint: LLMEndpointSettings,
    *,
    telemetry: Telemetry | None = None,
    chat_model: BaseChatModel | None = None,
    http_client: httpx.AsyncClient | None = None,
) -> LLMClient:
    """The app's LLM client: the primary upstream (``chat_model`` when a test injects one) and the fallback
    the settings name, each with its own breaker, sharing the endpoint's retry policy and call budget."""
    events = telemetry or Telemetry(None, None)
    fallback = None
    if endpoint.has_fallback:
        model_name = endpoint.fallback_model or llm.model
        fallback = Upstream(
            build_chat_model(
                llm,
                endpoint,
                base_url=endpoint.fallback_base_url,
                model=model_name,
                api_key=endpoint.fallback_api_key,
                http_client=http_client,
            ),
            model_name,
            endpoint.price_for(model_name),
            resilient(FALLBACK, endpoint, events),
        )
    return LLMClient(
        chat_model or build_chat_model(llm, endpoint, http_client=http_client),
        model_name=llm.model,
        price=endpoint.price_for(llm.model),
        telemetry=telemetry,
        resilience=resilient(PRIMARY, endpoint, events),
        fallback=fallback,
        timeout_s=endpoint.timeout_s,
    )


@functools.cache
def _json_schema_format(schema: type[BaseModel]) -> dict[str, Any]:
    """Built once per schema class (pydantic's ``model_json_schema`` walks the model on every call); the dict is
    only read by the SDK when it serialises the request."""
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema(), "strict": True},
    }


class LLMClient:
    """Usage-accounting, error-translating front of a chat model (and of its fallback, when there is one).

    ``timeout_s`` is the budget of one call, retries and fallback included; a request's deadline
    (:mod:`gateway.providers.deadline`) shortens it. With a fallback the primary has half of it, so a
    hanging primary leaves the fallback time to answer. Without ``resilience`` the primary gets a default
    breaker and no retries.
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        model_name: str,
        price: ModelPrice,
        telemetry: Telemetry | None = None,
        resilience: ResilientUpstream | None = None,
        fallback: Upstream | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self._telemetry = telemetry or Telemetry(None, None)
        primary = Upstream(model, model_name, price, resilience or ResilientUpstream(CircuitBreaker(PRIMARY)))
        self._upstreams = [primary] if fallback is None else [primary, fallback]
        self.model_name = model_name
        self._timeout_s = math.inf if timeout_s is None else timeout_s

    def with_model(self, model: BaseChatModel, model_name: str, price: ModelPrice) -> LLMClient:
        """This client asking another model of the same endpoint (an assistant profile's model for a route).

        The upstreams' breakers and retries are shared, not copied: the endpoint is one, and an outage seen
        by one model's calls must fail the others fast too. The fallback stays the configured one.
        """
        clone = copy.copy(self)
        primary = self._upstreams[0]
        clone._upstreams = [Upstream(model, model_name, price, primary.resilience), *self._upstreams[1:]]
        clone.model_name = model_name
        return clone

    @property
    def upstreams(self) -> dict[str, BreakerState]:
        """Each upstream's breaker state, for readiness."""
        return {u.name: u.resilience.breaker.state for u in self._upstreams}

    def check_breaker(self, upstream: str) -> None:
        """Readiness: raise while ``upstream``'s breaker is open (calls to it fail fast, or fall back)."""
        for candidate in self._upstreams:
            breaker = candidate.resilience.breaker
            if candidate.name == upstream and breaker.state == "open":
                retry = math.ceil(breaker.retry_after_s())
                raise ProviderUnavailableError(f"circuit open (probing again in {retry}s)", provider=PROVIDER)

    async def chat(
        self, messages: list[BaseMessage], *, node: str, max_tokens: int | None = None, on_text: TextSink | None = None
    ) -> ChatReply:
        params = {"max_tokens": max_tokens} if max_tokens else {}
        text, call = await self._invoke(params, messages, node, max_tokens, on_text)
        return ChatReply(text=text, call=call)

    async def structured(
        self, messages: list[BaseMessage], schema: type[SchemaT], *, node: str
    ) -> tuple[SchemaT, LLMCall]:
        """JSON-schema constrained output, parsed and validated by pydantic.

        ``response_format`` rather than tool calling, because llama.cpp enforces a JSON schema with
        a grammar and small models follow a grammar far more reliably than a tool protocol.
        """
        text, call = await self._invoke({"response_format": _json_schema_format(schema)}, messages, node)
        try:
            return schema.model_validate_json(_strip_fences(text)), call
        except (ValidationError, json.JSONDecodeError) as exc:
            detail = f"model returned output that does not match {schema.__name__}"
            raise self._malformed(node, detail, call, call.model) from exc

    def _malformed(self, node: str, detail: str, call: LLMCall, model_name: str) -> MalformedOutputError:
        """The model answered, but not in the requested structure: the pipeline may degrade that one judgement,
        and the call it still paid for travels with the error."""
        self._telemetry.llm_failed(node, model_name, "malformed_output")
        error = MalformedOutputError(detail, provider=PROVIDER, node=node)
        error.call = call
        return error

    async def _invoke(
        self,
        params: CallParams,
        messages: list[BaseMessage],
        node: str,
        max_tokens: int | None = None,
        on_text: TextSink | None = None,
    ) -> tuple[str, LLMCall]:
        """The reply's text (read once, for the caller and the span) and its accounting."""
        with self._telemetry.llm_call(node, self.model_name, messages, max_tokens) as span:
            message, call = await self._call(params, messages, node, on_text)
            text = _text_of(message)
            span.done(call, text)
        self._telemetry.llm_usage(call)
        return text, call

    async def _call(
        self, params: CallParams, messages: list[BaseMessage], node: str, on_text: TextSink | None = None
    ) -> tuple[AIMessage, LLMCall]:
        """The primary, through its breaker and retries; the fallback when the primary cannot answer."""
        deadline = deadline_after(self._timeout_s)
        failed: tuple[Upstream, ProviderError] | None = None
        for index, upstream in enumerate(self._upstreams):
            # An upstream with another behind it gets a share of the budget: a hang must leave the fallback time.
            own_deadline = deadline if index == len(self._upstreams) - 1 else _share(deadline, PRIMARY_SHARE)
            if failed is not None:
                previous, error = failed
                fault = fault_of(error)
                if fault is None or not fault.fallback:
                    raise error
                self._telemetry.fell_back(previous.name, upstream.name, fault.reason)

            async def attempt(seconds_left: float, upstream: Upstream = upstream) -> tuple[AIMessage, LLMCall]:
                return await self._attempt(upstream, params, messages, node, seconds_left, on_text)

            try:
                return await upstream.resilience.call(attempt, deadline=own_deadline)
            except MalformedOutputError:
                raise
            except ProviderError as exc:
                failed = (upstream, exc)
        assert failed is not None  # the loop returns or records a failure for every upstream
        raise failed[1]

    async def _attempt(
        self,
        upstream: Upstream,
        params: CallParams,
        messages: list[BaseMessage],
        node: str,
        seconds_left: float,
        on_text: TextSink | None = None,
    ) -> tuple[AIMessage, LLMCall]:
        """One call to one upstream within ``seconds_left``, its failure translated into a gateway error."""
        started = time.perf_counter()
        delivered = _Delivered(on_text)

        def cut_short(exc: BaseException) -> StreamInterruptedError | None:
            """Part of this attempt's answer was handed over (and may have reached a client): it cannot be retried
            or replaced."""
            if not delivered.any:
                return None
            detail = f"LLM stream broke off in node {node} after part of the answer was sent ({type(exc).__name__})"
            return StreamInterruptedError(detail, provider=PROVIDER, upstream=upstream.name)

        try:
            async with asyncio.timeout(seconds_left if math.isfinite(seconds_left) else None):
                message = await _ask(upstream.model, messages, params, delivered)
        except (openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError) as exc:
            # The structured reply was cut off (max_tokens) or filtered: malformed output, not a failed request.
            call = self._account(upstream, node, _completion_usage(exc), time.perf_counter() - started)
            self._telemetry.llm_usage(call)  # spent like any other call's (_invoke never gets to count it)
            detail = f"model output cut short in node {node} ({exc.__class__.__name__})"
            raise self._malformed(node, detail, call, upstream.model_name) from exc
        except (TimeoutError, openai.APITimeoutError) as exc:  # TimeoutError: the call's deadline, ours
            raise cut_short(exc) or ProviderTimeoutError(
                f"LLM call timed out in node {node} ({seconds_left:.1f}s left)", provider=PROVIDER
            ) from exc
        except openai.APIConnectionError as exc:
            raise cut_short(exc) or ProviderUnavailableError(
                f"cannot reach the LLM endpoint ({exc.__class__.__name__})", provider=PROVIDER
            ) from exc
        except openai.APIStatusError as exc:
            raise _status_error(exc, node) from exc
        except httpx.HTTPError as exc:
            raise cut_short(exc) or ProviderUnavailableError(f"LLM transport error: {exc}", provider=PROVIDER) from exc
        usage = getattr(message, "usage_metadata", None) or {}
        tokens = (int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)))
        return message, self._account(upstream, node, tokens, time.perf_counter() - started)

    def _account(self, upstream: Upstream, node: str, tokens: tuple[int, int], duration: float) -> LLMCall:
        input_tokens, output_tokens = tokens
        price = upstream.price
        cost = (input_tokens * price.input + output_tokens * price.output) / 1_000_000
        return LLMCall(
            node=node,
            model=upstream.model_name,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            duration_s=duration,
            cost_usd=cost,
        )


class _Delivered:
    """The text deltas of one attempt, handed to the caller's sink as they arrive; remembers whether any was."""

    def __init__(self, sink: TextSink | None) -> None:
        self.sink = sink
        self.any = False

    def __call__(self, delta: str) -> None:
        if delta and self.sink is not None:
            self.any = True
            self.sink(delta)


async def _ask(
    model: BaseChatModel, messages: list[BaseMessage], params: CallParams, delivered: _Delivered
) -> AIMessage:
    """``ainvoke``, or, when the caller takes the text as it comes, ``astream`` merged into one message.

    Chunks are summed the way LangChain merges them, so the result carries the usage metadata of the final
    chunk (``stream_usage``) exactly as an ``ainvoke`` result does.
    """
    if delivered.sink is None:
        message: AIMessage = await model.ainvoke(messages, **params)
        return message
    merged: AIMessageChunk | None = None
    async for chunk in model.astream(messages, **params):
        merged = chunk if merged is None else merged + chunk
        delivered(_text_of(chunk, strip=False))
    if merged is None:
        return AIMessage(content="")
    return AIMessage(
        content=merged.content,
        usage_metadata=merged.usage_metadata,
        response_metadata=merged.response_metadata,
        id=merged.id,
    )


def _share(deadline: float, share: float) -> float:
    """The point ``share`` of the way from now to ``deadline``."""
    now = time.monotonic()
    return deadline if not math.isfinite(deadline) else now + max(deadline - now, 0.0) * share


def _status_error(exc: openai.APIStatusError, node: str) -> ProviderError:
    """An HTTP error answer; its ``Retry-After`` (429s, and 503s that send one) tells the retries how long to wait."""
    status = exc.status_code
    retry_after = parse_retry_after(exc.response.headers)
    if status == 429:
        return ProviderRateLimitedError(
            f"LLM endpoint rate-limited the gateway (HTTP 429) in node {node}",
            provider=PROVIDER,
            retry_after_s=retry_after,
            upstream_status=status,
        )
    error = ProviderError(
        f"LLM endpoint answered HTTP {status} in node {node}", provider=PROVIDER, upstream_status=status
    )
    error.retry_after_s = retry_after
    return error


def _completion_usage(exc: openai.LengthFinishReasonError | openai.ContentFilterFinishReasonError) -> tuple[int, int]:
    """Tokens spent by a call the OpenAI client refused to parse (they are still billed)."""
    completion = getattr(exc, "completion", None)
    usage = getattr(completion, "usage", None)
    if usage is None:
        return 0, 0
    return int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)


async def ping_llm(http: httpx.AsyncClient, base_url: str, api_key: SecretStr, timeout_s: float) -> None:
    """Readiness: the OpenAI-compatible ``/models`` endpoint answers (within the probe's ``timeout_s``)."""
    url = base_url.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {api_key.get_secret_value()}"}
    try:
        response = await http.get(url, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise ProviderUnavailableError(f"LLM endpoint {url} unreachable: {exc!r}", provider=PROVIDER) from exc
    if response.status_code >= 400:
        raise ProviderUnavailableError(f"LLM endpoint {url} answered HTTP {response.status_code}", provider=PROVIDER)


def _text_of(message: BaseMessage, *, strip: bool = True) -> str:
    content = message.content
    if isinstance(content, str):
        text = content
    else:
        text = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return text.strip() if strip else text


def _strip_fences(text: str) -> str:
    """Endpoints without grammar support sometimes wrap JSON in Markdown fences."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.strip("`")
        if stripped.startswith("json"):
            stripped = stripped[4:]
    return stripped.strip()
