"""Evaluation suites per tenant: stored cases run on demand and, in the background, after every
change to the tenant's knowledge, so a fix that breaks another answer shows up without anyone asking.

A run answers each case fresh (both answer caches bypassed), scores it with the hybrid evaluator,
keeps the per-case breakdown in the run's history, sets ``gateway_eval_score{suite}`` and is traced
as one span (``curation.eval_suite``). Background runs are one per tenant at a time: changes arriving
while a tenant's suites run schedule one more run after it, not one each.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict

from opentelemetry.trace import Tracer

from gateway.curation.evaluator import HybridEvaluator, Rule
from gateway.curation.models import EvalRun
from gateway.curation.store import CurationStore
from gateway.errors import GatewayError, NotFoundError
from gateway.query.schemas import QueryRequest
from gateway.query.service import QueryService

logger = logging.getLogger(__name__)

SetScore = Callable[[str, float], None]  # (suite, score)


class SuiteRunner:
    def __init__(
        self,
        store: CurationStore,
        evaluator: HybridEvaluator,
        tracer: Tracer,
        set_score: SetScore | None = None,
    ) -> None:
        self._store = store
        self._evaluator = evaluator
        self._tracer = tracer
        self._set_score = set_score or (lambda _suite, _score: None)
        self._queries: QueryService | None = None
        self._running: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()

    def attach(self, queries: QueryService) -> None:
        self._queries = queries

    async def run(self, tenant: str, suite: str, trigger: str = "manual") -> EvalRun:
        if self._queries is None:
            raise RuntimeError("SuiteRunner.attach(query_service) was not called")
        cases = await self._store.eval_cases(tenant, suite)
        if not cases:
            raise NotFoundError(f"Tenant {tenant!r} has no evaluation suite {suite!r}.")
        started = time.time()
        attributes = {"gateway.tenant": tenant, "gateway.eval.suite": suite, "gateway.eval.trigger": trigger}
        with self._tracer.start_as_current_span("curation.eval_suite", attributes=attributes) as span:
            results = []
            for case in cases:
                response = await self._queries.answer_fresh(QueryRequest(query=case.question, tenant=tenant))
                rules = [Rule(**rule) for rule in case.rules]
                score = await self._evaluator.score(case.question, response.answer, rules, case.reference or "")
                results.append(
                    {"case_id": case.id, "question": case.question, "answer": response.answer, **asdict(score)}
                )
            total = round(sum(r["score"] for r in results) / len(results), 4)
            span.set_attribute("gateway.eval.score", total)
            span.set_attribute("gateway.eval.cases", len(results))
        run = EvalRun(
            id=f"run_{uuid.uuid4().hex}",
            tenant=tenant,
            suite=suite,
            trigger=trigger,
            score=total,
            cases=results,
            started_at=started,
            finished_at=time.time(),
        )
        await self._store.add_eval_run(run)
        self._set_score(suite, total)
        return run

    def schedule(self, tenant: str) -> None:
        """After a knowledge change: run the tenant's suites in the background (coalesced per tenant)."""
        if tenant in self._running:
            self._again.add(tenant)
            return
        self._running[tenant] = asyncio.create_task(self._run_all(tenant), name=f"eval-suites-{tenant}")

    async def _run_all(self, tenant: str) -> None:
        try:
            while True:
                self._again.discard(tenant)
                suites = sorted({case.suite for case in await self._store.eval_cases(tenant)})
                for suite in suites:
                    await self.run(tenant, suite, trigger="knowledge_change")
                if tenant not in self._again:
                    return
        except GatewayError as exc:
            logger.warning("evaluation suites of tenant %s after a knowledge change failed: %s", tenant, exc)
        finally:
            self._running.pop(tenant, None)

    async def idle(self) -> None:
        """Waits for the background runs (tests; shutdown)."""
        while self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def stop(self) -> None:
        for task in self._running.values():
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
