"""LLM front router (structured output), selectable by settings to compare with the default."""

from __future__ import annotations

from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from pipelines.shared.deps import ChatClient, LLMCall
from routes.types import RouteDecision

SYSTEM = """You route questions sent to a company assistant that has a document knowledge base.
Choose exactly one route:
- "direct": no documents needed. Greetings, thanks, chit-chat, general world knowledge, arithmetic,
  translating / rewriting / summarising text given in the message, code help with the code given,
  questions about the assistant itself.
- "single_hop": one fact to look up in one document ("When was the VPN policy updated?").
- "multi_hop": two or more facts from different documents must be combined: bridge questions
  ("Where was the director of Inception born?"), comparisons ("Which is older, A or B?"),
  "both/same" questions, totals across documents.
Answer in JSON with route, confidence (0 to 1) and a short reason."""

EXAMPLES: list[tuple[str, str]] = [
    ("Thanks, that helped!", '{"route": "direct", "confidence": 0.97, "reason": "thanks, no lookup"}'),
    (
        "経費精算の締め日はいつですか",
        '{"route": "single_hop", "confidence": 0.9, "reason": "one policy fact"}',
    ),
    (
        "Which was founded first, the band that recorded Abbey Road or the label that signed Oasis?",
        '{"route": "multi_hop", "confidence": 0.92, "reason": "two entities compared"}',
    ),
]


class RouteChoice(BaseModel):
    route: Literal["direct", "single_hop", "multi_hop"]
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = Field(max_length=200)


def messages_for(query: str) -> list[BaseMessage]:
    messages: list[BaseMessage] = [SystemMessage(SYSTEM)]
    for question, answer in EXAMPLES:
        messages += [HumanMessage(f"Question: {question}"), AIMessage(answer)]
    messages.append(HumanMessage(f"Question: {query}"))
    return messages


class LLMRouter:
    name = "llm"

    def __init__(self, llm: ChatClient) -> None:
        self._llm = llm

    async def classify(self, query: str) -> tuple[RouteDecision, LLMCall]:
        choice, call = await self._llm.structured(messages_for(query), RouteChoice, node="route_query")
        decision = RouteDecision(
            route=choice.route, confidence=choice.confidence, reason=choice.reason, classifier=self.name
        )
        return decision, call
