"""Which answers need a human, and recording them off the answer path.

:func:`needs_human` reads the typed events of a response (never its step text): an abstention, a last
retrieval verdict of Incorrect or Ambiguous, or a groundedness check that rejected a draft. Those
answers are recorded whole (question included, for curation); every other answer is only counted.

:class:`AnswerRecorder` is handed each answer synchronously by the query service and returns at once:
the answer goes on a bounded queue and a background task embeds and writes it. A full queue or a
database that is down costs a count and one log line, never the caller's answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from gateway.access import Reader
from gateway.curation.askers import Asker
from gateway.curation.models import AnswerRecord, RetrievedDocument
from gateway.curation.routing import RouteOutcome, route_outcome
from gateway.curation.store import CurationStore
from gateway.errors import GatewayError
from gateway.query import QueryRequest, QueryResponse
from pipelines.shared import Assess, Check, Evaluate, Retrieve

logger = logging.getLogger(__name__)

Embed = Callable[[str], Awaitable[list[float]]]
Count = Callable[[str], None]  # outcome: recorded / counted / dropped
CountRoute = Callable[[str, str], None]  # tenant, route verdict


@dataclass(frozen=True, slots=True)
class Assessment:
    """What the events say about one answer."""

    reasons: list[str]
    verdicts: list[str]
    checks_failed: list[str]
    top_k: int


def assess(response: QueryResponse) -> Assessment:
    verdicts: list[str] = []
    checks_failed: list[str] = []
    top_k = 0
    for event in response.events:
        if isinstance(event, Assess | Evaluate):
            verdicts.append(event.verdict)
        elif isinstance(event, Check) and event.outcome == "failed":
            checks_failed.append(event.critic)
        elif isinstance(event, Retrieve):
            top_k = max(top_k, event.k)
    reasons: list[str] = []
    if response.abstained:
        reasons.append("abstained")
    if verdicts and verdicts[-1] in ("incorrect", "ambiguous"):
        reasons.append(f"{verdicts[-1]}_evidence")
    if "grounded" in checks_failed:
        reasons.append("draft_rejected")
    return Assessment(reasons, verdicts, checks_failed, top_k)


@dataclass(frozen=True, slots=True)
class Answered:
    """One answer as the service handed it over."""

    tenant: str
    question: str
    response: QueryResponse
    at: float
    # The request's trace: the background write (its embedding, its store call) joins it instead of starting
    # root spans of its own that belong to no request.
    trace_context: Context | None = None
    needs_human: bool = False  # recorded whole, for curation
    route: RouteOutcome | None = None  # what it showed about its route, written beside
    reader: Reader | None = None  # who asked, and what they could see (None: an in-process caller naming nobody)


def to_record(answered: Answered, embedding: list[float], extra_reasons: tuple[str, ...] = ()) -> AnswerRecord:
    response = answered.response
    found = assess(response)
    evidence = response.evidence or response.sources
    return AnswerRecord(
        id=response.response_id or "",
        tenant=answered.tenant,
        trace_id=response.trace_id,
        route=response.route,
        reasons=sorted({*found.reasons, *extra_reasons}),
        verdicts=found.verdicts,
        checks_failed=found.checks_failed,
        top_k=found.top_k,
        documents=[RetrievedDocument(s.id, s.title, s.score) for s in evidence],
        cited=[s.id for s in response.sources],
        answer=response.answer,
        question=answered.question,
        embedding=embedding,
        created_at=answered.at,
        asker=Asker.of(answered.reader),
    )


class AnswerRecorder:
    def __init__(
        self,
        store: CurationStore,
        embed: Embed,
        *,
        queue_size: int,
        recent: int,
        count: Count | None = None,
        count_route: CountRoute | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self._tracer = tracer or trace.NoOpTracer()
        self._store = store
        self._embed = embed
        self._queue: asyncio.Queue[Answered] = asyncio.Queue(maxsize=queue_size)
        self._recent: OrderedDict[str, Answered] = OrderedDict()
        self._recent_size = recent
        self._count = count or (lambda _: None)
        self._count_route = count_route or (lambda _tenant, _verdict: None)
        self._failing = False

    def observe(self, request: QueryRequest, response: QueryResponse, reader: Reader | None = None) -> None:
        """Called on the answer path: never awaits, never raises. ``reader``: whom the answer was for, kept with its
        record (their user id and the visibility it ran under)."""
        at = time.time()
        needs_human = bool(assess(response).reasons)
        route = route_outcome(request, response, at)
        answered = Answered(
            request.tenant, request.query, response, at, otel_context.get_current(), needs_human, route, reader
        )
        self._remember(answered)
        if route is not None:
            self._count_route(route.tenant, route.verdict)
        if not needs_human:
            self._count("counted")
        if not needs_human and route is None:
            return
        try:
            self._queue.put_nowait(answered)
        except asyncio.QueueFull:
            if needs_human:
                self._count("dropped")
            self._warn_once("curation queue full: an answer that needs a human was not recorded")

    def _remember(self, answered: Answered) -> None:
        if self._recent_size == 0 or not answered.response.response_id:
            return
        self._recent[answered.response.response_id] = answered
        while len(self._recent) > self._recent_size:
            self._recent.popitem(last=False)

    def recent(self, *, response_id: str | None, trace_id: str | None) -> Answered | None:
        """A recent answer of this process (negative feedback on an answer that was only counted)."""
        if response_id and response_id in self._recent:
            return self._recent[response_id]
        if trace_id:
            for answered in reversed(self._recent.values()):
                if answered.response.trace_id == trace_id:
                    return answered
        return None

    async def run(self) -> None:
        """The background writer (one task per app, started and cancelled by the lifespan)."""
        while True:
            answered = await self._queue.get()
            try:
                await self._write(answered)
            finally:
                self._queue.task_done()

    async def _write(self, answered: Answered) -> None:
        token = otel_context.attach(answered.trace_context) if answered.trace_context is not None else None
        try:
            # Its own span in the request's trace: the write happens after the response, and its embedding
            # lookup and store call sit under this span, not among the request's own steps.
            with self._tracer.start_as_current_span("curation.record"):
                await self._write_record(answered)
        finally:
            if token is not None:
                otel_context.detach(token)

    async def _write_record(self, answered: Answered) -> None:
        try:
            if answered.route is not None:
                await self._store.add_route_outcomes([answered.route])
            if answered.needs_human:
                await self._store.add_records([to_record(answered, await self._embed(answered.question))])
        except GatewayError as exc:  # the store's and the embeddings' failures, translated at their boundary
            if answered.needs_human:  # the count is of answers that need a human; an outcome is only logged
                self._count("dropped")
            self._warn_once(f"curation store write failed, answers are counted and dropped until it recovers: {exc}")
            return
        if self._failing:
            logger.info("curation store writes recovered")
            self._failing = False
        if answered.needs_human:
            self._count("recorded")

    def _warn_once(self, message: str) -> None:
        if not self._failing:
            logger.warning(message)
            self._failing = True

    async def drain(self) -> None:
        """Waits until every queued answer is written (tests; shutdown)."""
        await self._queue.join()
