"""The hybrid evaluator: a curator's weighted rule checks for the facts, an LLM judge for the rest.

Rules are exact and cheap (``must_contain``, ``must_not_contain``, ``pattern``: a regular expression
the answer must match), so a fact the curator knows is checked without a model's opinion; the judge
(structured output through the app's LLM client: a score in [0, 1] and a one-line reason) catches
what rules cannot say, such as a confused or evasive answer. The score is the weighted mean of both;
every part is kept in the breakdown, so a curator sees why a score moved.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from gateway.errors import ClientError, MalformedOutputError
from gateway.providers import LLMClient

RuleKind = Literal["must_contain", "must_not_contain", "pattern"]
JUDGE_NODE = "curation_judge"
JUDGE_SYSTEM = (
    "You grade an assistant's answer to a user's question against verified reference information. "
    "Score 1.0 when the answer states the correct, current facts; 0.0 when it is wrong, outdated or evasive; "
    "in between for partial answers. Give a one-line reason."
)


class JudgeVerdict(BaseModel):
    """The judge's structured output."""

    score: float = Field(ge=0.0, le=1.0)
    reason: str = Field(max_length=300)


@dataclass(frozen=True, slots=True)
class Rule:
    kind: RuleKind
    value: str
    weight: float = 1.0

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise ClientError(f"rule weights must be positive, got {self.weight}")
        if self.kind == "pattern":
            try:
                re.compile(self.value)
            except re.error as exc:
                raise ClientError(f"rule pattern {self.value!r} is not a valid regular expression: {exc}") from exc

    def passes(self, answer: str) -> bool:
        text = _fold(answer)
        if self.kind == "must_contain":
            return _fold(self.value) in text
        if self.kind == "must_not_contain":
            return _fold(self.value) not in text
        return re.search(self.value, answer) is not None


_DASHES = str.maketrans(dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2212\u30fc\uff0d", "-"))


def _fold(text: str) -> str:
    """NFKC, dashes and case folded: a Japanese address written ２−３−４ or 2-3-4 compares equal."""
    return unicodedata.normalize("NFKC", text).translate(_DASHES).casefold()


@dataclass(slots=True)
class Score:
    score: float
    rules: list[dict[str, Any]] = field(default_factory=list)
    judge: dict[str, Any] | None = None

    def breakdown(self) -> dict[str, Any]:
        return asdict(self)


class HybridEvaluator:
    def __init__(self, llm: LLMClient | None, *, judge_weight: float = 1.0) -> None:
        self._llm = llm
        self._judge_weight = judge_weight

    async def score(self, question: str, answer: str, rules: list[Rule], reference: str = "") -> Score:
        checks = [{**asdict(rule), "passed": rule.passes(answer)} for rule in rules]
        total = sum(rule.weight for rule in rules)
        earned = sum(rule.weight for rule, check in zip(rules, checks, strict=True) if check["passed"])
        judge = await self._judge(question, answer, reference)
        if judge is not None:
            total += self._judge_weight
            earned += self._judge_weight * judge.score
        value = earned / total if total > 0 else 0.0
        verdict = {"score": judge.score, "reason": judge.reason, "weight": self._judge_weight} if judge else None
        return Score(round(value, 4), checks, verdict)

    async def _judge(self, question: str, answer: str, reference: str) -> JudgeVerdict | None:
        """The judge's verdict; a malformed reply leaves the rules to score alone (said in the breakdown)."""
        if self._llm is None:
            return None
        prompt = f"Question: {question}\n\nVerified reference:\n{reference or '(none)'}\n\nAnswer to grade:\n{answer}"
        try:
            verdict, _ = await self._llm.structured(
                [SystemMessage(JUDGE_SYSTEM), HumanMessage(prompt)], JudgeVerdict, node=JUDGE_NODE
            )
        except MalformedOutputError:
            return None
        return verdict
