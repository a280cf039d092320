"""The curation store: the curation cycle's rows in the gateway's database (:mod:`gateway.providers.database`).

Every method is one short transaction; callers on the answer path never await it (see
:mod:`gateway.curation.records`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.curation.askers import RunAs
from gateway.curation.models import AnswerRecord, EvalCase, EvalRun, Feedback, Resolution
from gateway.curation.routing import Calibration, RouteOutcome
from gateway.errors import ProviderUnavailableError
from gateway.providers import (
    PROVIDER,
    Database,
    answer_records,
    document_changes,
    eval_cases,
    eval_runs,
    eval_suites,
    feedback,
    resolutions,
    route_calibrations,
    route_outcomes,
)

logger = logging.getLogger(__name__)

DAY_S = 86_400.0


class CurationStore(Database):
    """Typed reads and writes of the curation tables, on the gateway's database (opened, migrated and closed as
    :class:`~gateway.providers.database.engine.Database`)."""

    @asynccontextmanager
    async def _connection(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """One transaction (``write``) or a read; a database error leaves as the gateway's provider error
        (503), translated once, here."""
        try:
            async with self.engine.begin() if write else self.engine.connect() as connection:
                yield connection
        except (SQLAlchemyError, OSError) as exc:
            raise ProviderUnavailableError(f"curation store failed: {exc}", provider=PROVIDER) from exc

    # --- answer records ---------------------------------------------------------------------------

    async def add_records(self, records: Sequence[AnswerRecord]) -> None:
        if not records:
            return
        async with self._connection(write=True) as connection:
            await connection.execute(answer_records.insert(), [r.row() for r in records])

    async def find_record(self, *, response_id: str | None, trace_id: str | None) -> AnswerRecord | None:
        clauses = []
        if response_id:
            clauses.append(answer_records.c.id == response_id)
        if trace_id:
            clauses.append(answer_records.c.trace_id == trace_id)
        if not clauses:
            return None
        async with self._connection(write=False) as connection:
            row = (await connection.execute(select(answer_records).where(or_(*clauses)).limit(1))).mappings().first()
        return AnswerRecord.from_row(row) if row is not None else None

    async def mark_rated_down(self, record_id: str, expected_answer: str | None) -> None:
        async with self._connection(write=True) as connection:
            row = (
                await connection.execute(select(answer_records.c.reasons).where(answer_records.c.id == record_id))
            ).first()
            if row is None:
                return
            reasons = sorted({*row[0], "negative_feedback"})
            values: dict[str, Any] = {"reasons": reasons}
            if expected_answer:
                values["expected_answer"] = expected_answer
            await connection.execute(update(answer_records).where(answer_records.c.id == record_id).values(**values))

    async def open_records(self, tenant: str) -> list[AnswerRecord]:
        query = (
            select(answer_records)
            .where(answer_records.c.tenant == tenant, answer_records.c.resolution_id.is_(None))
            .order_by(answer_records.c.created_at)
        )
        async with self._connection(write=False) as connection:
            rows = (await connection.execute(query)).mappings().all()
        return [AnswerRecord.from_row(row) for row in rows]

    # --- feedback ---------------------------------------------------------------------------------

    async def add_feedback(self, item: Feedback) -> None:
        async with self._connection(write=True) as connection:
            await connection.execute(feedback.insert(), [item.row()])

    async def feedback_of(self, tenant: str) -> list[Feedback]:
        query = select(feedback).where(feedback.c.tenant == tenant).order_by(feedback.c.created_at)
        async with self._connection(write=False) as connection:
            rows = (await connection.execute(query)).mappings().all()
        return [Feedback.from_row(row) for row in rows]

    # --- resolutions ------------------------------------------------------------------------------

    async def add_resolution(self, resolution: Resolution, record_ids: Sequence[str]) -> None:
        """Stores the resolution; when it closed the gap, its records leave the open list in the same transaction."""
        async with self._connection(write=True) as connection:
            await connection.execute(resolutions.insert(), [resolution.row()])
            if resolution.closed and record_ids:
                await connection.execute(
                    update(answer_records)
                    .where(answer_records.c.id.in_(list(record_ids)))
                    .values(resolution_id=resolution.id)
                )

    async def resolutions_of(self, tenant: str, *, closed_only: bool = False) -> list[Resolution]:
        query = select(resolutions).where(resolutions.c.tenant == tenant)
        if closed_only:
            query = query.where(resolutions.c.closed.is_(True))
        async with self._connection(write=False) as connection:
            rows = (await connection.execute(query.order_by(resolutions.c.created_at))).mappings().all()
        return [Resolution.from_row(row) for row in rows]

    # --- document changes (the ``stale`` diagnosis) -----------------------------------------------

    async def documents_changed(self, tenant: str, doc_ids: Sequence[str], at: float | None = None) -> None:
        when = time.time() if at is None else at
        async with self._connection(write=True) as connection:
            await connection.execute(
                delete(document_changes).where(
                    document_changes.c.tenant == tenant, document_changes.c.doc_id.in_(list(doc_ids))
                )
            )
            await connection.execute(
                document_changes.insert(), [{"tenant": tenant, "doc_id": d, "changed_at": when} for d in doc_ids]
            )

    async def change_times(self, tenant: str, doc_ids: Sequence[str]) -> dict[str, float]:
        if not doc_ids:
            return {}
        query = select(document_changes.c.doc_id, document_changes.c.changed_at).where(
            document_changes.c.tenant == tenant, document_changes.c.doc_id.in_(list(doc_ids))
        )
        async with self._connection(write=False) as connection:
            rows = (await connection.execute(query)).all()
        return {doc_id: changed_at for doc_id, changed_at in rows}

    # --- evaluation suites -----------------------------------------------------------------------

    async def add_eval_case(self, case: EvalCase) -> None:
        async with self._connection(write=True) as connection:
            await connection.execute(eval_cases.insert(), [case.row()])

    async def eval_cases(self, tenant: str, suite: str | None = None) -> list[EvalCase]:
        query = select(eval_cases).where(eval_cases.c.tenant == tenant)
        if suite is not None:
            query = query.where(eval_cases.c.suite == suite)
        async with self._connection(write=False) as connection:
            rows = (await connection.execute(query.order_by(eval_cases.c.created_at))).mappings().all()
        return [EvalCase.from_row(row) for row in rows]

    async def suite_run_as(self, tenant: str, suite: str) -> RunAs | None:
        """The user the tenant's suite asks as (None: no user, or the suite has no settings)."""
        query = select(eval_suites.c.run_as).where(eval_suites.c.tenant == tenant, eval_suites.c.suite == suite)
        async with self._connection(write=False) as connection:
            value = (await connection.execute(query)).scalar_one_or_none()
        return RunAs.from_stored(value)

    async def set_suite_run_as(self, tenant: str, suite: str, run_as: RunAs | None) -> None:
        values = {"run_as": None if run_as is None else run_as.stored(), "updated_at": time.time()}
        where = (eval_suites.c.tenant == tenant, eval_suites.c.suite == suite)
        async with self._connection(write=True) as connection:
            await connection.execute(delete(eval_suites).where(*where))
            await connection.execute(eval_suites.insert().values(tenant=tenant, suite=suite, **values))

    async def add_eval_run(self, run: EvalRun) -> None:
        """Stores a run as it starts (``running``); :meth:`update_eval_run` stores it again when it ends."""
        async with self._connection(write=True) as connection:
            await connection.execute(eval_runs.insert(), [run.row()])

    async def update_eval_run(self, run: EvalRun) -> None:
        """Stores what a run ends with (state, score, cases, finish time, error) over the row it started as."""
        values = {
            "state": run.state,
            "score": run.score,
            "cases": run.cases,
            "finished_at": run.finished_at,
            "error": run.error,
        }
        async with self._connection(write=True) as connection:
            await connection.execute(update(eval_runs).where(eval_runs.c.id == run.id).values(**values))

    async def abandon_eval_runs(self, started_before: float, error: str, now: float | None = None) -> int:
        """Stores failed, with ``error``, every run still ``running`` that started before ``started_before``: no
        process is answering it any more. How many there were."""
        query = (
            update(eval_runs)
            .where(eval_runs.c.state == "running", eval_runs.c.started_at < started_before)
            .values(state="failed", error=error, finished_at=time.time() if now is None else now)
        )
        async with self._connection(write=True) as connection:
            result = await connection.execute(query)
        return int(result.rowcount or 0)

    async def eval_run(self, tenant: str, suite: str, run_id: str) -> EvalRun | None:
        """One run of the tenant's suite: None for an unknown id, or one of another tenant or suite."""
        query = select(eval_runs).where(
            eval_runs.c.id == run_id, eval_runs.c.tenant == tenant, eval_runs.c.suite == suite
        )
        async with self._connection(write=False) as connection:
            row = (await connection.execute(query)).mappings().first()
        return EvalRun.from_row(row) if row is not None else None

    async def eval_runs(self, tenant: str, suite: str, limit: int = 50) -> list[EvalRun]:
        query = (
            select(eval_runs)
            .where(eval_runs.c.tenant == tenant, eval_runs.c.suite == suite)
            .order_by(eval_runs.c.started_at.desc())
            .limit(limit)
        )
        async with self._connection(write=False) as connection:
            rows = (await connection.execute(query)).mappings().all()
        return [EvalRun.from_row(row) for row in rows]

    # --- route outcomes and calibrations ---------------------------------------------------------

    async def add_route_outcomes(self, outcomes: Sequence[RouteOutcome]) -> None:
        if not outcomes:
            return
        rows = [
            {
                "id": o.id,
                "tenant": o.tenant,
                "classified_route": o.classified_route,
                "served_route": o.served_route,
                "verdict": o.verdict,
                "p_multi_hop": o.p_multi_hop,
                "disliked": o.disliked,
                "created_at": o.created_at,
                "router_version": o.router_version,
                "named_documents": o.named_documents,
            }
            for o in outcomes
        ]
        async with self._connection(write=True) as connection:
            await connection.execute(route_outcomes.insert(), rows)

    async def mark_route_disliked(self, response_id: str) -> None:
        async with self._connection(write=True) as connection:
            await connection.execute(
                update(route_outcomes).where(route_outcomes.c.id == response_id).values(disliked=True)
            )

    async def route_outcomes(self, tenant: str, since: float) -> list[RouteOutcome]:
        query = (
            select(route_outcomes)
            .where(route_outcomes.c.tenant == tenant, route_outcomes.c.created_at >= since)
            .order_by(route_outcomes.c.created_at)
        )
        async with self._connection(write=False) as connection:
            rows = (await connection.execute(query)).mappings().all()
        return [
            RouteOutcome(
                id=row["id"],
                tenant=row["tenant"],
                classified_route=row["classified_route"],
                served_route=row["served_route"],
                verdict=row["verdict"],
                p_multi_hop=row["p_multi_hop"],
                created_at=float(row["created_at"]),
                disliked=bool(row["disliked"]),
                router_version=row["router_version"],
                named_documents=bool(row["named_documents"]),
            )
            for row in rows
        ]

    async def calibration(self, tenant: str) -> Calibration | None:
        """The tenant's applied calibration (its threshold and named-documents rule as both current and proposed), if
        an operator set one, with the router version it was made for (None for one made before versions were
        recorded)."""
        query = select(route_calibrations).where(route_calibrations.c.tenant == tenant)
        async with self._connection(write=False) as connection:
            row = (await connection.execute(query)).mappings().first()
        if row is None:
            return None
        threshold = float(row["multi_hop_threshold"])
        rule = bool(row["named_documents"])
        return Calibration(
            tenant,
            int(row["outcomes"]),
            threshold,
            threshold,
            row["accuracy_before"],
            row["accuracy_after"],
            row["router_version"],
            current_named_documents=rule,
            named_documents=rule,
            named_outcomes=int(row["named_outcomes"]),
        )

    async def set_calibration(self, calibration: Calibration) -> None:
        values = {
            "multi_hop_threshold": calibration.multi_hop_threshold,
            "outcomes": calibration.outcomes,
            "accuracy_before": calibration.accuracy_before,
            "accuracy_after": calibration.accuracy_after,
            "calibrated_at": time.time(),
            "router_version": calibration.router_version,
            "named_documents": calibration.named_documents,
            "named_outcomes": calibration.named_outcomes,
        }
        tenant = calibration.tenant
        async with self._connection(write=True) as connection:
            await connection.execute(delete(route_calibrations).where(route_calibrations.c.tenant == tenant))
            await connection.execute(route_calibrations.insert().values(tenant=tenant, **values))

    # --- retention --------------------------------------------------------------------------------

    async def purge(self, retention_days: int, now: float | None = None) -> int:
        """Deletes answer records, feedback and resolutions older than the retention (with their question texts)."""
        cutoff = (time.time() if now is None else now) - retention_days * DAY_S
        async with self._connection(write=True) as connection:
            gone = await connection.execute(delete(answer_records).where(answer_records.c.created_at < cutoff))
            await connection.execute(delete(feedback).where(feedback.c.created_at < cutoff))
            await connection.execute(delete(resolutions).where(resolutions.c.created_at < cutoff))
            await connection.execute(delete(route_outcomes).where(route_outcomes.c.created_at < cutoff))
        return int(gone.rowcount or 0)


def change_recorder(store: CurationStore) -> Callable[[str, Sequence[str]], Awaitable[None]]:
    """The knowledge base's write hook (for the ``stale`` diagnosis): a store outage never fails an ingest."""

    async def record(tenant: str, doc_ids: Sequence[str]) -> None:
        try:
            await store.documents_changed(tenant, doc_ids)
        except ProviderUnavailableError as exc:
            logger.warning("curation store: document changes of tenant %s not recorded: %s", tenant, exc)

    return record
