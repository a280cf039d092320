"""LLM-free relevance of a passage (or a knowledge strip) to a query: the evaluator's first stage.

A logistic model over three features — embedding cosine, the share of the query's content terms
found in the text, and the share found in the title — with terms from the project's one tokenizer
(:mod:`pipelines.shared.text`), fitted for the embedder in use at set-up (``routes.calibration``, on the calibration
set shipped in ``routes/data``; ``python -m routes.offline.training.calibrate_relevance`` reports the fit on the shared
dev data). Under USE:

- Latin script: HotpotQA gold vs distractor paragraphs and SQuAD v2 gold vs other paragraphs of the
  article (1,378 pairs, 296 relevant). Cross-validated AUC 0.76 (HotpotQA's distractors are chosen
  to look relevant, which is why uncertain scores go on to the LLM grader).
- Japanese: JSQuAD gold vs other paragraphs of the article (1,980 pairs, 495 relevant), cosine and
  overlap (AUC 0.96; the title is the article's for both sides, so it cannot be fitted). Overlap of
  character bigrams runs lower than overlap of words for the same relevance (a question's bigrams
  spanning a particle never match), so one model for both scripts judged a Japanese manual's right
  passage "incorrect" (the unit test ``test_japanese_relevance`` shows it).
"""

from __future__ import annotations

import math
from collections.abc import Set
from dataclasses import dataclass
from typing import Literal

from pipelines.shared.deps import Passage
from pipelines.shared.support import mostly_cjk, terms


@dataclass(frozen=True, slots=True)
class RelevanceModel:
    """The coefficients are the embedder's: cosines run on each embedder's own scale, so they are fitted for the
    one in use at set-up (``routes.calibration``) and there is no default set."""

    # Latin script.
    intercept: float
    w_cosine: float
    w_overlap: float
    w_title: float
    # Across scripts (a Japanese passage for an English query) the lexical features say nothing, so
    # a cosine-only fit on the same data is used instead.
    cross_intercept: float
    cross_w_cosine: float
    # Japanese query and passage (character-bigram overlap).
    cjk_intercept: float
    cjk_w_cosine: float
    cjk_w_overlap: float

    def cross_script_probability(self, cosine: float) -> float:
        return 1.0 / (1.0 + math.exp(-(self.cross_intercept + self.cross_w_cosine * cosine)))

    def probability(self, cosine: float, overlap: float, title_overlap: float, *, cjk: bool = False) -> float:
        if cjk:
            z = self.cjk_intercept + self.cjk_w_cosine * cosine + self.cjk_w_overlap * overlap
        else:
            z = self.intercept + self.w_cosine * cosine + self.w_overlap * overlap + self.w_title * title_overlap
        return 1.0 / (1.0 + math.exp(-z))


def overlap(query_terms: Set[str], text: str) -> float:
    """Share of the query's content terms that occur in ``text``."""
    if not query_terms:
        return 0.0
    return len(query_terms & terms(text)) / len(query_terms)


@dataclass(frozen=True, slots=True)
class QueryScorer:
    """The query's side of the features, computed once: one query is scored against many passages and strips."""

    model: RelevanceModel
    terms: frozenset[str]
    cjk: bool

    @classmethod
    def of(cls, model: RelevanceModel, query: str) -> QueryScorer:
        return cls(model, frozenset(terms(query)), mostly_cjk(query))

    def score(self, title: str, text: str, cosine: float) -> float:
        if self.cjk != mostly_cjk(text):
            return self.model.cross_script_probability(cosine)
        return self.model.probability(cosine, overlap(self.terms, text), overlap(self.terms, title), cjk=self.cjk)


def relevance(model: RelevanceModel, query: str, title: str, text: str, cosine: float) -> float:
    return QueryScorer.of(model, query).score(title, text, cosine)


Verdict = Literal["correct", "ambiguous", "incorrect"]


def fast_verdict(model: RelevanceModel, query: str, passages: list[Passage], lower: float, upper: float) -> Verdict:
    """CRAG's action from the fast scorer alone: any above ``upper`` correct, all below ``lower`` incorrect."""
    scorer = QueryScorer.of(model, query)
    scores = [scorer.score(p.title, p.text, p.score) for p in passages]
    if any(s >= upper for s in scores):
        return "correct"
    if all(s < lower for s in scores):
        return "incorrect"
    return "ambiguous"
