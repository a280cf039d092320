"""Thresholds and budgets of the corrective pipeline (filled from settings at start-up)."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.shared import GroundingPolicy, JudgeModel, RelevanceModel


@dataclass(frozen=True, slots=True, kw_only=True)
class CorrectivePolicy:
    """The scorer and the four thresholds on its probability have no defaults: they are fitted together for the
    embedder in use (``routes.calibration``), and a threshold means what it does only on its own scorer's scale."""

    # CRAG evaluator, on the first stage's probability: a document above ``upper`` is relevant, one
    # below ``lower`` is not; in between the LLM grader decides (at most ``max_graded`` per round).
    upper: float
    lower: float
    max_graded: int = 2
    # Follow-up rounds grade their best document even below ``lower`` (a missing hop scores low
    # against the question), but not below this floor: the LLM grader says "yes" too easily.
    explore_floor: float
    # Knowledge refinement: the best ``max_strips`` strips scoring at least ``strip_threshold`` choose
    # the passages that reach the generator, whole.
    strip_threshold: float
    max_strips: int = 12
    # Multi-hop planning (:mod:`.hops`): after each evaluated retrieval the model may name the next
    # sub-question, at most ``max_hops`` times per request (0: no planning, CRAG's loops alone). The
    # service sets it from settings (GATEWAY_MAX_HOPS, 2); the bare policy leaves it off so the
    # CRAG/Self-RAG behaviour can be tested on its own.
    max_hops: int = 0
    # Self-RAG's usefulness critic is skipped for a first answer that passed the groundedness check
    # on evidence the evaluator judged Correct (on by the service's settings, like ``max_hops``).
    trust_correct_grounded: bool = False
    # ... and for one on evidence the hop planner found sufficient, no rewrite having followed: where the
    # planner's call judges the rounds it reads, its "sufficient" stands for the grader's Correct.
    trust_planner_sufficient: bool = False
    # Whether the LLM grader judges a round the hop planner reads next. Off, the planner's call is that
    # round's judgement (it names the fact the evidence gives, or the query for what it lacks) and the
    # fast scorer alone keeps or drops documents: one to two grading calls fewer per hop (the service
    # turns it off from settings, GATEWAY_GRADE_PLANNED_ROUNDS; the bare policy grades, like CRAG).
    grade_planned_rounds: bool = True
    # The generator's context, bounded (:func:`.refine.bounded_context`): plain RAG's on the first retrieval
    # (its best ``answer_passages`` in search order, above the grounding floor), then each round's best
    # ``hop_passages`` new ones. 0: unbounded, every refined passage (the bare policy; the service bounds it).
    answer_passages: int = 0
    hop_passages: int = 0
    # Plain RAG's answer on the first retrieval is drafted first and is the floor (:mod:`.floor`): a later answer
    # replaces it only when it is no answer or the later one rests on evidence it lacked. Off in the bare policy,
    # so the CRAG/Self-RAG loops can be tested on their own; the service turns it on (GATEWAY_PLAIN_FLOOR).
    plain_floor: bool = False
    # Loops and budget: every loop ends at whichever comes first.
    max_rewrites: int = 2
    max_llm_calls: int = 10
    max_seconds: float = 90.0
    recursion_limit: int = 40
    top_k: int = 6
    relevance: RelevanceModel
    # The evaluator's first stage reads each round as a whole (:mod:`pipelines.shared.judge`), telling the page
    # asked about from its neighbours; None scores each passage alone with ``relevance``, CRAG's own cascade. The
    # service sets it from settings (GATEWAY_EVALUATOR_JUDGE, on); the bare policy keeps the per-passage scorer
    # so the cascade's mechanics can be tested on scores that do not move with the round.
    judge: JudgeModel | None = None
    grounding: GroundingPolicy
