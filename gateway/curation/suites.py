"""Evaluation suites per tenant: stored cases run on request and, in the background, after every change to the
tenant's knowledge, so a fix that breaks another answer shows up without anyone asking.

A run asks its cases as a reader: the suite's ``run_as`` user (stored with the suite, or named by the run request for
that run), made by the identity module so it sees what that user would, or, without one, the reader of no user
(tenant-open only). Each run keeps whom it ran as.

Every run answers in a background task, never in an HTTP request: with the local model one answer takes tens of
seconds, so a suite of a few cases would hold a request for minutes. A run is stored ``running`` as it starts (a
request to run a suite is answered with it at once, 202, and polled by its id), then stored again ``done`` with its
score and per-case breakdown, or ``failed`` with the reason: a case that could not be answered or scored (the
gateway's error, kept with the cases scored before it), or the gateway shutting down (the run is cancelled). Each case
is answered fresh (both answer caches bypassed) and scored with the hybrid evaluator; a run that is done sets
``gateway_eval_score{suite}``; each run is traced as one span (``curation.eval_suite``).

Overlap. A manual run of a tenant's suite is not started twice: a request while one of the same tenant and suite, asking
as the same user, is running in this process gets that run back. Across replicas two manual runs may overlap (each is
complete on its own; the second costs its answers), since a replica cannot tell another's run that is still going from
one whose process died without shutting down; such a run stays ``running`` in the store until the hourly maintenance
stores it failed (``GATEWAY_CURATION_EVAL_RUN_MAX_S`` after it started). Knowledge-change runs are one per tenant at a
time: changes arriving while a tenant's suites run schedule one more run after it, not one each. A knowledge-change run
and a manual run of the same suite may overlap: the former measures the knowledge the change left, whenever it comes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from opentelemetry.trace import Tracer

from gateway.access import Identity, Reader
from gateway.curation.askers import RunAs
from gateway.curation.evaluator import HybridEvaluator, Rule
from gateway.curation.models import EvalCase, EvalRun
from gateway.curation.store import CurationStore
from gateway.errors import GatewayError, NotFoundError
from gateway.query import QueryRequest, QueryService

logger = logging.getLogger(__name__)

SetScore = Callable[[str, float], None]  # (suite, score)

MAX_ERROR_CHARS = 500  # a failed run's reason is a line for a curator, not a log
# At shutdown, how long storing a cancelled run as failed may take: the shutdown must not wait on a database that
# does not answer (the run then stays ``running`` in the store).
STOP_WRITE_S = 2.0
INTERRUPTED = "interrupted: the gateway shut down before the run finished"
ABANDONED = "abandoned: the process answering it stopped without shutting down"


@dataclass(frozen=True, slots=True)
class _ManualRun:
    """A manual run going in this process: the run as stored when it started (``running``), which a second request
    for the same suite gets back, and the task answering it."""

    run: EvalRun
    task: asyncio.Task[None]


class ShuttingDownError(GatewayError):
    """The gateway is stopping: a run started now would be cancelled before it answered anything."""

    status_code = 503
    title = "Shutting down"


def _reason(case: EvalCase, exc: GatewayError) -> str:
    """A failed run's reason, for a curator: which case, and the gateway's error on it, kept to a line."""
    reason = f"case {case.id}: {exc.title}: {exc.detail}"
    return reason if len(reason) <= MAX_ERROR_CHARS else reason[: MAX_ERROR_CHARS - 1] + "…"


class SuiteRunner:
    """Starts, tracks and stops a tenant's evaluation runs (see the module's docstring for what overlaps)."""

    def __init__(
        self,
        store: CurationStore,
        evaluator: HybridEvaluator,
        tracer: Tracer,
        queries: QueryService,
        identity: Identity,
        set_score: SetScore | None = None,
    ) -> None:
        """``queries`` answers the cases; ``identity`` makes the reader each run asks as."""
        self._store = store
        self._evaluator = evaluator
        self._tracer = tracer
        self._set_score = set_score or (lambda _suite, _score: None)
        self._queries = queries
        self._identity = identity
        # The background tasks, kept here so that they are not garbage-collected while they run: knowledge-change
        # runs by tenant, manual runs by (tenant, suite). Each is removed when its task is done, by a callback: a task
        # cancelled before its first step never runs its own ``finally``.
        self._running: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._manual: dict[tuple[str, str, RunAs | None], _ManualRun] = {}
        self._began: set[str] = set()  # manual runs whose task got to its first step (the others stored no end)
        # One per (tenant, suite), held from the check for a run already going to its registration: two requests at
        # once start one run, and a slow store holds up only that suite's requests.
        self._starting: dict[tuple[str, str], asyncio.Lock] = {}
        self._closed = False

    async def start(self, tenant: str, suite: str, run_as: RunAs | None = None) -> EvalRun:
        """Starts a manual run of the tenant's suite in the background and returns it as stored (``running``). While a
        manual run of the same tenant, suite and user is going in this process, that run is returned instead: two
        requests (a double click, a client's retry) cost one run. ``run_as``: the user to ask as for this run (else
        the suite's own). A suite without cases is a 404; a store that is down, a 503."""
        lock = self._starting.setdefault((tenant, suite), asyncio.Lock())
        async with lock:
            if self._closed:
                raise ShuttingDownError("The gateway is shutting down: run the suite again once it is back.")
            if run_as is None:
                run_as = await self._store.suite_run_as(tenant, suite)
            key = (tenant, suite, run_as)
            current = self._manual.get(key)
            if current is not None:
                return current.run
            cases = await self._cases(tenant, suite)
            run = await self._begin(tenant, suite, "manual", run_as)
            task = asyncio.create_task(self._manual_run(run, cases), name=f"eval-suite-{tenant}-{suite}")
            self._manual[key] = _ManualRun(run, task)
            task.add_done_callback(lambda done: self._forget_manual(key, done))
        return run

    async def get(self, tenant: str, suite: str, run_id: str) -> EvalRun:
        """One run of the tenant's suite, in whatever state it is; another tenant's is as unknown as a wrong id."""
        run = await self._store.eval_run(tenant, suite, run_id)
        if run is None:
            raise NotFoundError(f"Tenant {tenant!r} has no run {run_id!r} of evaluation suite {suite!r}.")
        return run

    def schedule(self, tenant: str) -> None:
        """After a knowledge change: run the tenant's suites in the background (coalesced per tenant). Nothing once
        the gateway is stopping: the run would be cancelled before it answered."""
        if self._closed:
            return
        if tenant in self._running:
            self._again.add(tenant)
            return
        task = asyncio.create_task(self._run_all(tenant), name=f"eval-suites-{tenant}")
        self._running[tenant] = task
        task.add_done_callback(lambda done: self._forget_change_run(tenant, done))

    async def idle(self) -> None:
        """Waits until no run is going, those started meanwhile included (tests)."""
        while pending := [task for task in self._tasks() if not task.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    async def stop(self) -> None:
        """Cancels the runs still going (shutdown): each stores itself failed (interrupted); a manual run cancelled
        before its task took its first step is stored so here. No run starts after this."""
        self._closed = True
        # Read before the cancel: a task cancelled before its first step never takes it.
        unstarted = [m.run for m in self._manual.values() if m.run.id not in self._began]
        tasks = self._tasks()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for run in unstarted:
            await self._store_interrupted(run, [])

    def _tasks(self) -> list[asyncio.Task[None]]:
        return [*self._running.values(), *(manual.task for manual in self._manual.values())]

    def _forget_manual(self, key: tuple[str, str, RunAs | None], task: asyncio.Task[None]) -> None:
        current = self._manual.get(key)
        if current is not None and current.task is task:
            del self._manual[key]
            self._began.discard(current.run.id)

    def _forget_change_run(self, tenant: str, task: asyncio.Task[None]) -> None:
        if self._running.get(tenant) is task:
            del self._running[tenant]

    async def _cases(self, tenant: str, suite: str) -> list[EvalCase]:
        cases = await self._store.eval_cases(tenant, suite)
        if not cases:
            raise NotFoundError(f"Tenant {tenant!r} has no evaluation suite {suite!r}.")
        return cases

    def _reader(self, run_as: RunAs | None) -> Reader:
        """Whom a run asks as: ``run_as`` as the identity module makes that user, or its reader of no user."""
        return self._identity.nobody if run_as is None else run_as.reader(self._identity)

    async def _begin(self, tenant: str, suite: str, trigger: str, run_as: RunAs | None) -> EvalRun:
        """The run as it starts, stored: from now on it is in the suite's history and can be polled."""
        run = EvalRun(
            id=f"run_{uuid.uuid4().hex}",
            tenant=tenant,
            suite=suite,
            trigger=trigger,
            score=None,
            cases=[],
            started_at=time.time(),
            finished_at=None,
            state="running",
            run_as=run_as,
        )
        await self._store.add_eval_run(run)
        return run

    async def _manual_run(self, run: EvalRun, cases: list[EvalCase]) -> None:
        self._began.add(run.id)
        try:
            await self._execute(run, cases)
        except GatewayError as exc:  # the store, storing the run's end: nothing is left to tell but the log
            logger.warning("evaluation run %s of suite %s: its end was not stored: %s", run.id, run.suite, exc)

    async def _run_all(self, tenant: str) -> None:
        try:
            while True:
                self._again.discard(tenant)
                cases = await self._store.eval_cases(tenant)
                for suite in sorted({case.suite for case in cases}):
                    run_as = await self._store.suite_run_as(tenant, suite)
                    run = await self._begin(tenant, suite, "knowledge_change", run_as)
                    await self._execute(run, [case for case in cases if case.suite == suite])
                if tenant not in self._again:
                    return
        except GatewayError as exc:  # the store's: the suites left wait for the next change
            logger.warning("evaluation suites of tenant %s after a knowledge change failed: %s", tenant, exc)

    async def _execute(self, run: EvalRun, cases: list[EvalCase]) -> EvalRun:
        """Answers and scores every case and stores the run's end: ``done``, or ``failed`` with the reason when a case
        raised (the gateway's error; any other is a bug, logged with its traceback) or the run was cancelled (the
        cancellation goes on). Raises the store's error when the end cannot be stored."""
        queries = self._queries
        reader = self._reader(run.run_as)
        attributes = {
            "gateway.tenant": run.tenant,
            "routes.offline.eval.suite": run.suite,
            "routes.offline.eval.trigger": run.trigger,
            "routes.offline.eval.run": run.id,
        }
        results: list[dict[str, Any]] = []
        case = cases[0]
        try:
            # An error leaving the span is recorded on it (its status ERROR) before it is handled below.
            with self._tracer.start_as_current_span("curation.eval_suite", attributes=attributes) as span:
                for case in cases:
                    request = QueryRequest(query=case.question, tenant=run.tenant)
                    response = await queries.answer_fresh(request, reader=reader)
                    rules = [Rule(**rule) for rule in case.rules]
                    score = await self._evaluator.score(case.question, response.answer, rules, case.reference or "")
                    results.append(
                        {"case_id": case.id, "question": case.question, "answer": response.answer, **asdict(score)}
                    )
                total = round(sum(r["score"] for r in results) / len(results), 4)
                span.set_attribute("routes.offline.eval.score", total)
                span.set_attribute("routes.offline.eval.cases", len(results))
        except GatewayError as exc:
            logger.warning("evaluation run %s of suite %s failed at case %s: %s", run.id, run.suite, case.id, exc)
            return await self._fail(run, results, _reason(case, exc))
        except asyncio.CancelledError:
            await self._store_interrupted(run, results)
            raise
        except Exception:  # a bug: the background task is the last place to tell, and the run must not stay running
            logger.exception("evaluation run %s of suite %s broke at case %s", run.id, run.suite, case.id)
            return await self._fail(run, results, f"case {case.id}: internal error (the gateway's log has the details)")
        done = replace(run, state="done", score=total, cases=results, finished_at=time.time())
        await self._store.update_eval_run(done)
        self._set_score(run.suite, total)
        return done

    async def _fail(self, run: EvalRun, results: list[dict[str, Any]], error: str) -> EvalRun:
        """Stores the run failed, with the cases scored before it failed."""
        failed = replace(run, state="failed", cases=results, finished_at=time.time(), error=error)
        await self._store.update_eval_run(failed)
        return failed

    async def _store_interrupted(self, run: EvalRun, results: list[dict[str, Any]]) -> None:
        try:
            async with asyncio.timeout(STOP_WRITE_S):
                await self._fail(run, results, INTERRUPTED)
        except (TimeoutError, GatewayError) as exc:
            logger.warning("evaluation run %s interrupted at shutdown stays 'running' in the store: %s", run.id, exc)
