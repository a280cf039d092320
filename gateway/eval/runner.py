"""Run a dataset through the real app (in process, over its HTTP interface) and score each answer."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import msgspec
from litestar.testing import AsyncTestClient

from gateway.eval.datasets import Dataset, Question
from gateway.eval.metrics import answer_in_prediction, exact_match, f1_score, passage_recall
from gateway.schemas import QueryResponse
from gateway.state import Services
from gateway.steps import StepEvent
from pipelines.shared.events import Assess, Evaluate
from pipelines.shared.relevance import Verdict

Mode = Literal["plain", "corrective", "adaptive"]
MODE_REQUEST: dict[Mode, dict[str, Any]] = {
    "plain": {"route": "single_hop", "allow_escalation": False},
    "corrective": {"route": "multi_hop"},
    "adaptive": {"route": "auto"},
}
INGEST_BATCH = 128


@dataclass(slots=True)
class Outcome:
    question_id: str
    kind: str
    answerable: bool
    answer: str
    exact_match: float
    f1: float
    answer_contained: float
    passage_recall: float | None
    abstained: bool
    route: str
    classified_route: str
    escalated: bool
    first_verdict: Verdict | None
    gold_in_first_retrieval: bool | None
    first_retrieval_recall: float | None
    llm_calls: int
    input_tokens: int
    output_tokens: int
    latency_ms: float
    stop_reason: str | None
    steps: list[str]  # the text form, for whoever reads the results file

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def ingest(client: AsyncTestClient[Any], tenant: str, dataset: Dataset) -> tuple[int, float]:
    started = time.perf_counter()
    chunks = 0
    for start in range(0, len(dataset.documents), INGEST_BATCH):
        batch = dataset.documents[start : start + INGEST_BATCH]
        response = await client.post("/v1/documents", json={"tenant": tenant, "documents": batch})
        response.raise_for_status()
        chunks += int(response.json()["chunks"])
    return chunks, time.perf_counter() - started


@dataclass(frozen=True, slots=True)
class FirstRetrieval:
    """What plain RAG's top-k holds: the yardstick for "where retrieval fails" in every mode."""

    gold_found: bool | None
    recall: float | None

    @property
    def complete(self) -> bool:
        """Every gold passage was in the top-k; the report's "missed" slice is the rest."""
        return self.recall == 1.0


async def first_retrieval(services: Services, tenant: str, question: Question) -> FirstRetrieval:
    """The same in every mode: searched once per question, not once per mode."""
    passages = await services.knowledge.search(tenant, question.text, services.settings.retrieval.default_top_k)
    ids = [p.doc_id for p in passages]
    gold = bool(question.gold_doc_ids & set(ids)) if question.gold_doc_ids else None
    return FirstRetrieval(gold, passage_recall(ids, question.gold_doc_ids))


async def ask(
    client: AsyncTestClient[Any], tenant: str, question: Question, mode: Mode, first: FirstRetrieval
) -> Outcome:
    body = {"query": question.text, "tenant": tenant, **MODE_REQUEST[mode]}
    http_response = await client.post("/v1/query", json=body, timeout=600)
    http_response.raise_for_status()
    result = msgspec.json.decode(http_response.content, type=QueryResponse)
    answer = "" if result.abstained else result.answer
    return Outcome(
        question_id=question.id,
        kind=question.kind,
        answerable=question.answerable,
        answer=result.answer,
        exact_match=exact_match(answer, question.answers) if question.answerable else 0.0,
        f1=f1_score(answer, question.answers) if question.answerable else 0.0,
        answer_contained=answer_in_prediction(answer, question.answers) if question.answerable else 0.0,
        passage_recall=passage_recall([e.id for e in result.evidence], question.gold_doc_ids),
        abstained=result.abstained,
        route=result.route,
        classified_route=result.classified_route,
        escalated=result.escalated_from is not None,
        first_verdict=first_verdict(result.events),
        gold_in_first_retrieval=first.gold_found,
        first_retrieval_recall=first.recall,
        llm_calls=result.usage.llm_calls,
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        latency_ms=result.latency_ms,
        stop_reason=result.stop_reason,
        steps=result.steps,
    )


def first_verdict(events: Sequence[StepEvent]) -> Verdict | None:
    """The first retrieval verdict: single_hop's LLM-free check, or the corrective evaluator's first round."""
    return next((e.verdict for e in events if isinstance(e, Assess | Evaluate)), None)
