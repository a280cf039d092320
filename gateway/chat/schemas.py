"""OpenAI chat-completions wire types (the subset a chatbot sends), plus the gateway's own extras.

Unknown request fields are ignored (msgspec's default), as the issue asks: clients written for
OpenAI send fields such as ``top_p`` or ``seed`` that mean nothing to a routed RAG pipeline.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from gateway.knowledge import Tenant
from gateway.query import Source, StepEvent

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]

# model name -> route; GET /v1/models lists these, anything else is "model_not_found".
MODELS: dict[str, Literal["auto", "direct", "single_hop", "multi_hop"]] = {
    "gateway-auto": "auto",
    "gateway-direct": "direct",
    "gateway-single-hop": "single_hop",
    "gateway-multi-hop": "multi_hop",
}


class ContentPart(msgspec.Struct, kw_only=True):
    type: str
    text: str | None = None


class ChatMessage(msgspec.Struct, kw_only=True):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None


class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool = False


class ChatCompletionRequest(msgspec.Struct, kw_only=True):
    model: Annotated[
        str,
        Meta(
            description="A route: gateway-auto, gateway-direct, gateway-single-hop or gateway-multi-hop "
            "(GET /v1/models); any other name is 404 model_not_found.",
            examples=list(MODELS),
            # Litestar copies "extra" into the OpenAPI schema; validation stays a plain string so an
            # unknown model is the OpenAI-style 404 model_not_found, not a type error.
            extra_json_schema={"extra": {"enum": list(MODELS)}},
        ),
    ]
    messages: Annotated[list[ChatMessage], Meta(min_length=1)]
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    max_tokens: Annotated[int, Meta(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Meta(ge=1)] | None = None
    n: Annotated[int, Meta(ge=1, le=1, description="Only one choice per request.")] | None = None
    user: str | None = None
    tenant: Annotated[
        Tenant | None, Meta(description="Gateway extension: with API keys configured, only the key's own tenant.")
    ] = None


class AssistantMessage(msgspec.Struct):
    content: str
    role: Literal["assistant"] = "assistant"
    refusal: str | None = None


class Choice(msgspec.Struct):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


class CompletionUsage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class GatewayInfo(msgspec.Struct):
    """What the gateway did: the route that answered, its evidence, cache and cost."""

    route: str
    route_confidence: float
    classifier: str
    sources: list[Source]
    cached: bool
    abstained: bool
    cost_usd: float
    llm_calls: int
    latency_ms: float
    steps: list[str]
    query: Annotated[str, Meta(description="The question that was routed: the follow-up rewrite when there was one.")]
    tenant: str
    trace_id: Annotated[str | None, Meta(description="The request's OpenTelemetry trace (also in X-Trace-Id).")] = None
    response_id: Annotated[str | None, Meta(description="The answer's id for POST /v1/feedback.")] = None
    events: Annotated[list[StepEvent], Meta(description="The steps taken, typed (``steps`` is their text).")] = []


class ChatCompletion(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage
    gateway: GatewayInfo
    object: Literal["chat.completion"] = "chat.completion"
    system_fingerprint: str | None = None


class ModelCard(msgspec.Struct):
    id: str
    created: int
    owned_by: str
    object: Literal["model"] = "model"


class ModelList(msgspec.Struct):
    data: list[ModelCard]
    object: Literal["list"] = "list"


class OpenAIErrorDetail(msgspec.Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorBody(msgspec.Struct):
    """The error body OpenAI clients parse (``openai.APIStatusError.body``)."""

    error: OpenAIErrorDetail


def message_text(message: ChatMessage) -> str:
    """The text of a message: a string, or the text parts of a content list."""
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    return "".join(part.text or "" for part in message.content if part.type == "text")
