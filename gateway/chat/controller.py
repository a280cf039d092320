"""``POST /v1/chat/completions`` and ``GET /v1/models``: the OpenAI-compatible face of the gateway."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Annotated

from litestar import Controller, Response, get, post
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import Example, OpenAPIMediaType, OpenAPIResponse, OpenAPIType, Operation, Schema
from litestar.params import Body, PathParameter
from litestar.response import Stream

from gateway.access import BEARER, Access, Principal, Reader, for_openai_user, require
from gateway.chat.errors import handle_openai_exception
from gateway.chat.schemas import MODELS, ChatCompletion, ChatCompletionRequest, ModelCard, ModelList, OpenAIErrorBody
from gateway.chat.service import ChatAnswer, ChatService
from gateway.chat.sse import stream_chat
from gateway.chat.validation import prepare_chat
from gateway.errors import NotFoundError
from gateway.profiles import WARNING_HEADER, client_instructions
from gateway.settings import Settings
from pipelines.shared import TextSink

STARTED = int(time.time())
CHAT_EXAMPLES = [
    Example(
        summary="A follow-up question, answered on the route the router picks",
        value={
            "model": "gateway-auto",
            "messages": [
                {"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", "content": "Paris."},
                {"role": "user", "content": "And what about its population?"},
            ],
        },
    ),
    Example(
        summary="Streaming, with usage in the last chunk",
        value={
            "model": "gateway-direct",
            "messages": [{"role": "user", "content": "Say hello"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
]


def _sse_event_schema() -> Schema:
    """One server-sent event (OpenAPI 3.1 reads a stream's schema per event): its ``data`` is a
    ``chat.completion.chunk``, an OpenAI error object (a failure mid-stream, then the stream ends),
    or the final ``[DONE]``."""
    string, obj, array = OpenAPIType.STRING, OpenAPIType.OBJECT, OpenAPIType.ARRAY
    chunk = Schema(
        type=obj,
        required=["id", "object", "created", "model", "choices"],
        properties={
            "id": Schema(type=string),
            "object": Schema(const="chat.completion.chunk"),
            "created": Schema(type=OpenAPIType.INTEGER),
            "model": Schema(type=string),
            "choices": Schema(type=array, items=Schema(type=obj, required=["index", "delta"])),
            "usage": Schema(type=obj),
            "gateway": Schema(type=obj),
        },
    )
    error = Schema(
        type=obj,
        required=["error"],
        properties={"error": Schema(type=obj, required=["message", "type"])},
    )
    data = Schema(
        type=string,
        any_of=[
            Schema(const="[DONE]"),
            Schema(content_media_type="application/json", content_schema=Schema(one_of=[chunk, error])),
        ],
    )
    return Schema(type=obj, required=["data"], properties={"data": data})


@dataclass
class ChatOperation(Operation):
    """The chat operation's 200 is JSON or, with ``stream: true``, an event stream: document both."""

    def __post_init__(self) -> None:
        ok = (self.responses or {}).get("200")
        if isinstance(ok, OpenAPIResponse) and ok.content is not None:
            ok.content["text/event-stream"] = OpenAPIMediaType(schema=_sse_event_schema())


def _errors(*statuses: int) -> dict[int, ResponseSpec]:
    descriptions = {
        400: "Invalid request (validation, malformed JSON, request limits)",
        401: "Missing or invalid API key, or a bad, expired or unverifiable end-user token",
        403: "The key lacks the scope, names an end user it may not, or names another tenant",
        404: "Unknown model",
        413: "Request body larger than GATEWAY_MAX_BODY_BYTES",
        422: "Refused by the tenant's guardrails: personal data (categories named, never values) or injections",
        429: "Rate limit or daily token budget exceeded; see Retry-After",
        502: "Upstream provider failed",
        503: "Upstream provider (or the rate limiter, when failing closed) unavailable",
        504: "Upstream provider timed out",
    }
    return {s: ResponseSpec(OpenAIErrorBody, description=descriptions[s], generate_examples=False) for s in statuses}


class ChatController(Controller):
    path = "/v1"
    tags = ["openai"]
    before_request = require("query")
    security = [{BEARER: []}]
    exception_handlers = {Exception: handle_openai_exception}

    @post(
        "/chat/completions",
        status_code=200,
        summary="OpenAI-compatible chat completion; stream=true answers with server-sent events",
        responses=_errors(400, 401, 403, 404, 413, 422, 429, 502, 503, 504),
        operation_class=ChatOperation,
    )
    async def chat_completions(
        self,
        data: Annotated[ChatCompletionRequest, Body(examples=CHAT_EXAMPLES)],
        chat_service: NamedDependency[ChatService],
        settings: NamedDependency[Settings],
        principal: NamedDependency[Principal],
        access: NamedDependency[Access],
        reader: NamedDependency[Reader],
    ) -> Response[ChatCompletion]:
        reader = for_openai_user(reader, data.user, principal)
        prepared = prepare_chat(data, principal, settings.chat, settings.limits)
        # System messages: the tenant's assistant profile takes them as instructions, or they are ignored aloud.
        profile = await chat_service.profile(prepared.query.tenant)
        instructions, warning = client_instructions(
            profile, prepared.instructions, settings.profiles.max_instructions_chars
        )
        prepared = dataclasses.replace(prepared, instructions=instructions)
        warned = {WARNING_HEADER: warning} if warning else {}

        async def answer_and_charge(live: TextSink | None = None) -> ChatAnswer:
            """Charged here, as /v1/query is: once the answer is final, before its last chunk is sent."""
            answer = await chat_service.answer(prepared, live, reader=reader)
            await access.limiter.charge(principal, answer.total_tokens)
            return answer

        if data.stream:
            # A Response subclass: the annotation keeps the JSON schema, ChatOperation adds the stream.
            return Stream(  # type: ignore[return-value]
                stream_chat(answer_and_charge, prepared),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **warned},
            )
        return Response(chat_service.completion(prepared, await answer_and_charge()), headers=warned)

    @get("/models", summary="The gateway's models: one per route", responses=_errors(401, 429))
    async def models(self) -> ModelList:
        return ModelList(data=[ModelCard(id=name, created=STARTED, owned_by="rag-gateway") for name in MODELS])

    @get("/models/{model_id:str}", summary="One model", responses=_errors(400, 401, 404, 429))
    async def model(self, model_id: Annotated[str, PathParameter(max_length=256)]) -> ModelCard:
        if model_id not in MODELS:
            raise NotFoundError(f"The model {model_id!r} does not exist.", field="model", code="model_not_found")
        return ModelCard(id=model_id, created=STARTED, owned_by="rag-gateway")
