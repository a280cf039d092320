"""``/v1/chat/completions`` on top of :class:`QueryService`: rewrite a follow-up, answer, shape the reply.

The chat API adds no second request path: the last user turn (made self-contained by
:mod:`pipelines.shared.followup` when earlier turns exist) becomes a :class:`QueryRequest`
for the tenant of the caller's key and goes through the same caches, router and route table as
``/v1/query``, so its metrics, spans and cache hits are the native endpoint's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import msgspec

from gateway.access import Reader
from gateway.chat.schemas import AssistantMessage, ChatCompletion, Choice, CompletionUsage, GatewayInfo
from gateway.guardrails import Vault
from gateway.profiles import AssistantProfile
from gateway.providers import LLMClient
from gateway.query import QueryRequest, QueryResponse, QueryService, RewriteFollowup, StepEvent, render_steps
from pipelines.shared import AnswerText, FollowupRewrite, TextSink, Turn, rewrite_followup


@dataclass(frozen=True, slots=True)
class PreparedChat:
    """A validated request: what to route, for whom, and the turns before it."""

    id: str
    created: int
    model: str
    query: QueryRequest
    history: list[Turn]
    include_usage: bool
    # The client's system (and developer) messages; used only when the tenant's assistant profile allows them.
    instructions: str = ""


@dataclass(frozen=True, slots=True)
class ChatAnswer:
    response: QueryResponse
    rewrite: FollowupRewrite | None

    @property
    def prompt_tokens(self) -> int:
        return self.response.usage.input_tokens + (self.rewrite.call.input_tokens if self.rewrite else 0)

    @property
    def completion_tokens(self) -> int:
        return self.response.usage.output_tokens + (self.rewrite.call.output_tokens if self.rewrite else 0)

    @property
    def total_tokens(self) -> int:
        """What the caller's daily token budget is charged: the follow-up rewrite included."""
        return self.prompt_tokens + self.completion_tokens

    def usage(self) -> CompletionUsage:
        return CompletionUsage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            total_tokens=self.total_tokens,
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
            response_id=response.response_id,
        )


class ChatService:
    """Answers a prepared (validated) chat request; the API handler validates before and charges after."""

    def __init__(self, queries: QueryService, llm: LLMClient) -> None:
        self._queries = queries
        self._llm = llm

    async def profile(self, tenant: str) -> AssistantProfile:
        """The tenant's assistant profile: the handler decides on the client's system messages with it."""
        return await self._queries.profile(tenant)

    async def answer(self, prepared: PreparedChat, live: TextSink | None = None, *, reader: Reader) -> ChatAnswer:
        """Every turn, and the client's system message when the profile takes it, is screened with one vault
        (an address is one placeholder in all of them) before the follow-up rewrite, the first upstream call.
        ``live``: a streamed request's sink for the answer's text as the route clears it, with the placeholders
        restored as it streams. ``reader``: who asks (every retrieval and the answer caches are theirs)."""
        query, vault = prepared.query, Vault()
        turns = [*(t.text for t in prepared.history), query.query]
        extra = [prepared.instructions] if prepared.instructions else []
        texts = self._queries.screen(query.tenant, [*turns, *extra], vault)
        instructions = texts[len(turns)] if extra else ""
        texts = texts[: len(turns)]
        history = [replace(turn, text=text) for turn, text in zip(prepared.history, texts, strict=False)]
        query = msgspec.structs.replace(query, query=texts[-1])
        restoring = _Restoring(live, vault) if live is not None else None
        rewrite = None
        if history:
            rewrite = await rewrite_followup(self._llm, history, query.query)
            query = msgspec.structs.replace(query, query=rewrite.query)
            rewrite = replace(rewrite, query=vault.restore(rewrite.query))
        answer = await self._queries.answer(
            query, vault=vault, instructions=instructions, writer=restoring, reader=reader
        )
        if restoring is not None:
            restoring.flush()
        return ChatAnswer(answer, rewrite)

    def completion(self, prepared: PreparedChat, answer: ChatAnswer) -> ChatCompletion:
        return ChatCompletion(
            id=prepared.id,
            created=prepared.created,
            model=prepared.model,
            choices=[Choice(index=0, message=AssistantMessage(content=answer.response.answer), finish_reason="stop")],
            usage=answer.usage(),
            gateway=answer.gateway_info(prepared),
        )


class _Restoring:
    """The route's live answer text on its way to the client: the guardrails' placeholders back to their values. A
    placeholder cut between two pieces is held until the next one (or :meth:`flush`) completes it."""

    def __init__(self, sink: TextSink, vault: Vault) -> None:
        self._sink = sink
        self._restorer = vault.streaming() if vault else None

    def __call__(self, item: object) -> None:
        if not isinstance(item, AnswerText):
            return
        text = self._restorer.feed(item.text) if self._restorer is not None else item.text
        if text:
            self._sink(text)

    def flush(self) -> None:
        tail = self._restorer.flush() if self._restorer is not None else ""
        if tail:
            self._sink(tail)
