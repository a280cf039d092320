"""The curation cycle's operations, over the store and the app's clients (one per app, in the lifespan)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from gateway.access import Identity, Reader
from gateway.curation.askers import AskedBy, Asker
from gateway.curation.evaluator import HybridEvaluator, Rule
from gateway.curation.gaps import Diagnoser, Gap, cluster
from gateway.curation.models import EvalCase, Feedback, Rating, Resolution
from gateway.curation.records import AnswerRecorder, to_record
from gateway.curation.resolution import resolve
from gateway.curation.routing import Calibration, RouteReport, recalibrate_tenant, route_report
from gateway.curation.store import CurationStore
from gateway.curation.suites import ABANDONED, SuiteRunner
from gateway.curation.training import pairs, restricted_ids, to_jsonl, within_access
from gateway.errors import NotFoundError
from gateway.knowledge import KnowledgeBase, NewDocument
from gateway.query import QueryService
from gateway.settings import CurationSettings


@dataclass(frozen=True, slots=True)
class FeedbackResult:
    id: str
    linked: bool  # the answer it names was found (recorded, or recent in this process)
    recorded: bool  # the answer is (now) on record for curation


class Curation:
    def __init__(
        self,
        settings: CurationSettings,
        store: CurationStore,
        recorder: AnswerRecorder,
        diagnoser: Diagnoser,
        evaluator: HybridEvaluator,
        knowledge: KnowledgeBase,
        suites: SuiteRunner,
        queries: QueryService,
        identity: Identity,
        *,
        gap_similarity: float,
    ) -> None:
        """``queries`` answers the questions the cycle asks again (a resolution's check); ``identity`` makes every
        reader it asks as (a suite's ``run_as``, the tenant-open reader that askers recorded before readers were known
        stand for). ``gap_similarity``: the cosine for two open questions to form one gap, the environment's or the
        one fitted for the embedder in use (``CurationSettings.gap_threshold``)."""
        self.settings = settings
        self._gap_similarity = gap_similarity
        self.store = store
        self.recorder = recorder
        self._diagnoser = diagnoser
        self._evaluator = evaluator
        self._knowledge = knowledge
        self.suites = suites
        self._queries = queries
        self._identity = identity
        # Told a tenant's open gaps by diagnosis whenever they are computed (the open-gaps gauge).
        self.on_gaps: Callable[[str, Counter[str]], None] = lambda _tenant, _counts: None

    def nobody(self) -> Reader:
        """The reader of no user: tenant-open, with the tenant's policy for documents without access."""
        return self._identity.nobody

    async def route_report(self, tenant: str, days: float, *, router_version: str | None) -> RouteReport:
        """The tenant's route outcomes, those of answers still on their way to the store included, judged against
        ``router_version``: the router the app routes with (``QueryService.router_version``)."""
        await self.recorder.drain()
        return await route_report(self.store, tenant, days, time.time(), router_version)

    async def recalibrate(
        self, tenant: str, *, days: float, min_outcomes: int, apply: bool, router_version: str | None
    ) -> Calibration:
        """The threshold the tenant's outcomes under ``router_version`` (the router the app routes with) propose for
        that router (stored with ``apply``: an operator's decision, never ours)."""
        await self.recorder.drain()
        return await recalibrate_tenant(
            self.store,
            tenant,
            days=days,
            min_outcomes=min_outcomes,
            apply=apply,
            now=time.time(),
            router_version=router_version,
        )

    async def gaps(self, tenant: str, asked: AskedBy | None = None) -> list[Gap]:
        """The tenant's open gaps, each of questions asked under one visibility; with ``asked``, those holding a
        question of that user or visibility (whole: a gap's id and its resolution are of all its questions, whoever of
        that visibility asked them)."""
        records = await self.store.open_records(tenant)
        tenant_open = self.nobody().visibility
        gaps = cluster(records, self._gap_similarity, tenant_open)
        if asked is not None:
            gaps = [g for g in gaps if any(asked.matches(r.asker, tenant_open) for r in g.records)]
        for gap in gaps:
            await self._diagnoser.diagnose(gap)
        if asked is None:  # the gauge counts every open gap
            self.on_gaps(tenant, Counter(gap.diagnosis for gap in gaps))
        return sorted(gaps, key=lambda g: (-len(g.records), -g.records[-1].created_at))

    async def gap(self, tenant: str, gap_id: str) -> Gap:
        for gap in await self.gaps(tenant):
            if gap.id == gap_id:
                return gap
        raise NotFoundError(f"Tenant {tenant!r} has no open gap {gap_id!r}.")

    async def feedback(
        self,
        tenant: str,
        *,
        response_id: str | None,
        trace_id: str | None,
        rating: Rating,
        comment: str | None,
        expected_answer: str | None,
    ) -> FeedbackResult:
        # Kept for curators: personal data masked like the questions on record.
        comment, expected_answer = self._queries.mask_at_rest(tenant, [comment, expected_answer])
        recent = self.recorder.recent(response_id=response_id, trace_id=trace_id)
        if recent is not None and (recent.needs_human or recent.route is not None):
            await self.recorder.drain()  # it is on its way to the store: rate the record, not a copy
        record = await self.store.find_record(response_id=response_id, trace_id=trace_id)
        if record is not None and record.tenant != tenant:
            record = None  # another tenant's answer is not this caller's to rate
        if recent is not None and recent.tenant != tenant:
            recent = None
        recorded = record is not None
        if rating == "down" and recent is not None and recent.route is not None:
            await self.store.mark_route_disliked(recent.route.id)
        if rating == "down" and record is not None:
            await self.store.mark_rated_down(record.id, expected_answer)
        elif rating == "down" and recent is not None:
            new = to_record(recent, await self._knowledge.embed_query(recent.question), ("negative_feedback",))
            new.expected_answer = expected_answer
            await self.store.add_records([new])
            recorded = True
        question = record.question if record else recent.question if recent else None
        asker = record.asker if record else Asker.of(recent.reader) if recent else Asker()
        documents = record.documents if record else []
        cited = record.cited if record else []
        if record is None and recent is not None:
            documents = to_record(recent, []).documents
            cited = [s.id for s in recent.response.sources]
        item = Feedback(
            id=f"fb_{uuid.uuid4().hex}",
            tenant=tenant,
            response_id=response_id or (record.id if record else None),
            trace_id=trace_id,
            rating=rating,
            comment=comment,
            expected_answer=expected_answer,
            question=question,
            documents=documents,
            cited=cited,
            created_at=time.time(),
            asker=asker,
        )
        await self.store.add_feedback(item)
        return FeedbackResult(item.id, record is not None or recent is not None, recorded)

    async def resolve(
        self, tenant: str, gap_id: str, documents: Sequence[NewDocument], rules: list[Rule]
    ) -> Resolution:
        gap = await self.gap(tenant, gap_id)
        resolution = await resolve(
            gap,
            documents,
            rules,
            knowledge=self._knowledge,
            queries=self._queries,
            evaluator=self._evaluator,
            store=self.store,
            nobody=self.nobody(),
        )
        if resolution.closed:
            await self.gaps(tenant)  # recounts the tenant's open gaps for the gauge
        return resolution

    async def add_eval_case(
        self, tenant: str, suite: str, question: str, rules: list[Rule], reference: str | None
    ) -> EvalCase:
        case = EvalCase(
            id=f"case_{uuid.uuid4().hex}",
            tenant=tenant,
            suite=suite,
            question=question,
            rules=[asdict(rule) for rule in rules],
            reference=reference,
            created_at=time.time(),
        )
        await self.store.add_eval_case(case)
        return case

    async def training_pairs(self, tenant: str, asked: AskedBy | None = None) -> str:
        """The tenant's pairs as JSONL, each with its question's asker and only the ids that asker may read now (one
        look-up of the documents' current access for the whole export); with ``asked``, those of that user or
        visibility only."""
        resolutions = await self.store.resolutions_of(tenant, closed_only=True)
        tenant_open = self.nobody().visibility
        candidates = list(pairs(resolutions, await self.store.feedback_of(tenant), tenant_open))
        if asked is not None:
            candidates = [pair for pair in candidates if asked.matches_row(pair.row)]
        access = await self._knowledge.document_access(tenant, restricted_ids(candidates))
        return to_jsonl(within_access(candidates, access))

    async def purge(self) -> int:
        return await self.store.purge(self.settings.retention_days)

    async def abandon_stale_runs(self, now: float | None = None) -> int:
        """Evaluation runs left ``running`` by a process that stopped without shutting down (it stores its runs'
        ends as it stops; a killed one cannot): stored failed once older than any run takes."""
        at = time.time() if now is None else now
        return await self.store.abandon_eval_runs(at - self.settings.eval_run_max_s, ABANDONED, now=at)
