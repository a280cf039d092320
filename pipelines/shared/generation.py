"""Grounded answer generation and the checks around it, shared by retrieval pipelines.

Two LLM-free gates keep a small model honest: passages below a relevance floor never reach it
(no call at all when none is left), and an answer whose content is not in the passages is
replaced by a plain "not in the knowledge base" (see :mod:`pipelines.shared.support`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from pipelines.shared.deps import ChatClient, LLMCall, Passage
from pipelines.shared.persona import DEFAULT_ASSISTANT, Assistant
from pipelines.shared.prompts import (
    ABSTAIN_EN,
    ABSTAIN_JA,
    ANSWER_CUE,
    ANSWER_CUE_JA,
    GROUNDED_SYSTEM,
    GROUNDED_USER,
    NOT_IN_CONTEXT,
)
from pipelines.shared.support import lexical_support
from pipelines.shared.text import has_cjk, tokens

_CITATION = re.compile(r"\[(\d{1,2})(?:\s*,\s*(\d{1,2}))*\]")
_NUMBERS = re.compile(r"\d{1,2}")
# A citation marker with the space before it: removed from claims and from answers, whatever its numbers.
CITATION_MARKER = re.compile(r"\s*\[\d{1,3}(?:\s*,\s*\d{1,3})*\]")
_SPACE_BEFORE_STOP = re.compile(r"\s+([.,;:!?。])")
# A last word after which an English sentence cannot end: the answer was cut off before it said anything.
# Prepositions are not among them: "300 kg, as stated in [1]" is how small models cite.
_DANGLING = frozenset(["is", "are", "was", "were", "be", "the", "an"])


@dataclass(frozen=True, slots=True)
class GroundingPolicy:
    min_relevance: float = 0.18
    min_support: float = 0.5
    max_tokens: int | None = 200


@dataclass(frozen=True, slots=True)
class GroundedAnswer:
    answer: str
    cited: list[Passage]
    abstained: bool
    call: LLMCall | None
    note: str = ""
    context: list[Passage] = field(default_factory=list)


# What a passage may not carry into a prompt: the end of the quoted block, and chat-template markers.
_BREAKOUT = re.compile(r"</?documents>|<\|[a-z_]+\|>|\[/?INST\]|<</?SYS>>", re.IGNORECASE)


def format_context(passages: list[Passage]) -> str:
    """Numbered passages; anything in them that could close the quoted block or open a chat turn is removed,
    so a passage cannot step out of the data it is presented as."""
    return "\n\n".join(f"[{i}] ({_quoted(p.title)}) {_quoted(p.text)}" for i, p in enumerate(passages, start=1))


def _quoted(text: str) -> str:
    return _BREAKOUT.sub(" ", text)


def cited_passages(answer: str, passages: list[Passage]) -> list[Passage]:
    """Passages the answer cites by number, in citation order, without repeats."""
    chosen: list[Passage] = []
    for match in _CITATION.finditer(answer):
        for number in _NUMBERS.findall(match.group(0)):
            index = int(number) - 1
            if 0 <= index < len(passages) and passages[index] not in chosen:
                chosen.append(passages[index])
    return chosen


def drop_phantom_citations(answer: str, passages: int) -> str:
    """The answer without citation markers of passages that do not exist.

    A small model can fall into counting "[1] [2] ... [42]" until max_tokens; those markers cite
    nothing, and left in they hide that the sentence before them never ended.
    """

    def keep(match: re.Match[str]) -> str:
        numbers = [n for n in re.findall(r"\d+", match.group(0)) if 1 <= int(n) <= passages]
        return f" [{', '.join(numbers)}]" if numbers else ""

    cleaned = CITATION_MARKER.sub(keep, answer)
    return _SPACE_BEFORE_STOP.sub(r"\1", cleaned).strip()


def states_nothing(answer: str) -> bool:
    """A reply that makes no claim, so every lexical check passes it: citation numbers alone ("[1] [2]"),
    which small models produce over terse strips, or a sentence broken off before its answer
    ("The maximum payload of the robot is [1]."). Words are the shared tokenizer's, so a Japanese
    reply is its bigrams, not one space-less "word"."""
    words = [w for w in tokens(_CITATION.sub(" ", answer)) if len(w) > 1 or has_cjk(w)]
    return not words or words[-1] in _DANGLING


def abstention_for(question: str, assistant: Assistant | None = None) -> str:
    """In the answer's language: the profile's fixed one (Japanese, else English), or the question's."""
    if assistant is not None and assistant.language is not None:
        return ABSTAIN_JA if assistant.language == "ja" else ABSTAIN_EN
    return ABSTAIN_JA if has_cjk(question) else ABSTAIN_EN


def relevant(passages: list[Passage], policy: GroundingPolicy) -> list[Passage]:
    return [p for p in passages if p.score >= policy.min_relevance]


@dataclass(frozen=True, slots=True)
class Draft:
    text: str
    cited: list[Passage]
    found: bool
    call: LLMCall


async def draft_answer(
    llm: ChatClient,
    question: str,
    passages: list[Passage],
    *,
    node: str,
    feedback: str = "",
    max_tokens: int | None = None,
    assistant: Assistant = DEFAULT_ASSISTANT,
) -> Draft:
    """One generation over numbered passages, written by the tenant's ``assistant``; ``feedback`` asks for a
    corrected second attempt."""
    cue = ANSWER_CUE_JA if assistant.answer_language(question) == "ja" else ANSWER_CUE
    messages: list[BaseMessage] = [
        SystemMessage(assistant.system_prompt(GROUNDED_SYSTEM, question)),
        HumanMessage(GROUNDED_USER.format(context=format_context(passages), question=question, cue=cue)),
    ]
    if feedback:
        messages.append(HumanMessage(feedback))
    reply = await llm.chat(messages, node=node, max_tokens=max_tokens)
    text = drop_phantom_citations(reply.text, len(passages))
    if NOT_IN_CONTEXT in text or not text:
        return Draft(abstention_for(question, assistant), [], False, reply.call)
    return Draft(text, cited_passages(text, passages) or list(passages), True, reply.call)


async def generate_grounded(
    llm: ChatClient,
    question: str,
    passages: list[Passage],
    policy: GroundingPolicy,
    *,
    node: str,
    assistant: Assistant = DEFAULT_ASSISTANT,
) -> GroundedAnswer:
    """Plain RAG with both LLM-free gates: relevance before the call, support after it."""
    usable = relevant(passages, policy)
    if not usable:
        best = max((p.score for p in passages), default=0.0)
        note = f"no passage above relevance {policy.min_relevance} (best {best:.2f})"
        return GroundedAnswer(abstention_for(question, assistant), [], True, None, note)
    draft = await draft_answer(llm, question, usable, node=node, max_tokens=policy.max_tokens, assistant=assistant)
    if not draft.found:
        return GroundedAnswer(draft.text, [], True, draft.call, "model found no answer", usable)
    if states_nothing(draft.text):
        return GroundedAnswer(
            abstention_for(question, assistant), [], True, draft.call, "model gave only citations", usable
        )
    support = lexical_support(draft.text, question, [p.text for p in usable])
    if not support.supported(policy.min_support):
        unsupported = ", ".join((support.missing_numbers or support.missing)[:5])
        note = f"unsupported by passages: {unsupported}"
        return GroundedAnswer(abstention_for(question, assistant), [], True, draft.call, note, usable)
    return GroundedAnswer(draft.text, draft.cited, False, draft.call, context=usable)
