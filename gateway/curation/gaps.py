"""Open questions grouped into gaps, and each gap's diagnosis with the evidence for it.

Questions are grouped greedily by the cosine of their embeddings (the app's embeddings model, the
vectors recorded with them) against each group's centroid, within one visibility: questions asked under different
visibility keys never share a gap, because what is missing depends on what the asker can see (one reader's
``knowledge_gap`` is another's ``ranking``). A gap's id is its first record's id, so it stays the same while
questions join it; a tenant whose askers all see the same documents groups exactly as without visibilities.

A gap is diagnosed as its askers see the store: every search runs under the visibility recorded with its questions
(:meth:`gateway.curation.askers.Asker.visibility`), so its evidence names only documents they could read. The
diagnosis says what a curator should fix, checked in this order:

- ``stale``: an answer cited a document that changed after it was given (and that its asker may still read);
- ``generation``: the top-k the answer read held the expected answer a user gave with their feedback
  (or, without one, the evidence was judged Correct), yet a draft was rejected or it was rated down;
- ``ranking``: a deeper search finds a passage that answers it (holds the expected answer from the
  feedback, or the relevance scorer judges it relevant) below the top-k the answer read;
- ``restricted``: nothing the askers may read answers it, but the tenant holds documents that do: an access
  decision (grant the askers' groups access, or leave it), not a missing document. Decided by one unrestricted
  search; its evidence counts those passages and documents and names the access tags that hold them, never a
  document id, title or text outside the askers' visibility;
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
from pipelines.shared import Passage, QueryScorer, RelevanceModel, Visibility, overlap, terms

Diagnosis = Literal["knowledge_gap", "ranking", "generation", "stale", "restricted"]
# A passage "holds" the expected answer when it has this share of the answer's content terms.
EXPECTED_SUPPORT = 0.6
MAX_EXAMPLES = 5


@dataclass(slots=True)
class Gap:
    id: str
    tenant: str
    records: list[AnswerRecord]
    visibility: Visibility  # the one every question of the gap was asked under, and its diagnosis searches
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


def cluster(records: Sequence[AnswerRecord], threshold: float, tenant_open: Visibility) -> list[Gap]:
    """Greedy single pass in time order within each visibility: each record joins the most similar gap of its own
    visibility above ``threshold``. ``tenant_open``: the visibility of records from before askers were recorded. The
    gaps come in the order their first records were asked."""
    by_view: dict[str, list[AnswerRecord]] = {}
    views: dict[str, Visibility] = {}
    for record in records:
        visibility = record.asker.visibility(tenant_open)
        by_view.setdefault(visibility.key(), []).append(record)
        views.setdefault(visibility.key(), visibility)
    position = {record.id: i for i, record in enumerate(records)}
    gaps = [gap for key, view in by_view.items() for gap in _cluster_one_view(view, views[key], threshold)]
    return sorted(gaps, key=lambda g: position[g.records[0].id])


def _cluster_one_view(records: Sequence[AnswerRecord], visibility: Visibility, threshold: float) -> list[Gap]:
    gaps: list[Gap] = []
    centroids: list[list[float]] = []
    for record in records:
        best, best_similarity = -1, threshold
        for index, centroid in enumerate(centroids):
            similarity = _cosine(record.embedding, centroid)
            if similarity >= best_similarity:
                best, best_similarity = index, similarity
        if best < 0:
            gaps.append(Gap(id=f"gap_{record.id}", tenant=record.tenant, records=[record], visibility=visibility))
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
        """The cited documents changed since they were cited, of those the askers may still read: a change of access
        is a change too, and one that took a document from them is not theirs to see (the deep search then tells)."""
        cited = sorted({doc for r in gap.records for doc in r.cited})
        changed = await self._store.change_times(gap.tenant, cited)
        if changed:
            readable = await self._knowledge.readable(gap.tenant, sorted(changed), gap.visibility)
            changed = {doc: at for doc, at in changed.items() if doc in readable}
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
        expected_terms = frozenset(terms(expected)) if expected else frozenset()
        judge = _Judge(QueryScorer.of(self._model, record.question), expected_terms, self._relevant)
        vector = await self._knowledge.embed_query(record.question)
        # What the askers could find: their recorded visibility, never more, so the evidence names their documents.
        passages = await self._knowledge.search(
            gap.tenant, record.question, self._deep_k, visibility=gap.visibility, vector=vector
        )
        ranked: list[dict[str, Any]] = []
        for rank, passage in enumerate(passages, start=1):
            support, answers = judge(passage)
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
            "judged_by": judge.by,
            "best_passages": sorted(ranked, key=lambda p: p["support"], reverse=True)[:3],
        }
        answering = [p for p in ranked if p["answers"]]
        if not expected_terms:
            # Without an expected answer, what the model read was already the evaluator's to judge.
            answering = [p for p in answering if p["rank"] > k]
        if not answering:
            outside = await self._outside(gap, record.question, vector, judge)
            if outside is not None:
                evidence["outside_visibility"] = outside
                return "restricted", evidence
            return "knowledge_gap", evidence
        if answering[0]["rank"] <= k:
            # The expected answer was in what the model read: the model, not retrieval, missed it.
            return "generation", evidence
        evidence["found_at_rank"] = answering[0]["rank"]
        return "ranking", evidence

    async def _outside(self, gap: Gap, question: str, vector: list[float], judge: _Judge) -> dict[str, Any] | None:
        """Whether the tenant holds an answer outside the askers' visibility (one unrestricted search, a curator's):
        None when it holds none (or the askers see everything already). Said in counts and access tags only: which
        documents, and what they say, is exactly what the askers may not read."""
        if gap.visibility.unrestricted:
            return None
        everything = Visibility.everything()
        passages = await self._knowledge.search(
            gap.tenant, question, self._deep_k, visibility=everything, vector=vector
        )
        answering = [p for p in passages if judge(p)[1]]
        if not answering:
            return None
        tags = await self._knowledge.document_access(gap.tenant, [p.doc_id for p in answering])
        closed = {doc: held for doc, held in tags.items() if not gap.visibility.allows(held)}
        hidden = [p for p in answering if p.doc_id in closed]
        if not hidden:
            return None  # the askers may read each of them (below their own search's depth): not an access matter
        held_by = sorted({tag for held in closed.values() for tag in held})
        return {"passages": len(hidden), "documents": len(closed), "access": held_by}


@dataclass(frozen=True, slots=True)
class _Judge:
    """Whether a passage answers the gap's question: it holds the expected answer from the feedback, or without one
    the relevance scorer takes it to answer."""

    scorer: QueryScorer
    expected_terms: frozenset[str]
    relevant: float

    @property
    def by(self) -> str:
        return "expected_answer" if self.expected_terms else "relevance_scorer"

    def __call__(self, passage: Passage) -> tuple[float, bool]:
        if self.expected_terms:
            support = overlap(self.expected_terms, passage.text)
            return support, support >= EXPECTED_SUPPORT
        support = self.scorer.score(passage.title, passage.text, passage.score)
        return support, support >= self.relevant
