"""LLM front router (structured output), selectable by settings to compare with the default.

It is shown the same probe signals the default router reads (how well the tenant's best document
and its top documents cover the question, how many documents hold its parts), so the two are
compared on the same evidence, not on what the model remembers about the question's topic.
"""

from __future__ import annotations

from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from pipelines.shared import ChatClient, LLMCall
from routes.probe import EMPTY_SIGNALS, Probe, ProbeSignals
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
Each question comes with what a search of the knowledge base found: the best passage's similarity,
the share of the question's terms the best document holds and the top documents hold together, and
how many documents cover its parts, and how many of the top documents the question names together by
their titles. Little similarity and coverage means the knowledge base holds nothing on it ("direct"); a
second document holding what the first lacks, or two documents named together, suggests "multi_hop".
Answer in JSON with route, confidence (0 to 1) and a short reason."""

_NOTHING = ProbeSignals(12, 12, 0.12, 0.03, 0.1, 0.0, 0.1, 0.1, 0.0, 0.0, 0.0, 0, 2, 0, 0.0)
_ONE_DOC = ProbeSignals(12, 6, 0.58, 0.2, 0.35, 0.8, 0.8, 0.0, 0.0, 1.0, 1.0, 1, 5, 0, 0.0)
_TWO_DOCS = ProbeSignals(12, 7, 0.49, 0.09, 0.46, 0.55, 0.9, 0.35, 0.35, 0.5, 1.0, 2, 11, 0, 0.35)
EXAMPLES: list[tuple[str, ProbeSignals, str]] = [
    ("Thanks, that helped!", _NOTHING, '{"route": "direct", "confidence": 0.97, "reason": "thanks, no lookup"}'),
    (
        "経費精算の締め日はいつですか",
        _ONE_DOC,
        '{"route": "single_hop", "confidence": 0.9, "reason": "one document covers the question"}',
    ),
    (
        "Which was founded first, the band that recorded Abbey Road or the label that signed Oasis?",
        _TWO_DOCS,
        '{"route": "multi_hop", "confidence": 0.92, "reason": "two entities, each in its own document"}',
    ),
]


def describe(signals: ProbeSignals) -> str:
    """The probe as the prompt shows it: numbers only, the same the default router reads."""
    if not signals.passages:
        return "Knowledge base search: nothing found (the knowledge base is empty)."
    return (
        f"Knowledge base search: best similarity {signals.top_score:.2f} (margin {signals.margin:.2f}); "
        f"question words covered by the best document {signals.best_coverage:.2f}, by the top "
        f"{signals.documents} documents {signals.union_coverage:.2f}; a second document adds "
        f"{signals.second_document_share:.2f} ({signals.shared_figures} figures repeated from the best one); "
        f"{signals.covering_documents} documents cover its parts; the question names {signals.titled_documents} of "
        "them together by title."
    )


class RouteChoice(BaseModel):
    route: Literal["direct", "single_hop", "multi_hop"]
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = Field(max_length=200)


def _ask(question: str, signals: ProbeSignals) -> HumanMessage:
    return HumanMessage(f"Question: {question}\n{describe(signals)}")


def messages_for(query: str, signals: ProbeSignals = EMPTY_SIGNALS) -> list[BaseMessage]:
    messages: list[BaseMessage] = [SystemMessage(SYSTEM)]
    for question, shown, answer in EXAMPLES:
        messages += [_ask(question, shown), AIMessage(answer)]
    messages.append(_ask(query, signals))
    return messages


class LLMRouter:
    name = "llm"

    def __init__(self, llm: ChatClient) -> None:
        self._llm = llm

    async def classify(self, query: str, probe: Probe | None = None) -> tuple[RouteDecision, LLMCall]:
        signals = probe.signals if probe is not None else EMPTY_SIGNALS
        choice, call = await self._llm.structured(messages_for(query, signals), RouteChoice, node="route_query")
        decision = RouteDecision(
            route=choice.route, confidence=choice.confidence, reason=choice.reason, classifier=self.name, probe=probe
        )
        return decision, call
