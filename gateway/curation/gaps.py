"""Open questions grouped into gaps, and each gap's diagnosis with the evidence for it.

Questions are grouped greedily by the cosine of their embeddings (the app's embeddings model, the
vectors recorded with them) against each group's centroid. A gap's id is its first record's id, so it
stays the same while questions join it.

The diagnosis says what a curator should fix, checked in this order:

- ``stale``: an answer cited a document that changed after it was given;
- ``generation``: the top-k the answer read held the expected answer a user gave with their feedback
  (or, without one, the evidence was judged Correct), yet a draft was rejected or it was rated down;
- ``ranking``: a deeper search finds a passage that answers it (holds the expected answer from the
  feedback, or the relevance scorer judges it relevant) below the top-k the answer read;
- ``knowledge_gap``: nothing in the store answers it: add a verified document.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.curation.models import AnswerRecord
from gateway.curation.store import CurationStore
from gateway.knowledge import KnowledgeBase
from pipelines.shared import QueryScorer, RelevanceModel, Visibility, overlap, terms

Diagnosis = Literal["knowledge_gap", "ranking", "generation", "stale"]
# A passage "holds" the expected answer when it has this share of the answer's content terms.
EXPECTED_SUPPORT = 0.6
MAX_EXAMPLES = 5


@dataclass(slots=True)
class Gap:
    id: str
    tenant: str
    records: list[AnswerRecord]
    diagnosis: Diagnosis = "knowledge_gap"
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def questions(self) -> list[str]:
        """Distinct questions, first asked first."""
        return list(dict.fromkeys(r.question for r in self.records))

    @property
    def expected_answer(self) -> str | None:
        return next((r.expected_answer for r in reversed(self.records) if r.expected_answer), None)


def _unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(_unit(a), _unit(b), strict=False))


def cluster(records: Sequence[AnswerRecord], threshold: float) -> list[Gap]:
    """Greedy single pass in time order: each record joins the most similar gap above ``threshold``."""
    gaps: list[Gap] = []
    centroids: list[list[float]] = []
    for record in records:
        best, best_similarity = -1, threshold
        for index, centroid in enumerate(centroids):
            similarity = _cosine(record.embedding, centroid)
            if similarity >= best_similarity:
                best, best_similarity = index, similarity
        if best < 0:
            gaps.append(Gap(id=f"gap_{record.id}", tenant=record.tenant, records=[record]))
            centroids.append(_unit(record.embedding))
            continue
        gap = gaps[best]
        gap.records.append(record)
        n = len(gap.records)
        centroids[best] = [
            (c * (n - 1) + x) / n for c, x in zip(centroids[best], _unit(record.embedding), strict=False)
        ]
    return gaps


class Diagnoser:
    def __init__(
        self, knowledge: KnowledgeBase, store: CurationStore, *, deep_k: int, relevant: float, model: RelevanceModel
    ) -> None:
        """``model`` and ``relevant``: the fast relevance scorer fitted for the embedder in use, and the probability
        above which it takes a passage to answer (CRAG's ``upper``, calibrated with it)."""
        self._knowledge = knowledge
        self._store = store
        self._deep_k = deep_k
        self._relevant = relevant
        self._model = model

    async def diagnose(self, gap: Gap) -> None:
        stale = await self._stale(gap)
        if stale:
            gap.diagnosis, gap.evidence = "stale", {"changed_documents": stale}
            return
        if gap.expected_answer:
            # A user said what the answer is: where (and whether) the store holds it decides, whatever
            # the evaluator thought of the evidence.
            gap.diagnosis, gap.evidence = await self._deep_search(gap)
            return
        judged = [r for r in gap.records if r.verdicts and r.verdicts[-1] == "correct"]
        rejected = [r for r in judged if {"draft_rejected", "negative_feedback"} & set(r.reasons)]
        if rejected:
            gap.diagnosis = "generation"
            gap.evidence = {
                "records": [r.id for r in rejected],
                "verdicts": rejected[-1].verdicts,
                "checks_failed": rejected[-1].checks_failed,
                "reasons": rejected[-1].reasons,
            }
            return
        gap.diagnosis, gap.evidence = await self._deep_search(gap)

    async def _stale(self, gap: Gap) -> list[dict[str, Any]]:
        cited = sorted({doc for r in gap.records for doc in r.cited})
        changed = await self._store.change_times(gap.tenant, cited)
        found = []
        for record in gap.records:
            for doc in record.cited:
                if doc in changed and changed[doc] > record.created_at:
                    found.append({"document": doc, "changed_at": changed[doc], "answered_at": record.created_at})
        return found

    async def _deep_search(self, gap: Gap) -> tuple[Diagnosis, dict[str, Any]]:
        record = gap.records[-1]
        k = max(record.top_k, 1)
        expected = gap.expected_answer
        # A curator's diagnosis of what the tenant holds (an admin's): every document, whoever asked the question.
        everything = Visibility.everything()
        passages = await self._knowledge.search(gap.tenant, record.question, self._deep_k, visibility=everything)
        scorer = QueryScorer.of(self._model, record.question)
        expected_terms = frozenset(terms(expected)) if expected else frozenset()
        ranked: list[dict[str, Any]] = []
        for rank, passage in enumerate(passages, start=1):
            if expected_terms:
                support = overlap(expected_terms, passage.text)
                answers = support >= EXPECTED_SUPPORT
            else:
                support = scorer.score(passage.title, passage.text, passage.score)
                answers = support >= self._relevant
            ranked.append(
                {
                    "rank": rank,
                    "document": passage.doc_id,
                    "score": round(passage.score, 4),
                    "support": round(support, 4),
                    "answers": answers,
                }
            )
        evidence: dict[str, Any] = {
            "top_k": k,
            "deep_search_k": self._deep_k,
            "judged_by": "expected_answer" if expected_terms else "relevance_scorer",
            "best_passages": sorted(ranked, key=lambda p: p["support"], reverse=True)[:3],
        }
        answering = [p for p in ranked if p["answers"]]
        if not expected_terms:
            # Without an expected answer, what the model read was already the evaluator's to judge.
            answering = [p for p in answering if p["rank"] > k]
        if not answering:
            return "knowledge_gap", evidence
        if answering[0]["rank"] <= k:
            # The expected answer was in what the model read: the model, not retrieval, missed it.
            return "generation", evidence
        evidence["found_at_rank"] = answering[0]["rank"]
        return "ranking", evidence
