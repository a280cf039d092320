"""``POST /v1/chat/completions`` and ``GET /v1/models``: the OpenAI-compatible face of the gateway."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Controller, Response, get, post
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import Example, OpenAPIMediaType, OpenAPIResponse, OpenAPIType, Operation, Schema
from litestar.params import Body, PathParameter
from litestar.response import Stream

from gateway.access.guard import BEARER, Access, provide_access, provide_principal, require
from gateway.access.keys import Principal
from gateway.api.early_vector import EARLY_VECTOR, EarlyVector
from gateway.api.validation import prepare_chat
from gateway.chat.completions import ChatAnswer, ChatService, PreparedChat
from gateway.chat.errors import handle_openai_exception
from gateway.chat.sse import stream_chat
from gateway.chat.wire import MODELS, ChatCompletion, ChatCompletionRequest, ModelCard, ModelList, OpenAIErrorBody
from gateway.errors import NotFoundError
from gateway.profiles.model import WARNING_HEADER, client_instructions
from gateway.query_vector import QueryVector
from gateway.settings import Settings
from gateway.state import Services

STARTED = int(time.time())
# The chat routes' key hook; gateway.api.early_vector mirrors its admission before Litestar routes a request.
CHAT_ACCESS = require("query")
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


@dataclass(frozen=True, slots=True)
class ChatScope:
    """What one chat completion needs, as one dependency.

    Litestar resolves a handler's independent dependencies as one task each in an anyio task group: five of them
    cost every chat request five tasks and a group (~3 % of a miss's CPU, issue 17). One provider reading the
    app's services and the request's principal is a plain call.
    """

    chat: ChatService
    settings: Settings
    principal: Principal
    access: Access
    # Begun before Litestar routed the request (gateway.api.early_vector), with the chat prepared for it.
    early: EarlyVector | None = None

    def prepare(self, data: ChatCompletionRequest) -> PreparedChat:
        """``data`` validated and prepared (``prepare_chat``), or the chat prepared for it as it arrived: the same
        function on the same request and principal, when the early layer parsed it as Litestar did."""
        early = self.early
        if early is not None and early.principal is self.principal and early.request == data:
            return early.prepared
        return prepare_chat(data, self.principal, self.settings.chat, self.settings.limits)

    async def begin_vector(self, prepared: PreparedChat) -> QueryVector | None:
        """The question's vector: the one begun as the request arrived, for this very chat, or begun now."""
        early = self.early
        if early is not None and early.prepared is prepared:
            return early.vector
        return await self.chat.begin_vector(prepared)


def provide_chat_scope(request: ASGIConnection[Any, Any, Any, Any]) -> ChatScope:
    services: Services = request.app.state.services
    early = request.state.get(EARLY_VECTOR)
    return ChatScope(
        chat=ChatService(services.query_service, services.llm),
        settings=services.settings,
        principal=provide_principal(request),
        access=provide_access(request),
        early=early if isinstance(early, EarlyVector) else None,
    )


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
        401: "Missing or invalid API key",
        403: "The key lacks the scope or names another tenant",
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
    before_request = CHAT_ACCESS
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
        chat_scope: NamedDependency[ChatScope],
    ) -> Response[ChatCompletion]:
        chat_service, settings, principal = chat_scope.chat, chat_scope.settings, chat_scope.principal
        prepared = chat_scope.prepare(data)
        # A first question's embedding was begun as the request arrived (gateway.api.early_vector), or starts now,
        # beside the profile's lookup (issue 17); a stream's starts when it is answered, once the response has begun.
        vector = None if data.stream else await chat_scope.begin_vector(prepared)
        try:
            # System messages: the tenant's assistant profile takes them as instructions, or they are ignored aloud.
            profile = await chat_service.profile(prepared.query.tenant)
            instructions, warning = client_instructions(
                profile, prepared.instructions, settings.profiles.max_instructions_chars
            )
        except BaseException:
            if vector is not None:
                vector.release()
            raise
        prepared = dataclasses.replace(prepared, instructions=instructions)
        warned = {WARNING_HEADER: warning} if warning else {}

        async def answer_and_charge() -> ChatAnswer:
            """Charged here, as /v1/query is: once the answer is final, before it is sent."""
            answer = await chat_service.answer(prepared, vector)
            await chat_scope.access.limiter.charge(principal, answer.total_tokens)
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
