"""Opening the curation cycle in the app lifespan: the store (migrated), the recorder's writer task (before the query
service), the cycle itself and its retention purge (after it). Everything it starts is closed by the lifespan's exit
stack."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import get_args

from gateway.access import Identity
from gateway.curation.evaluator import HybridEvaluator
from gateway.curation.gaps import Diagnoser, Diagnosis
from gateway.curation.records import AnswerRecorder, Count, CountRoute
from gateway.curation.service import Curation
from gateway.curation.store import CurationStore, change_recorder
from gateway.curation.suites import SuiteRunner
from gateway.errors import ProviderUnavailableError
from gateway.knowledge import KnowledgeBase
from gateway.observability import GatewayMetrics, Telemetry
from gateway.providers import LLMClient, open_database
from gateway.query import QueryService
from gateway.settings import Settings
from routes.calibration import Calibration

logger = logging.getLogger(__name__)

PURGE_EVERY_S = 3600.0
DIAGNOSES: tuple[str, ...] = get_args(Diagnosis)
DRAIN_ON_EXIT_S = 2.0


RETRY_MIGRATION_S = 60.0


async def open_curation_store(settings: Settings, stack: AsyncExitStack) -> CurationStore | None:
    """The store, migrated when it can be (:func:`~gateway.providers.database.engine.open_database`)."""
    if not settings.curation.enabled:
        return None
    store = CurationStore.open(settings.curation.database_url.get_secret_value())
    return await open_database(store, stack, migrate=settings.curation.migrate_on_start)


class KnowledgeChanges:
    """The knowledge base's write hook: records which documents changed (the ``stale`` diagnosis) and
    tells the suite runner, which is built after the knowledge base it evaluates."""

    def __init__(self, store: CurationStore) -> None:
        self._record = change_recorder(store)
        self.listener: Callable[[str], None] | None = None

    async def __call__(self, tenant: str, doc_ids: Sequence[str]) -> None:
        await self._record(tenant, doc_ids)
        if self.listener is not None:
            self.listener(tenant)


def _gaps_gauge(metrics: GatewayMetrics) -> Callable[[str, Counter[str]], None]:
    """Open gaps by diagnosis, summed over tenants (metrics never carry tenant labels)."""
    by_tenant: dict[str, Counter[str]] = {}

    def update(tenant: str, counts: Counter[str]) -> None:
        by_tenant[tenant] = counts
        total: Counter[str] = Counter()
        for each in by_tenant.values():
            total.update(each)
        for diagnosis in DIAGNOSES:
            metrics.knowledge_gaps_open.labels(diagnosis).set(total[diagnosis])

    return update


def _counter(metrics: GatewayMetrics | None) -> Count | None:
    if metrics is None:
        return None
    counter = metrics.curation_answers
    return lambda outcome: counter.labels(outcome).inc()


def _route_counter(metrics: GatewayMetrics | None) -> CountRoute | None:
    if metrics is None:
        return None
    counter = metrics.route_outcomes
    return lambda tenant, verdict: counter.labels(tenant, verdict).inc()


def start_recorder(
    settings: Settings, store: CurationStore, knowledge: KnowledgeBase, telemetry: Telemetry, stack: AsyncExitStack
) -> AnswerRecorder:
    """The recorder every answer is handed to as it leaves, with its writer task running. It is opened before the
    query service that reports to it and stopped after it (the exit stack's order): the answers of the last requests
    still reach the store."""
    group = settings.curation
    recorder = AnswerRecorder(
        store,
        knowledge.embed_query,
        queue_size=group.queue_size,
        recent=group.recent_answers,
        count=_counter(telemetry.metrics),
        count_route=_route_counter(telemetry.metrics),
        tracer=telemetry.tracer,
    )
    writer = asyncio.create_task(recorder.run(), name="curation-writer")

    async def stop() -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(recorder.drain(), DRAIN_ON_EXIT_S)
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)

    stack.push_async_callback(stop)
    return recorder


@dataclass(frozen=True, slots=True)
class CurationParts:
    """What the curation cycle runs on, opened before it: its store and recorder, the knowledge base (and its write
    hook) it evaluates and resolves gaps in, the query service that answers its questions again, the identity module
    that makes the readers it asks as, and the app's LLM and telemetry."""

    store: CurationStore
    recorder: AnswerRecorder
    changes: KnowledgeChanges
    knowledge: KnowledgeBase
    queries: QueryService
    identity: Identity
    llm: LLMClient
    telemetry: Telemetry


async def start_curation(
    settings: Settings, parts: CurationParts, calibration: Calibration, stack: AsyncExitStack
) -> Curation:
    """The curation service with the hourly retention purge running; its gap threshold and its diagnoser's relevance
    scorer are ``calibration``'s unless the environment sets them."""
    group, store, knowledge, telemetry = settings.curation, parts.store, parts.knowledge, parts.telemetry
    upper = settings.corrective.thresholds(calibration)["upper"]
    diagnoser = Diagnoser(knowledge, store, deep_k=group.deep_search_k, relevant=upper, model=calibration.relevance)
    evaluator = HybridEvaluator(parts.llm)
    metrics = telemetry.metrics
    suites = SuiteRunner(
        store,
        evaluator,
        telemetry.tracer,
        parts.queries,
        parts.identity,
        set_score=(lambda suite, score: metrics.eval_score.labels(suite).set(score)) if metrics else None,
    )
    parts.changes.listener = suites.schedule
    curation = Curation(
        group,
        store,
        parts.recorder,
        diagnoser,
        evaluator,
        knowledge,
        suites,
        parts.queries,
        parts.identity,
        gap_similarity=group.gap_threshold(calibration),
    )
    if metrics is not None:
        curation.on_gaps = _gaps_gauge(metrics)
    # The first pass (the retention purge, runs a stopped process left running) is done before the gateway serves:
    # a run that died with its process reads failed from the first request on, and the pass's database work does not
    # overlap the first requests. A store that was down at start-up gets it once it is migrated.
    first_done = store.migrated
    if first_done:
        await _maintain_once(curation)
    purger = asyncio.create_task(_maintain(curation, store, first_done=first_done), name="curation-maintenance")

    async def stop() -> None:
        await suites.stop()
        purger.cancel()
        await asyncio.gather(purger, return_exceptions=True)

    stack.push_async_callback(stop)
    return curation


async def _maintain_once(curation: Curation) -> None:
    """One maintenance pass; an outage must not end the loop that calls it: the next hour tries again."""
    try:
        purged = await curation.purge()
        abandoned = await curation.abandon_stale_runs()
    except ProviderUnavailableError as exc:
        logger.warning("curation retention purge failed: %s", exc)
    else:
        if purged:
            logger.info("curation retention purge: %d answer records removed", purged)
        if abandoned:
            logger.warning("evaluation runs left running by a stopped process, stored failed: %d", abandoned)


async def _maintain(curation: Curation, store: CurationStore, *, first_done: bool) -> None:
    """Question texts live GATEWAY_CURATION_RETENTION_DAYS: purged at start-up and every hour, when evaluation runs a
    stopped process left running are stored failed too; a migration that could not run at start-up is retried every
    minute first. ``first_done``: the start-up pass already ran."""
    while not store.migrated and curation.settings.migrate_on_start:
        try:
            await store.migrate()
        except ProviderUnavailableError:
            await asyncio.sleep(RETRY_MIGRATION_S)
        else:
            logger.info("curation store reachable again: migrated")
    if first_done:
        await asyncio.sleep(PURGE_EVERY_S)
    while True:
        await _maintain_once(curation)
        await asyncio.sleep(PURGE_EVERY_S)
