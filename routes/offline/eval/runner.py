"""Run a dataset through the real app (in process, over its HTTP interface) and score each answer."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import msgspec
from litestar.testing import AsyncTestClient

from gateway.knowledge import KnowledgeBase
from gateway.query import QueryResponse, RouteResponse, StepEvent
from pipelines.shared import Assess, Evaluate, Generate, PlanHop, Rewrite, Verdict, Visibility
from routes.offline.eval.datasets import Dataset, Question
from routes.offline.eval.metrics import answer_in_prediction, exact_match, f1_score, passage_recall

Mode = Literal["plain", "corrective", "adaptive"]
MODE_REQUEST: dict[Mode, dict[str, Any]] = {
    "plain": {"route": "single_hop", "allow_escalation": False},
    "corrective": {"route": "multi_hop"},
    "adaptive": {"route": "auto"},
}
INGEST_BATCH = 128
UPSTREAM_FAILURES = frozenset({502, 503, 504})


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
    calls_by_step: dict[str, int]  # where the calls went: see calls_by_step()
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


async def first_retrieval(knowledge: KnowledgeBase, top_k: int, tenant: str, question: Question) -> FirstRetrieval:
    """The same in every mode: searched once per question, not once per mode."""
    # An evaluation measures the whole tenant's knowledge: maintenance, not a reader's request.
    passages = await knowledge.search(tenant, question.text, top_k, visibility=Visibility.everything())
    ids = [p.doc_id for p in passages]
    gold = bool(question.gold_doc_ids & set(ids)) if question.gold_doc_ids else None
    return FirstRetrieval(gold, passage_recall(ids, question.gold_doc_ids))


async def ask(
    client: AsyncTestClient[Any], tenant: str, question: Question, mode: Mode, first: FirstRetrieval
) -> Outcome:
    body = {"query": question.text, "tenant": tenant, **MODE_REQUEST[mode]}
    started = time.perf_counter()
    http_response = await client.post("/v1/query", json=body, timeout=600)
    if http_response.status_code in UPSTREAM_FAILURES:
        return failed(question, mode, first, http_response.status_code, time.perf_counter() - started)
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
        calls_by_step=calls_by_step(result.events, result.usage.llm_calls),
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        latency_ms=result.latency_ms,
        stop_reason=result.stop_reason,
        steps=result.steps,
    )


async def route_of(client: AsyncTestClient[Any], tenant: str, question: Question) -> str:
    """The route the router picks for ``question`` against the tenant's store, without answering it."""
    response = await client.post("/v1/route", json={"query": question.text, "tenant": tenant})
    response.raise_for_status()
    return msgspec.json.decode(response.content, type=RouteResponse).route


def failed(question: Question, mode: Mode, first: FirstRetrieval, status: int, seconds: float) -> Outcome:
    """A question the gateway could not answer (the model timed out or was unreachable): scored as no answer,
    so a run on a loaded machine counts it against its mode instead of stopping."""
    return Outcome(
        question_id=question.id,
        kind=question.kind,
        answerable=question.answerable,
        answer="",
        exact_match=0.0,
        f1=0.0,
        answer_contained=0.0,
        passage_recall=0.0 if question.gold_doc_ids else None,
        abstained=False,
        route=str(MODE_REQUEST[mode]["route"]),
        classified_route=str(MODE_REQUEST[mode]["route"]),
        escalated=False,
        first_verdict=None,
        gold_in_first_retrieval=first.gold_found,
        first_retrieval_recall=first.recall,
        llm_calls=0,
        calls_by_step={},
        input_tokens=0,
        output_tokens=0,
        latency_ms=seconds * 1000,
        stop_reason=f"http_{status}",
        steps=[],
    )


def first_verdict(events: Sequence[StepEvent]) -> Verdict | None:
    """The first retrieval verdict: single_hop's LLM-free check, or the corrective evaluator's first round."""
    return next((e.verdict for e in events if isinstance(e, Assess | Evaluate)), None)


def calls_by_step(events: Sequence[StepEvent], total: int) -> dict[str, int]:
    """Where a request's LLM calls went, read from its typed events: grading, hop planning, rewrites and
    generations each say so; the rest (``critics``) went to the groundedness and usefulness checks, whose
    events do not say whether the lexical check settled them without a call (and to the LLM router)."""
    counted = {
        "grade": sum(e.graded for e in events if isinstance(e, Evaluate)),
        "plan_hop": sum(isinstance(e, PlanHop) for e in events),
        "rewrite": sum(isinstance(e, Rewrite) for e in events),
        # Plain RAG's draft in the corrective route is a generation; taking it again or keeping it is no call.
        "generate": sum(
            isinstance(e, Generate) and e.mode in ("answer", "regenerate", "direct", "plain") for e in events
        ),
    }
    return {**counted, "critics": max(0, total - sum(counted.values()))}
