"""Grounded answer generation and the parsing of its citations, shared by retrieval pipelines."""

from __future__ import annotations

import re
from dataclasses import dataclass

from langchain_core.messages import HumanMessage, SystemMessage

from pipelines.shared.deps import ChatClient, LLMCall, Passage
from pipelines.shared.prompts import (
    ABSTAIN_EN,
    ABSTAIN_JA,
    GROUNDED_SYSTEM,
    GROUNDED_USER,
    NOT_IN_CONTEXT,
)

_CITATION = re.compile(r"\[(\d{1,2})(?:\s*,\s*(\d{1,2}))*\]")
_NUMBERS = re.compile(r"\d{1,2}")
_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


@dataclass(frozen=True, slots=True)
class GroundedAnswer:
    answer: str
    cited: list[Passage]
    abstained: bool
    call: LLMCall | None


def format_context(passages: list[Passage]) -> str:
    return "\n\n".join(f"[{i}] ({p.title}) {p.text}" for i, p in enumerate(passages, start=1))


def cited_passages(answer: str, passages: list[Passage]) -> list[Passage]:
    """Passages the answer cites by number, in citation order, without repeats."""
    chosen: list[Passage] = []
    for match in _CITATION.finditer(answer):
        for number in _NUMBERS.findall(match.group(0)):
            index = int(number) - 1
            if 0 <= index < len(passages) and passages[index] not in chosen:
                chosen.append(passages[index])
    return chosen


def abstention_for(question: str) -> str:
    return ABSTAIN_JA if _JAPANESE.search(question) else ABSTAIN_EN


async def generate_grounded(
    llm: ChatClient, question: str, passages: list[Passage], *, node: str
) -> GroundedAnswer:
    if not passages:
        # Nothing retrieved: saying so costs no model call and cannot hallucinate.
        return GroundedAnswer(abstention_for(question), [], True, None)
    messages = [
        SystemMessage(GROUNDED_SYSTEM),
        HumanMessage(GROUNDED_USER.format(context=format_context(passages), question=question)),
    ]
    reply = await llm.chat(messages, node=node)
    text = reply.text.strip()
    if NOT_IN_CONTEXT in text or not text:
        return GroundedAnswer(abstention_for(question), [], True, reply.call)
    cited = cited_passages(text, passages)
    return GroundedAnswer(text, cited or list(passages), False, reply.call)
