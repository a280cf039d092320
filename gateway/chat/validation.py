"""A chat request's limits, each a 4xx naming the field to fix, checked before any answer (or stream) starts."""

from __future__ import annotations

import time
import uuid

from gateway.access import Principal
from gateway.chat.schemas import MODELS, ChatCompletionRequest, message_text
from gateway.chat.service import PreparedChat
from gateway.errors import ClientError, NotFoundError
from gateway.query import QueryRequest, clean_query
from gateway.settings import ChatSettings, RequestLimits
from pipelines.shared import Turn


def prepare_chat(
    request: ChatCompletionRequest, principal: Principal, chat: ChatSettings, limits: RequestLimits
) -> PreparedChat:
    """Every chat request limit, each a 4xx naming the field to fix; then the question, its history and
    the caller's tenant. Before any answer starts, so a stream never starts for a request that must fail."""
    route = MODELS.get(request.model)
    if route is None:
        raise NotFoundError(
            f"The model {request.model!r} does not exist. Use one of: {', '.join(MODELS)} (GET /v1/models).",
            field="model",
            code="model_not_found",
        )
    if len(request.messages) > chat.max_messages:
        raise ClientError(
            f"{len(request.messages)} messages in one request; the maximum is {chat.max_messages}. "
            "Send only the recent turns.",
            field="messages",
        )
    texts = _message_texts(request, chat)
    requested_tokens = request.max_completion_tokens or request.max_tokens
    if requested_tokens is not None and requested_tokens > chat.max_tokens:
        field = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        raise ClientError(f"{field} is {requested_tokens}; the maximum is {chat.max_tokens}.", field=field)
    # The question is the last user message; anything after it (an assistant prefill, a tool
    # result) has nothing to route and is ignored, and the turns before it are the history.
    last = next((i for i in range(len(request.messages) - 1, -1, -1) if request.messages[i].role == "user"), None)
    if last is None or not texts[last].strip():
        raise ClientError(
            "No question: the last user message must have text; it is what the gateway answers.",
            field="messages",
        )
    question = clean_query(
        texts[last], limits, field=f"messages[{last}].content", what="The question (the last user message)"
    )
    history = [
        Turn(role=m.role, text=text)
        for m, text in zip(request.messages[:last], texts, strict=False)
        if m.role in ("user", "assistant") and text.strip()
    ][-chat.history_messages :]
    system = [t.strip() for m, t in zip(request.messages, texts, strict=True) if m.role in ("system", "developer")]
    return PreparedChat(
        id=f"chatcmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=request.model,
        query=QueryRequest(query=question, tenant=principal.tenant_for(request.tenant or "default"), route=route),
        history=history if chat.rewrite_followups else [],
        include_usage=bool(request.stream_options and request.stream_options.include_usage),
        instructions="\n\n".join(text for text in system if text),
    )


def _message_texts(request: ChatCompletionRequest, chat: ChatSettings) -> list[str]:
    """Each message's text: text parts only, each message within ``GATEWAY_CHAT_MAX_MESSAGE_CHARS``."""
    texts: list[str] = []
    for index, message in enumerate(request.messages):
        if isinstance(message.content, list):
            kinds = sorted({p.type for p in message.content if p.type != "text"})
            if kinds:
                raise ClientError(
                    f"messages[{index}] has content parts of type {', '.join(kinds)}; only text is supported.",
                    field=f"messages[{index}].content",
                )
        texts.append(message_text(message))
        chars = len(texts[-1])
        if chars > chat.max_message_chars:
            raise ClientError(
                f"messages[{index}] has {chars} characters; the maximum is {chat.max_message_chars}.",
                field=f"messages[{index}].content",
            )
    return texts
