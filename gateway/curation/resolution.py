"""Resolution with proof: verified documents in, the gap's questions re-run, before/after scored.

The documents go in through the knowledge base (which bumps the tenant's knowledge version, so no answer cached
before them is served again); each question is re-run with both answer caches bypassed, on the route that answered
it and in the view it was asked in (as its asker: the visibility recorded with it, so a fix is proven on what that
reader can see, not on documents closed to them); the hybrid evaluator scores the recorded answer and the new one with
the same rules and reference. The gap closes only when the mean score rises; either way both answers and both
breakdowns are kept.

Each case keeps the view it ran in (``visibility``, its key, and ``visible_tags``, the tags themselves: what the
training pairs filter its ids by) and names only documents that view may read now: what the first answer read is
checked against the documents' current access (it may have changed since), and so is what the new one cited.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from gateway.access import Reader
from gateway.curation.evaluator import HybridEvaluator, Rule
from gateway.curation.gaps import Gap
from gateway.curation.models import AnswerRecord, Resolution
from gateway.curation.store import CurationStore
from gateway.knowledge import KnowledgeBase, NewDocument
from gateway.query import QueryRequest, QueryService
from pipelines.shared import Visibility

MAX_QUESTIONS = 5  # re-runs per resolution: the gap's most recent distinct questions


def _latest_per_question(records: Sequence[AnswerRecord], tenant_open: Visibility) -> list[AnswerRecord]:
    """The latest record of each question and view: one question asked by readers who see different documents is
    re-run once in each view."""
    latest: dict[tuple[str, str], AnswerRecord] = {}
    for record in records:
        key = (record.question, record.asker.key(tenant_open))
        latest.pop(key, None)  # re-inserted last: the most recently asked come last
        latest[key] = record
    return list(latest.values())[-MAX_QUESTIONS:]


async def resolve(
    gap: Gap,
    documents: Sequence[NewDocument],
    rules: list[Rule],
    *,
    knowledge: KnowledgeBase,
    queries: QueryService,
    evaluator: HybridEvaluator,
    store: CurationStore,
    nobody: Reader,
) -> Resolution:
    """``nobody``: the identity module's reader of no user, whose tenant-open view questions recorded before readers
    were known are re-run in."""
    await knowledge.ingest(gap.tenant, documents)
    reference = "\n\n".join(f"{d.title}\n{d.text}" if d.title else d.text for d in documents)
    cases: list[dict[str, Any]] = []
    views: list[Visibility] = []
    for record in _latest_per_question(gap.records, nobody.visibility):
        before = await evaluator.score(record.question, record.answer, rules, reference)
        request = QueryRequest(query=record.question, tenant=gap.tenant, route=_rerun_route(record.route))
        asker = record.asker.reader(nobody)
        fresh = await queries.answer_fresh(request, reader=asker)
        after = await evaluator.score(record.question, fresh.answer, rules, reference)
        groups = asker.visibility.groups
        views.append(asker.visibility)
        cases.append(
            {
                "question": record.question,
                "user_id": asker.user_id,
                "visibility": asker.visibility.key(),
                "visible_tags": None if groups is None else sorted(groups),
                "before": {"answer": record.answer, "route": record.route, **before.breakdown()},
                "after": {
                    "answer": fresh.answer,
                    "route": fresh.route,
                    "trace_id": fresh.trace_id,
                    **after.breakdown(),
                },
                "before_documents": [asdict(d) for d in record.documents],
                "after_documents": [s.id for s in fresh.sources],
            }
        )
    await _within_views(knowledge, gap.tenant, cases, views)
    score_before = _mean(c["before"]["score"] for c in cases)
    score_after = _mean(c["after"]["score"] for c in cases)
    resolution = Resolution(
        id=f"res_{uuid.uuid4().hex}",
        tenant=gap.tenant,
        gap_id=gap.id,
        document_ids=[d.id for d in documents],
        rules=[asdict(rule) for rule in rules],
        cases=cases,
        score_before=score_before,
        score_after=score_after,
        closed=score_after > score_before,
        created_at=time.time(),
    )
    await store.add_resolution(resolution, [r.id for r in gap.records])
    return resolution


async def _within_views(
    knowledge: KnowledgeBase, tenant: str, cases: list[dict[str, Any]], views: Sequence[Visibility]
) -> None:
    """Leaves in each case only the documents its view may read by their current access."""
    for case, view in zip(cases, views, strict=True):
        named = [*(d["id"] for d in case["before_documents"]), *case["after_documents"]]
        readable = await knowledge.readable(tenant, named, view)
        case["before_documents"] = [d for d in case["before_documents"] if d["id"] in readable]
        case["after_documents"] = [d for d in case["after_documents"] if d in readable]


def _rerun_route(route: str) -> Any:
    """The route that answered (``auto`` for anything the request schema does not name)."""
    return route if route in ("direct", "single_hop", "multi_hop") else "auto"


def _mean(values: Any) -> float:
    items = list(values)
    return round(sum(items) / len(items), 4) if items else 0.0
