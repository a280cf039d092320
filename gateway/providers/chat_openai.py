"""``ChatOpenAI`` with three per-call costs of the Chat Completions path taken out (issue 17).

Every model call of the gateway goes through ``ChatOpenAI``; on a ``direct`` miss that call is most of
the gateway's own CPU. Three of its costs buy this gateway nothing, and :class:`GatewayChatOpenAI` (still a
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
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI
from langchain_openai.chat_models.base import (
    _add_gateway_metadata,
    _handle_openai_api_error,
    _handle_openai_bad_request,
)

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


def _json_body(http: httpx.Response) -> dict[str, Any] | None:
    """The completion as a dict when the upstream says it is JSON (as the SDK reads its content type); else None."""
    content_type, *_ = http.headers.get("content-type", "*").split(";")
    if not content_type.endswith("json"):
        return None
    body = http.json()
    return body if isinstance(body, dict) else None


class GatewayChatOpenAI(ChatOpenAI):
    """A ``ChatOpenAI`` whose Chat Completions calls skip the result's thread hop and the messages' transform."""

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
        payload: dict[str, Any] = super()._get_request_payload(input_, stop=stop, **kwargs)
        if "messages" not in payload:
            return payload
        plain = {key: payload.pop(key) for key in PLAIN_JSON.intersection(payload)}
        payload[EXTRA_BODY] = {**plain, **(payload.get(EXTRA_BODY) or {})}
        payload["messages"] = []
        return payload

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """langchain_openai's Chat Completions ``_agenerate``, with ``_create_chat_result`` called in place."""
        payload = self._get_request_payload(messages, stop=stop, **kwargs)
        if "response_format" not in payload and self._use_responses_api(payload):
            return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        generation_info: dict[str, Any] = {}
        raw_response = None
        try:
            response: dict[str, Any] | openai.BaseModel | None
            if "response_format" in payload:
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
            if raw_response is not None and hasattr(raw_response, "http_response"):
                e.response = raw_response.http_response  # type: ignore[attr-defined]
            raise
        if self.include_response_headers and hasattr(raw_response, "headers"):
            generation_info = {"headers": dict(raw_response.headers)}
        _add_gateway_metadata(generation_info, raw_response)
        return self._create_chat_result(response, generation_info)
