"""Self-RAG's critics: is the answer supported by the evidence (IsSup), does it answer (IsUse)?

Both start LLM-free: claims whose words all occur in the evidence need no model call, and an
answer that says it found nothing is not useful by definition. The model is asked only when the
cheap check cannot settle it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from pipelines.corrective.prompts import (
    ANSWER_IN,
    CAUTIOUS_EN,
    CAUTIOUS_JA,
    CAUTIOUS_MISSING_EN,
    CAUTIOUS_MISSING_JA,
    EMPTY_ANSWER_NOTE,
    EMPTY_ANSWER_NOTE_JA,
    GROUNDED_SYSTEM,
    GROUNDED_USER,
    REGENERATE_NOTE,
    REGENERATE_NOTE_JA,
    USEFUL_SYSTEM,
    USEFUL_USER,
)
from pipelines.shared import (
    ABSTAIN_EN,
    ABSTAIN_JA,
    CITATION_MARKER,
    LANGUAGES,
    NOT_IN_CONTEXT,
    ChatClient,
    Judged,
    LLMCall,
    Passage,
    StructuredOutputError,
    Withhold,
    format_context,
    has_cjk,
    joined,
    same_script,
    split_sentences,
)

# The "claim" an answer that states nothing (citation numbers alone, or a sentence broken off before its
# answer) is doubted for: regeneration_note, cautious_answer and the graph know it is none.
CITATIONS_ONLY = "the answer states nothing (citation numbers or an unfinished sentence)"
_ABSTENTIONS = (NOT_IN_CONTEXT, ABSTAIN_EN, ABSTAIN_JA, "could not confirm", "完全な回答を確認できません")


# Bounds in the schema become bounds in llama.cpp's grammar (5 x 200 characters fit in max_tokens): a
# small model repeating itself inside a claim is cut at the claim's end instead of running out of tokens.
Claim = Annotated[str, Field(max_length=200)]


class GroundednessCheck(BaseModel):
    unsupported_claims: list[Claim] = Field(default_factory=list, max_length=5)


class UsefulnessCheck(BaseModel):
    useful: bool
    missing: str = Field(default="", max_length=300)


@dataclass(slots=True)
class Critique:
    ok: bool
    detail: list[str] = field(default_factory=list)
    calls: list[LLMCall] = field(default_factory=list)
    skipped: bool = False


def claims_of(answer: str) -> list[str]:
    """The answer's sentences, cut as the sentence gate cuts them (so "3.5" or "Dr." split nothing)."""
    return [s.text for s in split_sentences(answer) if len(s.text) > 3]


@dataclass(slots=True)
class Grounding:
    """IsSup over a gated draft: the answer it leaves (``answer``), the sentences still withheld, and whether an
    answer is left at all (``ok``); ``detail``: the doubted claims a regeneration is told about."""

    ok: bool
    answer: str
    withheld: list[Withhold] = field(default_factory=list)
    detail: list[str] = field(default_factory=list)
    calls: list[LLMCall] = field(default_factory=list)


async def check_grounded(
    llm: ChatClient, question: str, drafted: list[Judged], evidence: list[Passage], calls_left: int
) -> Grounding:
    """The gate withheld the draft's sentences it doubts; the critic is asked once, about the whole draft, whether
    those are in fact supported, and its "all supported" puts them back. Across scripts (an English answer over
    Japanese passages) the gate compares nothing, so every sentence is doubted. The script is read from letters:
    "1,800円 [2]" is a Japanese answer, not an English one."""
    withheld = [j.withheld for j in drafted if j.withheld is not None]
    passed = [j for j in drafted if j.withheld is None]
    answer = joined(passed)
    doubted = [j for j in drafted if j.withheld is not None and j.withheld.reason == "unsupported"]
    cross_script = bool(passed) and not same_script(answer, " ".join(p.text for p in evidence))
    if not doubted and not cross_script:
        return Grounding(ok=bool(answer), answer=answer, withheld=withheld, detail=[] if answer else [CITATIONS_ONLY])
    claims = [j.text for j in drafted if j in doubted or (cross_script and j.withheld is None)]
    if calls_left < 1:
        # No call to clear a doubt: what the gate withheld stays withheld, and an unchecked translation is not sent.
        ok = bool(answer) and not cross_script
        return Grounding(ok=ok, answer=answer if ok else "", withheld=withheld, detail=claims)
    messages = [
        SystemMessage(GROUNDED_SYSTEM),
        HumanMessage(GROUNDED_USER.format(evidence=format_context(evidence), answer=joined(drafted))),
    ]
    try:
        verdict, call = await llm.structured(messages, GroundednessCheck, node="check_grounded")
    except StructuredOutputError as exc:
        calls = [exc.call] if exc.call else []
        ok = bool(answer) and not cross_script
        return Grounding(ok=ok, answer=answer if ok else "", withheld=withheld, detail=claims, calls=calls)
    unsupported = [c for c in verdict.unsupported_claims if c.strip()]
    if not unsupported:
        kept = [j for j in drafted if j.withheld is None or j.withheld.reason == "unsupported"]
        still = [w for w in withheld if w.reason != "unsupported"]
        return Grounding(ok=True, answer=joined(kept), withheld=still, calls=[call])
    ok = bool(answer) and not cross_script
    return Grounding(ok=ok, answer=answer if ok else "", withheld=withheld, detail=unsupported, calls=[call])


def regeneration_note(unsupported: list[str], language: str | None = None) -> str:
    """What a regenerated answer is told about the doubted one ("" for a first answer), in the answer's
    ``language`` (a code of :data:`LANGUAGES`; None: not known): the note is the last thing the model reads, and
    it answers in the note's language rather than the system prompt's."""
    if not unsupported:
        return ""
    empty = unsupported == [CITATIONS_ONLY]
    claims = "; ".join(unsupported)
    if language == "ja":
        return EMPTY_ANSWER_NOTE_JA if empty else REGENERATE_NOTE_JA.format(claims=claims)
    note = EMPTY_ANSWER_NOTE if empty else REGENERATE_NOTE.format(claims=claims)
    if language is None or language == "en":
        return note
    return f"{note}\n{ANSWER_IN.format(language=LANGUAGES.get(language, language))}"


def is_abstention(answer: str) -> bool:
    return any(marker in answer for marker in _ABSTENTIONS)


async def check_useful(llm: ChatClient, question: str, answer: str, calls_left: int) -> Critique:
    if is_abstention(answer):
        return Critique(ok=False, detail=["the answer says the information was not found"])
    if calls_left < 1:
        return Critique(ok=True, detail=["no LLM calls left"], skipped=True)
    messages = [SystemMessage(USEFUL_SYSTEM), HumanMessage(USEFUL_USER.format(question=question, answer=answer))]
    try:
        verdict, call = await llm.structured(messages, UsefulnessCheck, node="check_useful")
    except StructuredOutputError as exc:
        calls = [exc.call] if exc.call else []
        return Critique(ok=True, detail=["critic output malformed"], calls=calls, skipped=True)
    return Critique(ok=verdict.useful, detail=[verdict.missing] if verdict.missing else [], calls=[call])


def cautious_answer(question: str, evidence: list[Passage], unsupported: list[str], language: str | None = None) -> str:
    """What the evidence does and does not say, without another model call; in the profile's fixed ``language``
    (Japanese, else English) or the question's."""
    japanese = language == "ja" if language is not None else has_cjk(question)
    if not evidence:
        return ABSTAIN_JA if japanese else ABSTAIN_EN
    said = " ".join(f"“{p.text[:280]}” [{i}]" for i, p in enumerate(evidence[:3], start=1))
    text = (CAUTIOUS_JA if japanese else CAUTIOUS_EN).format(said=said)
    unsupported = [claim for claim in unsupported if claim != CITATIONS_ONLY]
    if unsupported:
        missing = "; ".join(CITATION_MARKER.sub("", claim).strip().rstrip(".。") for claim in unsupported[:3])
        text += (CAUTIOUS_MISSING_JA if japanese else CAUTIOUS_MISSING_EN).format(missing=missing)
    return text
