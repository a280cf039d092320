"""``/v1/chat/completions`` on top of :class:`QueryService`: validate, rewrite a follow-up, answer.

The chat API adds no second request path: the last user turn (made self-contained by
:mod:`pipelines.shared.followup` when earlier turns exist) becomes a :class:`QueryRequest`
for the tenant of the caller's key and goes through the same caches, router and route table as
``/v1/query``, so its metrics, spans and cache hits are the native endpoint's.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from gateway.access.keys import Principal
from gateway.access.limits import RateLimiter
from gateway.chat.wire import (
    MODELS,
    AssistantMessage,
    ChatCompletion,
    ChatCompletionRequest,
    Choice,
    CompletionUsage,
    GatewayInfo,
    message_text,
)
from gateway.errors import ClientError, NotFoundError
from gateway.providers.llm import LLMClient
from gateway.schemas import QueryRequest, QueryResponse
from gateway.service import QueryService
from gateway.settings import Settings
from gateway.steps import RewriteFollowup, StepEvent, render_steps
from pipelines.shared.followup import Rewrite, Turn, rewrite_followup


@dataclass(frozen=True, slots=True)
class ChatLimits:
    max_messages: int
    max_message_chars: int
    max_tokens: int
    rewrite_followups: bool
    history_messages: int
    max_query_chars: int

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatLimits:
        return cls(
            max_messages=settings.chat_max_messages,
            max_message_chars=settings.chat_max_message_chars,
            max_tokens=settings.chat_max_tokens,
            rewrite_followups=settings.chat_rewrite_followups,
            history_messages=settings.chat_history_messages,
            max_query_chars=settings.max_query_chars,
        )


@dataclass(frozen=True, slots=True)
class PreparedChat:
    """A validated request: what to route, for whom, and the turns before it."""

    id: str
    created: int
    model: str
    query: QueryRequest
    history: list[Turn]
    include_usage: bool


@dataclass(frozen=True, slots=True)
class ChatAnswer:
    response: QueryResponse
    rewrite: Rewrite | None

    @property
    def prompt_tokens(self) -> int:
        return self.response.usage.input_tokens + (self.rewrite.call.input_tokens if self.rewrite else 0)

    @property
    def completion_tokens(self) -> int:
        return self.response.usage.output_tokens + (self.rewrite.call.output_tokens if self.rewrite else 0)

    def usage(self) -> CompletionUsage:
        return CompletionUsage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            total_tokens=self.prompt_tokens + self.completion_tokens,
        )

    def gateway_info(self, prepared: PreparedChat) -> GatewayInfo:
        response, rewrite = self.response, self.rewrite
        rewritten = [RewriteFollowup(changed=rewrite.changed)] if rewrite else []
        events: list[StepEvent] = [*rewritten, *response.events]
        cost = response.usage.cost_usd + (rewrite.call.cost_usd if rewrite else 0.0)
        return GatewayInfo(
            route=response.route,
            route_confidence=response.route_confidence,
            classifier=response.classifier,
            sources=response.sources,
            cached=response.cached,
            abstained=response.abstained,
            cost_usd=round(cost, 8),
            llm_calls=response.usage.llm_calls + (1 if rewrite else 0),
            latency_ms=response.latency_ms,
            steps=render_steps(events),
            query=rewrite.query if rewrite else prepared.query.query,
            tenant=prepared.query.tenant,
            trace_id=response.trace_id,
            events=events,
        )


class ChatService:
    def __init__(self, queries: QueryService, llm: LLMClient, limiter: RateLimiter | None, limits: ChatLimits) -> None:
        self._queries = queries
        self._llm = llm
        self._limiter = limiter
        self.limits = limits

    def prepare(self, request: ChatCompletionRequest, principal: Principal) -> PreparedChat:
        """Every request limit, each a 4xx naming the field to fix."""
        route = MODELS.get(request.model)
        if route is None:
            raise NotFoundError(
                f"The model {request.model!r} does not exist. Use one of: {', '.join(MODELS)} (GET /v1/models).",
                field="model",
                code="model_not_found",
            )
        limits = self.limits
        if len(request.messages) > limits.max_messages:
            raise ClientError(
                f"{len(request.messages)} messages in one request; the maximum is {limits.max_messages}. "
                "Send only the recent turns.",
                field="messages",
            )
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
            if chars > limits.max_message_chars:
                raise ClientError(
                    f"messages[{index}] has {chars} characters; the maximum is {limits.max_message_chars}.",
                    field=f"messages[{index}].content",
                )
        requested_tokens = request.max_completion_tokens or request.max_tokens
        if requested_tokens is not None and requested_tokens > limits.max_tokens:
            field = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
            raise ClientError(f"{field} is {requested_tokens}; the maximum is {limits.max_tokens}.", field=field)
        # The question is the last user message; anything after it (an assistant prefill, a tool
        # result) has nothing to route and is ignored, and the turns before it are the history.
        last = next((i for i in range(len(request.messages) - 1, -1, -1) if request.messages[i].role == "user"), None)
        question = texts[last].strip() if last is not None else ""
        if last is None or not question:
            raise ClientError(
                "No question: the last user message must have text; it is what the gateway answers.",
                field="messages",
            )
        if len(question) > limits.max_query_chars:
            # Checked here too (QueryService checks again) so a stream never starts for a request that must fail.
            raise ClientError(
                f"The question (the last user message) has {len(question)} characters; the maximum is "
                f"{limits.max_query_chars}. Shorten it or raise GATEWAY_MAX_QUERY_CHARS.",
                field=f"messages[{last}].content",
            )
        history = [
            Turn(role=m.role, text=text)
            for m, text in zip(request.messages[:last], texts, strict=False)
            if m.role in ("user", "assistant") and text.strip()
        ][-limits.history_messages :]
        tenant = principal.tenant_for(request.tenant or "default")
        return PreparedChat(
            id=f"chatcmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=request.model,
            query=QueryRequest(query=question, tenant=tenant, route=route),
            history=history if limits.rewrite_followups else [],
            include_usage=bool(request.stream_options and request.stream_options.include_usage),
        )

    async def answer(self, prepared: PreparedChat, principal: Principal) -> ChatAnswer:
        rewrite = None
        query = prepared.query
        if prepared.history:
            rewrite = await rewrite_followup(self._llm, prepared.history, query.query)
            query = QueryRequest(query=rewrite.query, tenant=query.tenant, route=query.route)
        response = await self._queries.answer(query)
        answer = ChatAnswer(response, rewrite)
        if self._limiter is not None:
            await self._limiter.charge(principal, answer.prompt_tokens + answer.completion_tokens)
        return answer

    def completion(self, prepared: PreparedChat, answer: ChatAnswer) -> ChatCompletion:
        return ChatCompletion(
            id=prepared.id,
            created=prepared.created,
            model=prepared.model,
            choices=[Choice(index=0, message=AssistantMessage(content=answer.response.answer), finish_reason="stop")],
            usage=answer.usage(),
            gateway=answer.gateway_info(prepared),
        )
