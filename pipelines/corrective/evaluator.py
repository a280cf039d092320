"""CRAG's retrieval evaluator as a cascade: a first stage without the LLM for every document (the round judge, or
the fast scorer per passage), the LLM grader only for documents in the uncertain band between the lower and upper
thresholds."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.prompts import GRADE_SYSTEM, GRADE_USER
from pipelines.shared import (
    ChatClient,
    LLMCall,
    Passage,
    QueryScorer,
    StructuredOutputError,
    Verdict,
    judge_round,
    lexical_support,
    split_strips,
)

GRADER_TEXT_CHARS = 500


class Grade(BaseModel):
    """``fact`` comes first so the model commits to evidence before judging; a fact the document does
    not contain marks the judgement as invented (small models say "relevant" to anything)."""

    fact: str = Field(max_length=240)
    relevant: bool


@dataclass(slots=True)
class Evaluation:
    verdict: Verdict
    kept: list[Passage]
    fast_scores: list[float]
    calls: list[LLMCall] = field(default_factory=list)
    graded: int = 0
    # The kept documents judged relevant (fast score above upper, or the grader's verified "yes"), as
    # opposed to those kept undecided: refinement keeps at least one strip of each.
    confirmed: list[Passage] = field(default_factory=list)


def excerpt(scorer: QueryScorer, passage: Passage) -> str:
    """The passage's most relevant strips, in order: shorter prompts grade faster and more sharply."""
    strips = split_strips(passage.text)
    if len(passage.text) <= GRADER_TEXT_CHARS or len(strips) < 2:
        return passage.text[:GRADER_TEXT_CHARS]
    scored = sorted(
        range(len(strips)),
        key=lambda i: -scorer.score(passage.title, strips[i], passage.score),
    )
    chosen: list[int] = []
    for index in scored:
        if sum(len(strips[i]) for i in chosen) + len(strips[index]) > GRADER_TEXT_CHARS:
            break
        chosen.append(index)
    return " ".join(strips[i] for i in sorted(chosen or scored[:1]))


async def grade(llm: ChatClient, scorer: QueryScorer, question: str, passage: Passage) -> tuple[bool, LLMCall]:
    """``scorer`` is the question's, built once per round: it picks the excerpt the grader sees."""
    text = excerpt(scorer, passage)
    messages = [
        SystemMessage(GRADE_SYSTEM),
        HumanMessage(GRADE_USER.format(question=question, title=passage.title, text=text)),
    ]
    verdict, call = await llm.structured(messages, Grade, node="grade_document")
    fact = verdict.fact.strip()
    support = lexical_support(fact, question, [text])
    # The fact must add something beyond the question's own words, and that something must be in the text.
    grounded_fact = fact.lower() not in {"", "none"} and support.novel_terms > 0 and support.supported(0.6)
    return verdict.relevant and grounded_fact, call


def first_stage(
    policy: CorrectivePolicy, queries: list[str], scorers: list[QueryScorer], passages: list[Passage]
) -> list[float]:
    """Each passage's probability of answering, the better over ``queries`` (the question, and a follow-up
    round's own query).

    The judge reads the first round only: its cosines are all to the question. A follow-up round's passages
    carry the cosine to whichever query found them (the sub-question, the rewrite, the question's expansion), so
    margins between them would compare different measures; such a round is scored passage by passage.
    """
    if policy.judge is None or len(queries) > 1:
        return [max(scorer.score(p.title, p.text, p.score) for scorer in scorers) for p in passages]
    return judge_round(policy.judge, queries[0], passages)


async def _try_grade(
    llm: ChatClient, scorer: QueryScorer, question: str, passage: Passage
) -> tuple[bool, LLMCall] | StructuredOutputError:
    try:
        return await grade(llm, scorer, question, passage)
    except StructuredOutputError as exc:
        return exc


async def evaluate_passages(
    llm: ChatClient,
    policy: CorrectivePolicy,
    question: str,
    passages: list[Passage],
    calls_left: int,
    *,
    scoring_query: str | None = None,
) -> Evaluation:
    """Score ``passages`` (first stage), grade the uncertain ones (LLM), take CRAG's action.

    ``scoring_query`` marks a follow-up round: its documents are scored against both the question
    and the query that found them (a second-hop document matches the follow-up, not the question),
    and when none reaches the band the best one is still graded, since the fast scorer was fitted
    on single-question relevance and cannot see a missing hop. The LLM grader always judges against
    the original question.
    """
    queries = [question] if scoring_query in (None, question) else [question, scoring_query]
    scorers = [QueryScorer.of(policy.relevance, q) for q in queries]
    scores = first_stage(policy, queries, scorers, passages)
    relevant = [p for p, s in zip(passages, scores, strict=True) if s >= policy.upper]
    band = sorted(((s, i) for i, s in enumerate(scores) if policy.lower <= s < policy.upper), key=lambda pair: -pair[0])
    exploring = False
    if len(queries) > 1 and not relevant and not band and passages:
        best = max(range(len(passages)), key=lambda i: scores[i])
        if scores[best] >= policy.explore_floor:
            band, exploring = [(scores[best], best)], True
    evaluation = Evaluation(verdict="incorrect", kept=[], fast_scores=scores)
    undecided: list[Passage] = []
    limit = min(policy.max_graded, calls_left)
    # Graded concurrently: the local llama.cpp server has two slots, a hosted API more.
    outcomes = await asyncio.gather(*(_try_grade(llm, scorers[0], question, passages[i]) for _, i in band[:limit]))
    for (_, index), outcome in zip(band[:limit], outcomes, strict=True):
        if isinstance(outcome, StructuredOutputError):
            evaluation.calls.extend([outcome.call] if outcome.call else [])
            undecided.extend([] if exploring else [passages[index]])
            continue
        is_relevant, call = outcome
        evaluation.calls.append(call)
        evaluation.graded += 1
        if is_relevant:
            relevant.append(passages[index])
    # Beyond the grading budget a document stays undecided; an explored one (below ``lower``) is dropped.
    undecided.extend([] if exploring else [passages[index] for _, index in band[limit:]])
    evaluation.confirmed = relevant
    if relevant:
        evaluation.verdict = "correct"
        evaluation.kept = relevant + undecided
    elif undecided:
        evaluation.verdict = "ambiguous"
        evaluation.kept = undecided
    return evaluation
