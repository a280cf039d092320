"""CRAG's retrieval evaluator as a cascade: the fast scorer for every document, the LLM grader
only for documents in the uncertain band between the lower and upper thresholds."""

from __future__ import annotations

from dataclasses import dataclass, field

from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.prompts import GRADE_SYSTEM, GRADE_USER
from pipelines.shared.deps import ChatClient, LLMCall, Passage, StructuredOutputError
from pipelines.shared.relevance import Verdict, relevance

GRADER_TEXT_CHARS = 1200


class Grade(BaseModel):
    relevant: bool
    confidence: float = Field(ge=0.0, le=1.0)


@dataclass(slots=True)
class Evaluation:
    verdict: Verdict
    kept: list[Passage]
    fast_scores: list[float]
    calls: list[LLMCall] = field(default_factory=list)
    graded: int = 0

    def describe(self, total: int) -> str:
        return f"evaluate: {self.verdict} (kept {len(self.kept)}/{total}, llm graded {self.graded})"


async def grade(llm: ChatClient, question: str, passage: Passage) -> tuple[Grade, LLMCall]:
    messages = [
        SystemMessage(GRADE_SYSTEM),
        HumanMessage(GRADE_USER.format(question=question, title=passage.title, text=passage.text[:GRADER_TEXT_CHARS])),
    ]
    return await llm.structured(messages, Grade, node="grade_document")


async def evaluate_passages(
    llm: ChatClient, policy: CorrectivePolicy, question: str, passages: list[Passage], calls_left: int
) -> Evaluation:
    scores = [relevance(policy.relevance, question, p.title, p.text, p.score) for p in passages]
    relevant = [p for p, s in zip(passages, scores, strict=True) if s >= policy.upper]
    band = sorted(((s, i) for i, s in enumerate(scores) if policy.lower <= s < policy.upper), key=lambda pair: -pair[0])
    evaluation = Evaluation(verdict="incorrect", kept=[], fast_scores=scores)
    undecided: list[Passage] = []
    for position, (_, index) in enumerate(band):
        if position >= min(policy.max_graded, calls_left):
            undecided.append(passages[index])
            continue
        try:
            verdict, call = await grade(llm, question, passages[index])
        except StructuredOutputError as exc:
            evaluation.calls.extend([exc.call] if exc.call else [])
            undecided.append(passages[index])
            continue
        evaluation.calls.append(call)
        evaluation.graded += 1
        if verdict.relevant and verdict.confidence >= 0.5:
            relevant.append(passages[index])
    if relevant:
        evaluation.verdict = "correct"
        evaluation.kept = relevant + undecided
    elif undecided:
        evaluation.verdict = "ambiguous"
        evaluation.kept = undecided
    return evaluation
