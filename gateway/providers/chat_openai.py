"""``ChatOpenAI`` with five per-call costs of the Chat Completions path taken out (issue 17).

Every model call of the gateway goes through ``ChatOpenAI``; on a ``direct`` miss that call is most of
the gateway's own CPU. Five of its costs buy this gateway nothing, and :class:`GatewayChatOpenAI` (still a
``ChatOpenAI``: callbacks, streaming, ``response_format``, usage metadata and the error translation are
langchain_openai's own) removes them:

- **The worker-thread hop for every result.** ``BaseChatOpenAI._agenerate`` builds the ``ChatResult``
  from the SDK's response with ``run_in_executor``: a thread pool submit, a thread wake-up and a
  call back into the event loop for ~50 µs of dictionary work, on every call. Here the Chat Completions
  branch of ``_agenerate`` is the installed langchain_openai's, line for line, except that it builds the
  result in place (and from the JSON body, below). The Responses API branch is left to the parent.
- **The SDK's request transform over the messages.** ``AsyncCompletions.create`` walks its whole body
  against the parameters' type annotations on every call (to rename aliased keys and format dates),
  and tries each member of the message union for each message: ~0.3 ms of CPU for a two-message
  call. Chat Completions messages and the plain sampling parameters (:data:`PLAIN_JSON`) have no
  aliased or formatted fields (the transform returns them as they are), so they travel in
  ``extra_body``, which the SDK merges into the JSON body as it is. What the SDK reads itself
  (``model``, ``stream``, ``response_format``, ``tools``, request options) and any parameter not
  listed is still passed as before and transformed. The body on the wire is the same
  (``tests/unit/test_chat_openai.py`` compares it with ``ChatOpenAI``'s).
- **The SDK's response models.** A JSON completion is read into a dict and handed to langchain_openai's
  ``_create_chat_result``, which takes a dict as it takes the SDK's ``ChatCompletion``: the SDK's
  ``construct_type`` walk of the response and langchain's ``model_dump`` of it back into a dict (~0.2 ms of
  CPU per call) are skipped. The result is the same except that fields the upstream did not send are absent
  instead of None (``token_usage`` without ``completion_tokens_details: None``). Structured output
  (``response_format``) and a body that is not JSON still go through the SDK's ``parse``.
- **The SDK's request machinery around a plain JSON POST.** For a call whose payload is only the model,
  ``stream: false``, the :data:`PLAIN_JSON` parameters and a caller's ``extra_body`` (every call this
  gateway makes without ``response_format``), the SDK's ``create`` copies its options model twice, builds
  the headers, URL and ``httpx.Request`` anew and runs the per-call hooks (key providers, workload
  identity, provider runtimes) that a static API key never uses: ~0.3-0.4 ms of CPU, a tenth of a
  ``direct`` miss. :class:`GatewayChatOpenAI` posts that body (serialised by the SDK's own
  ``openapi_dumps``) on the same client (on the app's :class:`UpstreamClient`, straight onto its aiohttp
  pool: :meth:`UpstreamTransport.post_read`), to the same URL, with the headers the SDK sends
  (built once per model from the client's public ``auth_headers``/``default_headers``), and raises the
  SDK's own errors: ``APITimeoutError``/``APIConnectionError`` for a transport failure, and for an error
  status the exception the SDK makes of that response. Anything else (SDK retries, a key provider, a custom auth
  or query, tools, ``response_format``, request options) keeps the SDK path; ``tests/unit/test_chat_openai.py``
  compares method, URL, headers and body with ``ChatOpenAI``'s, and each error.
- **LangChain's run bookkeeping when nobody listens.** ``BaseChatModel.agenerate`` computes the invocation
  and LangSmith parameters, copies the messages for tracing, makes a run manager (a uuid7 run id) and
  reports the start and end of the run to it, and runs the one generation in a task of its own
  (``asyncio.gather``): ~0.3 ms of CPU per call, for callback handlers this gateway does not have. When
  the callback manager LangChain would configure for the call has no handler at all (no callbacks
  passed or inherited, no tracing, no verbose, no configure hook such as LangSmith's or a LangGraph
  stream's), :meth:`GatewayChatOpenAI.agenerate` runs the generation (``_agenerate_with_cache``: the model
  cache, the rate limiter and streaming decisions are LangChain's own) in place and returns the same
  ``LLMResult``, less the run info nobody was told about. With any handler the call is LangChain's own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from langchain_core.callbacks import AsyncCallbackManager, AsyncCallbackManagerForLLMRun, Callbacks
from langchain_core.globals import get_llm_cache
from langchain_core.language_models import LanguageModelInput, chat_models
from langchain_core.language_models._utils import _normalize_messages
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult, LLMResult
from langchain_openai import ChatOpenAI
from langchain_openai.chat_models.base import (
    _add_gateway_metadata,
    _handle_openai_api_error,
    _handle_openai_bad_request,
)
from openai._utils._json import openapi_dumps
from pydantic import PrivateAttr, SecretStr

from gateway.providers.upstream_http import UpstreamClient, UpstreamTransport

# LangChain's own fold of a generation's info into its message's metadata. Private: a langchain-core without it
# sends every unheard call through _agenerate_with_cache instead.
_FOLD: Callable[[ChatGeneration], dict[str, Any]] | None = getattr(chat_models, "_gen_info_and_msg_metadata", None)

# The key the SDK merges, as it is, into the request's JSON body.
EXTRA_BODY = "extra_body"
# Chat Completions parameters that are plain JSON (no alias, no format, not read by the SDK itself): sent as they
# are through ``extra_body``. A parameter not listed here goes through the SDK's transform as before.
PLAIN_JSON = frozenset(
    {
        "messages",
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "seed",
        "n",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "user",
        "stream_options",
    }
)


# What a payload may hold for the direct POST (:meth:`GatewayChatOpenAI._post_plain`): anything else takes the SDK path.
DIRECT_KEYS = PLAIN_JSON | {"model", "stream", EXTRA_BODY}
CHAT_COMPLETIONS = "/chat/completions"
# The SDK's per-call hooks; a client with any of them set keeps the SDK path (absent in older SDKs: none set).
_SDK_HOOKS = ("_provider_runtime", "_api_key_provider", "_workload_identity_auth")


@dataclass(frozen=True, slots=True)
class _Wire:
    """Where and how a plain Chat Completions call is posted: what the SDK would build for it on every call.

    ``headers`` are the client's own with the SDK's over them, as httpx would merge them per request. ``direct``
    is the client's aiohttp transport when it has one (:class:`UpstreamClient`): the POST then goes out on it,
    without httpx's client around it.
    """

    http: httpx.AsyncClient
    url: httpx.URL
    headers: tuple[tuple[str, str], ...]
    budget: httpx.Timeout
    direct: UpstreamTransport | None


def _completion_of(http: httpx.Response) -> dict[str, Any] | str:
    """The completion as the SDK's ``parse`` reads a 200: a JSON dict, else the text (which langchain refuses)."""
    found = _json_body(http)
    if found is not None:
        return found
    try:
        body = http.json()
    except ValueError:
        return http.text
    return body if isinstance(body, dict) else http.text


def _json_body(http: httpx.Response) -> dict[str, Any] | None:
    """The completion as a dict when the upstream says it is JSON (as the SDK reads its content type); else None."""
    content_type, *_ = http.headers.get("content-type", "*").split(";")
    if not content_type.endswith("json"):
        return None
    body = http.json()
    return body if isinstance(body, dict) else None


class GatewayChatOpenAI(ChatOpenAI):
    """A ``ChatOpenAI`` whose Chat Completions calls skip the per-call costs the module's docstring lists."""

    # Built on the first plain call, inside the serving loop (the SDK's ``X-Stainless-Async`` header names it).
    _wire: _Wire | None = PrivateAttr(default=None)

    def _plain_wire(self) -> _Wire | None:
        """The direct POST's target, or None when this model's client needs the SDK's per-call machinery."""
        if self._wire is not None:
            return self._wire
        client, http = self.root_async_client, self.http_async_client
        if not isinstance(http, httpx.AsyncClient):
            return None
        plain = (
            type(client) is openai.AsyncOpenAI
            and client.max_retries == 0  # the direct POST is one attempt: SDK retries keep the SDK path
            and isinstance(self.openai_api_key, SecretStr)
            and client.custom_auth is None
            and not client.default_query
            and all(getattr(client, hook, None) is None for hook in _SDK_HOOKS)
        )
        if not plain:
            return None
        budget = httpx.Timeout(client.timeout)
        headers = httpx.Headers(http.headers)
        headers.update(
            {
                key: value
                for key, value in {**client.auth_headers, **client.default_headers}.items()
                if isinstance(value, str)  # the SDK drops its ``Omit`` placeholders (no organisation, no project)
            }
        )
        headers["x-stainless-retry-count"] = "0"  # the one attempt there is
        headers["x-stainless-raw-response"] = "true"  # ChatOpenAI calls ``with_raw_response``, which says so
        if budget.read is not None:
            headers["x-stainless-read-timeout"] = str(budget.read)
        url = client.base_url.copy_with(raw_path=client.base_url.raw_path + CHAT_COMPLETIONS.lstrip("/").encode())
        direct = http.direct if isinstance(http, UpstreamClient) else None
        self._wire = _Wire(http, url, tuple(headers.items()), budget, direct)
        return self._wire

    async def _post_plain(self, wire: _Wire, payload: dict[str, Any]) -> tuple[httpx.Response, dict[str, Any] | str]:
        """POST ``payload`` as the SDK would (one attempt), with the SDK's errors; the response and its completion."""
        body = {key: value for key, value in payload.items() if key != EXTRA_BODY}
        body.update(payload.get(EXTRA_BODY) or {})  # as the SDK merges ``extra_body``: over the parameters
        content = openapi_dumps(body)
        request: httpx.Request | None = None
        try:
            if wire.direct is not None:
                response = await wire.direct.post_read(
                    wire.url, content, wire.headers, wire.budget, follow_redirects=wire.http.follow_redirects
                )
            else:
                request = wire.http.build_request(
                    "POST", wire.url, content=content, headers=wire.headers, timeout=wire.budget
                )
                response = await wire.http.send(request)
        except httpx.TimeoutException as exc:
            raise openai.APITimeoutError(request=request or self._request_of(wire, content)) from exc
        except httpx.TransportError as exc:
            raise openai.APIConnectionError(request=request or self._request_of(wire, content)) from exc
        if response.is_error:
            response.request = request or self._request_of(wire, content)  # the SDK's error reads it
            raise self.root_async_client._make_status_error_from_response(response) from None
        return response, _completion_of(response)

    @staticmethod
    def _request_of(wire: _Wire, content: bytes) -> httpx.Request:
        """The request a direct POST sent, as an ``httpx.Request``: made only for an error that reports it."""
        return httpx.Request("POST", wire.url, headers=wire.headers, content=content)

    def _get_request_payload(
        self,
        input_: LanguageModelInput,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """``ChatOpenAI``'s payload, with a Chat Completions call's :data:`PLAIN_JSON` parameters in ``extra_body``.

        ``messages`` stays as an empty list (the SDK requires the argument); the merge puts the real
        list in its place. A caller's own ``extra_body`` is kept beside them and, as with ``ChatOpenAI``
        (the SDK merges it over the parameters), wins where both name a key. Responses API payloads (``input``, no
        ``messages``) are unchanged.
        """
        return self._through_extra_body(super()._get_request_payload(input_, stop=stop, **kwargs))

    @staticmethod
    def _through_extra_body(payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` with its :data:`PLAIN_JSON` parameters in ``extra_body`` (see ``_get_request_payload``)."""
        if "messages" not in payload:
            return payload
        plain = {key: payload.pop(key) for key in PLAIN_JSON.intersection(payload)}
        payload[EXTRA_BODY] = {**plain, **(payload.get(EXTRA_BODY) or {})}
        payload["messages"] = []
        return payload

    async def agenerate(
        self,
        messages: list[list[BaseMessage]],
        stop: list[str] | None = None,
        callbacks: Callbacks = None,
        *,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        run_name: str | None = None,
        run_id: uuid.UUID | None = None,
        **kwargs: Any,
    ) -> LLMResult:
        """``BaseChatModel.agenerate``; one generation that no callback handler hears runs in place, untracked."""
        unheard = (
            len(messages) == 1
            and run_id is None
            and not self.streaming
            and not kwargs.get("stream")
            and not AsyncCallbackManager.configure(callbacks, self.callbacks, self.verbose).handlers
        )
        if not unheard:
            return await super().agenerate(
                messages, stop, callbacks, tags=tags, metadata=metadata, run_name=run_name, run_id=run_id, **kwargs
            )
        # What ``agenerate`` takes out of the keyword arguments for its tracing before generating.
        kwargs.pop("ls_structured_output_format", None)
        kwargs.pop("structured_output_format", None)
        result = await self._generate_unheard(_normalize_messages(messages[0]), stop, **kwargs)
        return LLMResult(generations=[result.generations], llm_output=self._combine_llm_outputs([result.llm_output]))

    async def _generate_unheard(self, messages: list[BaseMessage], stop: list[str] | None, **kwargs: Any) -> ChatResult:
        """``_agenerate_with_cache`` for a call no handler hears (so not streamed: see ``agenerate``).

        Without a model cache or a rate limiter, what that method does around ``_agenerate`` is one decision
        and one rewrite, done here: it would call ``_agenerate`` (its streaming branches need a handler, or
        ``stream``/``streaming``, which ``agenerate`` sends to LangChain's own path) and fold each generation's
        info and the call's ``llm_output`` into the message's ``response_metadata``. It decides whether to pass
        ``run_manager`` by ``inspect.signature`` of ``_agenerate`` on every call: ~30 µs of CPU, a tenth of
        LangChain's share of a model call (issue 17). With a cache, a rate limiter or the ``v1`` output version
        the call is LangChain's own."""
        if not (
            _FOLD is not None
            and (self.cache is False or (self.cache is None and get_llm_cache() is None))
            and self.rate_limiter is None
            and self.output_version != "v1"
        ):
            return await self._agenerate_with_cache(messages, stop=stop, **kwargs)
        result = await self._agenerate(messages, stop=stop, **kwargs)
        for generation in result.generations:
            generation.message.response_metadata = _FOLD(generation)
        if len(result.generations) == 1 and result.llm_output is not None:
            message = result.generations[0].message
            message.response_metadata = {**result.llm_output, **message.response_metadata}
        return result

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """langchain_openai's Chat Completions ``_agenerate``, with ``_create_chat_result`` called in place."""
        payload = super()._get_request_payload(messages, stop=stop, **kwargs)
        if "response_format" not in payload and self._use_responses_api(payload):
            return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        wire = self._plain_wire() if payload.get("stream") is False and DIRECT_KEYS.issuperset(payload) else None
        if wire is None:
            payload = self._through_extra_body(payload)
        generation_info: dict[str, Any] = {}
        raw_response: Any = None
        try:
            response: dict[str, Any] | openai.BaseModel | str | None
            if wire is not None:
                raw_response, response = await self._post_plain(wire, payload)
            elif "response_format" in payload:
                payload.pop("stream")
                raw_response = await self.root_async_client.chat.completions.with_raw_response.parse(**payload)
                response = raw_response.parse()  # the ``parsed`` field is the SDK's work
            else:
                raw_response = await self.async_client.with_raw_response.create(**payload)
                response = _json_body(raw_response.http_response) or raw_response.parse()
        except openai.BadRequestError as e:
            _handle_openai_bad_request(e)
            raise  # not reached: the handler always raises (mypy cannot see it)
        except openai.APIError as e:
            _handle_openai_api_error(e)
            raise
        except Exception as e:
            # As langchain_openai does: a failure after the response arrived carries the HTTP response.
            if isinstance(raw_response, httpx.Response):
                e.response = raw_response  # type: ignore[attr-defined]
            elif raw_response is not None and hasattr(raw_response, "http_response"):
                e.response = raw_response.http_response  # type: ignore[attr-defined]
            raise
        if self.include_response_headers and hasattr(raw_response, "headers"):
            generation_info = {"headers": dict(raw_response.headers)}
        _add_gateway_metadata(generation_info, raw_response)
        # A text body (not JSON) is passed on as the SDK's ``parse`` passes it: langchain refuses it with its own error.
        return self._create_chat_result(response, generation_info)  # type: ignore[arg-type]
