"""The LLM adapter: every model call of every pipeline goes through :class:`LLMClient`.

It wraps a LangChain chat model, so production uses ``ChatOpenAI`` against any OpenAI-compatible
endpoint and tests inject a scripted model the way httpx injects ``transport=``. Here usage and
cost are recorded per call and upstream errors become :mod:`gateway.errors` provider errors.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, ValidationError

from gateway.errors import MalformedOutputError, ProviderError, ProviderTimeoutError, ProviderUnavailableError
from gateway.observability.recorder import Telemetry
from gateway.providers.token_stream import call_model
from gateway.settings import LLMEndpointSettings, LLMSettings, ModelPrice
from pipelines.shared.deps import ChatReply, LLMCall, SchemaT

PROVIDER = "llm"


def build_chat_model(llm: LLMSettings, endpoint: LLMEndpointSettings) -> ChatOpenAI:
    """One ``ChatOpenAI`` for the process; only ``base_url``/model differ between local and prod."""
    return ChatOpenAI(
        model=llm.model,
        base_url=endpoint.base_url,
        api_key=endpoint.api_key,
        timeout=endpoint.timeout_s,
        max_retries=endpoint.max_retries,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        # Streamed answers (the chat endpoint) report token usage too, so budgets count them.
        stream_usage=True,
    )


def _json_schema_format(schema: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema(), "strict": True},
    }


class LLMClient:
    """Usage-accounting, error-translating front of a chat model."""

    def __init__(
        self, model: BaseChatModel, *, model_name: str, price: ModelPrice, telemetry: Telemetry | None = None
    ) -> None:
        self._model = model
        self.model_name = model_name
        self._price = price
        self._telemetry = telemetry or Telemetry(None, None)

    async def chat(self, messages: list[BaseMessage], *, node: str, max_tokens: int | None = None) -> ChatReply:
        runnable: Any = self._model.bind(max_tokens=max_tokens) if max_tokens else self._model
        text, call = await self._invoke(runnable, messages, node, max_tokens)
        return ChatReply(text=text, call=call)

    async def structured(
        self, messages: list[BaseMessage], schema: type[SchemaT], *, node: str
    ) -> tuple[SchemaT, LLMCall]:
        """JSON-schema constrained output, parsed and validated by pydantic.

        ``response_format`` rather than tool calling, because llama.cpp enforces a JSON schema with
        a grammar and small models follow a grammar far more reliably than a tool protocol.
        """
        runnable = self._model.bind(response_format=_json_schema_format(schema))
        text, call = await self._invoke(runnable, messages, node)
        try:
            return schema.model_validate_json(_strip_fences(text)), call
        except (ValidationError, json.JSONDecodeError) as exc:
            raise self._malformed(node, f"model returned output that does not match {schema.__name__}", call) from exc

    def _malformed(self, node: str, detail: str, call: LLMCall) -> MalformedOutputError:
        """The model answered, but not in the requested structure: the pipeline may degrade that one judgement,
        and the call it still paid for travels with the error."""
        self._telemetry.llm_failed(node, self.model_name, "malformed_output")
        error = MalformedOutputError(detail, provider=PROVIDER, node=node)
        error.call = call
        return error

    async def _invoke(
        self, runnable: Any, messages: list[BaseMessage], node: str, max_tokens: int | None = None
    ) -> tuple[str, LLMCall]:
        """The reply's text (read once, for the caller and the span) and its accounting."""
        with self._telemetry.llm_call(node, self.model_name, messages, max_tokens) as span:
            message, call = await self._call(runnable, messages, node)
            text = _text_of(message)
            span.done(call, text)
        self._telemetry.llm_usage(call)
        return text, call

    async def _call(self, runnable: Any, messages: list[BaseMessage], node: str) -> tuple[AIMessage, LLMCall]:
        started = time.perf_counter()
        try:
            message = await call_model(runnable, messages, node)
        except (openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError) as exc:
            # The structured reply was cut off (max_tokens) or filtered: malformed output, not a failed request.
            call = self._account(node, _completion_usage(exc), time.perf_counter() - started)
            self._telemetry.llm_usage(call)  # spent like any other call's (_invoke never gets to count it)
            detail = f"model output cut short in node {node} ({exc.__class__.__name__})"
            raise self._malformed(node, detail, call) from exc
        except openai.APITimeoutError as exc:
            raise ProviderTimeoutError(f"LLM call timed out in node {node}", provider=PROVIDER) from exc
        except openai.APIConnectionError as exc:
            raise ProviderUnavailableError(
                f"cannot reach the LLM endpoint ({exc.__class__.__name__})", provider=PROVIDER
            ) from exc
        except openai.APIStatusError as exc:
            raise ProviderError(
                f"LLM endpoint answered HTTP {exc.status_code} in node {node}",
                provider=PROVIDER,
                upstream_status=exc.status_code,
            ) from exc
        except httpx.HTTPError as exc:
            raise ProviderUnavailableError(f"LLM transport error: {exc}", provider=PROVIDER) from exc
        usage = getattr(message, "usage_metadata", None) or {}
        tokens = (int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)))
        return message, self._account(node, tokens, time.perf_counter() - started)

    def _account(self, node: str, tokens: tuple[int, int], duration: float) -> LLMCall:
        input_tokens, output_tokens = tokens
        cost = (input_tokens * self._price.input + output_tokens * self._price.output) / 1_000_000
        return LLMCall(
            node=node,
            model=self.model_name,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            duration_s=duration,
            cost_usd=cost,
        )


def _completion_usage(exc: openai.LengthFinishReasonError | openai.ContentFilterFinishReasonError) -> tuple[int, int]:
    """Tokens spent by a call the OpenAI client refused to parse (they are still billed)."""
    completion = getattr(exc, "completion", None)
    usage = getattr(completion, "usage", None)
    if usage is None:
        return 0, 0
    return int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)


async def ping_llm(http: httpx.AsyncClient, endpoint: LLMEndpointSettings, timeout_s: float) -> None:
    """Readiness: the OpenAI-compatible ``/models`` endpoint answers (within the probe's ``timeout_s``)."""
    url = endpoint.base_url.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {endpoint.api_key.get_secret_value()}"}
    try:
        response = await http.get(url, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise ProviderUnavailableError(f"LLM endpoint {url} unreachable: {exc!r}", provider=PROVIDER) from exc
    if response.status_code >= 400:
        raise ProviderUnavailableError(f"LLM endpoint {url} answered HTTP {response.status_code}", provider=PROVIDER)


def _text_of(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content.strip()
    parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
    return "".join(parts).strip()


def _strip_fences(text: str) -> str:
    """Endpoints without grammar support sometimes wrap JSON in Markdown fences."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.strip("`")
        if stripped.startswith("json"):
            stripped = stripped[4:]
    return stripped.strip()
