"""The request path as one straight line: embed once (when anything reads the vector) -> route -> run -> respond.

The query vector is awaited where it is first read (the semantic cache's lookup, else routing), on the screened
text, and handed on from there: an answer-cache hit or a forced ``direct`` embeds nothing.

Requests arrive validated (each domain's ``validation`` module, at the edge) and leave uncharged (the API
handlers charge token budgets): this layer only answers.

Each request carries its reader's ``Visibility`` (what documents they may read), handed in by the edge: the probe,
every retrieval of the route and both answer caches' keys (hence request coalescing too) are the reader's, so an
answer is computed from, and shared among, only readers who may read its sources.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
from langgraph.types import StreamWriter

from gateway.access import Reader
from gateway.cache import CacheUnavailableError, ExactCache, KeyParams, KnowledgeVersions, SemanticCache, semantic_scope
from gateway.guardrails import Guardrails, Vault
from gateway.knowledge import KnowledgeBase
from gateway.observability import Telemetry
from gateway.profiles import AssistantProfile, Profiles
from gateway.query.schemas import QueryRequest, QueryResponse, RouteProbe, RouteResponse, Source, Usage
from gateway.query.steps import RouteClamp, RouteQuery, SemanticCacheHit, StepEvent, render_steps
from gateway.query.timeline import numbered, waterfall
from gateway.settings import AssistantSettings, ProfileSettings
from pipelines.shared import LLMCall, Passage, Visibility
from routes.knowledge_router import TenantRouting, threshold_applies
from routes.probe import PROBE_DEPTH, Probe
from routes.router import FrontRouter
from routes.table import RouteTable, StepTime
from routes.types import RouteDecision

Admit = Callable[[QueryRequest], QueryRequest]
# Sees every answer as it leaves, with whom it was for (the curation recorder): must return at once and never raise.
OnAnswer = Callable[[QueryRequest, QueryResponse, Reader], None]


logger = logging.getLogger(__name__)


def new_response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class AnswerCaches:
    """Where a service looks before it routes: the exact answer cache, the semantic one (a question of the same
    meaning, within the same knowledge version), and the versions both are keyed under. Any may be off."""

    exact: ExactCache[QueryResponse] | None = None
    semantic: SemanticCache | None = None
    versions: KnowledgeVersions | None = None


class QueryService:
    def __init__(
        self,
        knowledge: KnowledgeBase,
        router: FrontRouter,
        table: RouteTable,
        caches: AnswerCaches | None = None,
        *,
        telemetry: Telemetry | None = None,
        on_answer: OnAnswer | None = None,
        guard: Guardrails | None = None,
        profiles: Profiles | None = None,
    ) -> None:
        self._knowledge = knowledge
        self._router = router
        self._table = table
        self.caches = caches or AnswerCaches()
        self._telemetry = telemetry or Telemetry(None, None)
        self._on_answer = on_answer
        self._guard = guard
        self._profiles = profiles or Profiles(None, AssistantSettings(), ProfileSettings())
        # Tenants whose applied threshold was calibrated for another router version: warned about once per process.
        # Checked and added with no await in between, so two concurrent requests cannot both warn.
        self._stale_thresholds: set[str] = set()

    @property
    def router_version(self) -> str | None:
        """The version of the router this service routes with (None: the LLM classifier decides): what route
        outcomes are recorded under and what a tenant's recalibration must be made for."""
        return self._router.version

    def screen(self, tenant: str, texts: list[str], vault: Vault) -> list[str]:
        """The user's texts as they may go upstream (the tenant's guardrails; unchanged without them)."""
        return texts if self._guard is None else self._guard.screen_prompt(tenant, texts, vault)

    def mask_at_rest(self, tenant: str, texts: list[str | None]) -> list[str | None]:
        """Texts a user writes to be kept (feedback), with personal data masked (unchanged without guardrails)."""
        return texts if self._guard is None else self._guard.mask_at_rest(tenant, texts)

    async def profile(self, tenant: str) -> AssistantProfile:
        """The tenant's assistant profile (cached in-process): the chat edge decides on system messages with it."""
        return await self._profiles.get(tenant)

    async def route(self, query: str, tenant: str, *, reader: Reader) -> RouteResponse:
        """The router's decision and the route that would run on it (the tenant's profile may not allow it), with
        the probe of what ``reader`` may see (its documents are theirs only)."""
        query = self.screen(tenant, [query], Vault())[0]  # the LLM classifier is an upstream call too
        vector = await self._knowledge.embed_query(query)
        profile = await self._profiles.get(tenant)
        # The tenant's own routing, as a query would be routed: its recalibrated threshold and named-documents rule.
        decision, _ = await self._router.decide(
            query, "auto", vector, tenant, self._routing(profile), visibility=reader.visibility
        )
        return to_route_response(decision, profile.clamp(decision.route))

    async def answer(
        self,
        request: QueryRequest,
        admit: Admit | None = None,
        *,
        reader: Reader,
        vault: Vault | None = None,
        instructions: str = "",
        writer: StreamWriter | None = None,
    ) -> QueryResponse:
        """Every answer path (``/v1/query``, chat completions) comes through here: one span and one count each.

        ``admit`` is the API edge's check of a client's request (limits, tenant): it runs inside the
        request's span and count, so a rejected request is traced and counted like any other. The
        guardrails then mask (or refuse) the query: from there on, caches, spans, the model and the answer
        records see placeholders only, and the caller gets the answer with its values restored. A caller
        passing ``vault`` has screened the query (and ``instructions``) already (the chat API, with the turns
        before it). Beyond that this layer checks only the tenant's assistant profile (routes it allows).
        ``reader``: who asks (required: no request path may search, or be served, the whole tenant by forgetting
        whose request it is); every retrieval and cache key reads its visibility.
        ``instructions``: a chat client's system message, used when the profile allows it.
        """
        screened = vault is not None
        vault = vault if vault is not None else Vault()
        with self._telemetry.request(request.route) as scope, KnowledgeVersions.snapshot():
            if admit is not None:
                request = admit(request)
            if not screened:
                screened_query = self.screen(request.tenant, [request.query], vault)[0]
                request = msgspec.structs.replace(request, query=screened_query)
            self._telemetry.query_text(scope, request.query)
            response = await self._answer(request, instructions, writer, reader)
            self._telemetry.answered(scope, route=response.route, cached=response.cached, answer=response.answer)
            response = msgspec.structs.replace(response, trace_id=scope.trace_id, response_id=new_response_id())
            if self._on_answer is not None:
                self._on_answer(request, response, reader)
            return restore_response(response, vault)

    async def answer_fresh(self, request: QueryRequest, *, reader: Reader | None = None) -> QueryResponse:
        """An answer computed now, past both answer caches and unrecorded: a curator's re-run of a question, as
        ``reader`` (whom the curation cycle asks for: a question's asker, a suite's ``run_as``); without one, as a
        maintenance read that sees every document (:meth:`Reader.unrestricted`)."""
        profile = await self._profiles.get(request.tenant)
        seen = Reader.unrestricted() if reader is None else reader
        asked = Asked(request, time.perf_counter(), profile, "", None, seen)
        response = await self._compute(asked)
        return msgspec.structs.replace(response, response_id=new_response_id())

    async def _answer(
        self, request: QueryRequest, instructions: str, writer: StreamWriter | None, reader: Reader
    ) -> QueryResponse:
        started = time.perf_counter()
        profile = await self._profiles.get(request.tenant)
        profile.check_requested(request.route)
        asked = Asked(request, started, profile, instructions, writer, reader)
        if self.caches.exact is None:
            return await self._compute(asked)
        outcome = await self.caches.exact.get_or_compute(
            tenant=request.tenant,
            route=request.route,
            query=request.query,
            params=asked.key_params(),
            visibility=asked.visibility,
            compute=lambda: self._semantic_or_compute(asked),
        )
        return outcome.value if not outcome.cached else _served_from_cache(outcome.value, started)

    async def _semantic_or_compute(self, asked: Asked) -> QueryResponse:
        """Inside the exact cache's single flight: a paraphrase of a cached query is served its answer."""
        request = asked.request
        if self.caches.semantic is None or self.caches.versions is None:
            return await self._compute(asked)
        try:
            version = await self.caches.versions.current(request.tenant)  # read before computing, like the exact key
        except CacheUnavailableError:
            return await self._compute(asked)
        scope = semantic_scope(request.route, asked.key_params())
        vector = await self._knowledge.embed_query(request.query)
        hit = await self.caches.semantic.lookup(
            request.tenant, version, request.query, vector, visibility=asked.visibility, scope=scope
        )
        if hit is not None:
            try:
                found = msgspec.json.decode(hit.payload, type=QueryResponse)
            except (msgspec.DecodeError, msgspec.ValidationError):
                found = None
            if found is not None:
                served = _served_from_cache(found, asked.started)
                events: list[StepEvent] = [SemanticCacheHit(similarity=hit.similarity)]
                return msgspec.structs.replace(served, steps=render_steps(events), events=events, timeline=[])
        response = await self._compute(asked, vector=vector)
        ttl = self.caches.exact.ttl_for(response.route) if self.caches.exact is not None else 0
        if ttl > 0 and not response.abstained:
            payload = msgspec.json.encode(response)
            await self.caches.semantic.store(
                request.tenant,
                version,
                request.query,
                vector,
                payload,
                visibility=asked.visibility,
                scope=scope,
                ttl_s=ttl,
            )
        return response

    async def _compute(self, asked: Asked, *, vector: list[float] | None = None) -> QueryResponse:
        request, query = asked.request, asked.request.query
        routing = time.perf_counter()
        if vector is None and self._router.reads_vector(request.route):
            # One embedding per request at most, shared by the router's probe and retrieval (the semantic cache
            # hands its own in); a forced ``direct`` reads no vector, so it embeds nothing. What the router reads of
            # the text alone is read first (kept per text for the decision).
            self._router.read_question(query, request.route)
            vector = await self._knowledge.embed_query(query)
        decision, router_calls = await self._decide(query, request, vector, asked.profile, asked.visibility)
        routed_at = time.perf_counter()
        route = asked.profile.clamp(decision.route)
        result = await self._table.run(
            route,
            query=query,
            tenant=request.tenant,
            top_k=request.top_k,
            query_vector=vector,
            visibility=asked.visibility,
            allow_escalation=request.allow_escalation and asked.profile.allows("multi_hop"),
            # The probe's dense ranking serves the first retrieval: dense retrieval takes its head, hybrid
            # retrieval fuses it with the keyword hits (KnowledgeBase.search_reusing).
            probe=decision.probe,
            profile=self._profiles.run_profile(asked.profile, asked.instructions),
            writer=asked.writer,
        )
        routed = [RouteQuery(route=decision.route, classifier=decision.classifier)] if router_calls else []
        clamped = [RouteClamp(from_route=decision.route, to_route=route)] if route != decision.route else []
        events: list[StepEvent] = [*routed, *clamped, *result.events]
        # Before routing: the tenant's profile and the answer caches' lookups (a miss, or this would not run).
        lookup = StepTime("cache_lookup" if self.caches.exact is not None else "profile", asked.started, routing, 0)
        routing_step = StepTime("route", routing, routed_at, len(routed) + len(clamped))
        return QueryResponse(
            answer=result.answer,
            route=result.route,
            route_confidence=round(decision.confidence, 4),
            route_reason=decision.reason,
            sources=_sources(result.sources),
            cached=False,
            usage=_usage([*router_calls, *result.llm_calls]),
            latency_ms=round((time.perf_counter() - asked.started) * 1000, 2),
            steps=render_steps(events),
            classifier=decision.classifier,
            classified_route=decision.route,
            abstained=result.abstained,
            evidence=_sources(result.context),
            stop_reason=result.stop_reason,
            escalated_from=result.escalated_from,
            events=events,
            timeline=waterfall(asked.started, [lookup, routing_step, *result.steps]),
            probe=None if decision.probe is None else _route_probe(decision.probe),
            passages=numbered(result.context) if request.include_passages else None,
            p_multi_hop=decision.p_multi_hop,  # unrounded: a recalibrated threshold is compared with it
            router_version=decision.router_version,
            named_documents=decision.named_documents,
        )

    async def _decide(
        self,
        query: str,
        request: QueryRequest,
        vector: list[float] | None,
        profile: AssistantProfile,
        visibility: Visibility,
    ) -> tuple[RouteDecision, list[LLMCall]]:
        """The router's decision, in its own span with the probe's signals; with the tenant's recalibrated
        threshold where an operator set one for this router."""
        with self._telemetry.routing() as span:
            decision, router_calls = await self._router.decide(
                query, request.route, vector, request.tenant, self._routing(profile), visibility=visibility
            )
            probe = decision.probe
            self._telemetry.decided(
                span,
                decision.route,
                decision.classifier,
                decision.confidence,
                probe.signals.as_dict() if probe is not None else None,
                probe.covering if probe is not None else (),
            )
        return decision, router_calls

    def _routing(self, profile: AssistantProfile) -> TenantRouting | None:
        """The tenant's recalibrated routing (threshold, and whether the named-documents rule decides) when it was
        calibrated for the router routing now, else None (the router's defaults).

        A retrained router's ``p(multi_hop)`` means something else: a threshold fitted to the old one's would
        silently mis-route the tenant, so it is set aside (logged once per tenant) until an operator recalibrates
        on outcomes of this version. One without a version predates versions and is set aside too.
        """
        calibrated = profile.routing
        if calibrated is None:
            return None
        current = self._router.version
        if current is None:  # the LLM classifier decides: it reads no threshold
            return None
        if threshold_applies(calibrated.router_version, current):
            return TenantRouting(calibrated.multi_hop_threshold, calibrated.named_documents_rule)
        if profile.tenant not in self._stale_thresholds:
            self._stale_thresholds.add(profile.tenant)
            logger.warning(
                "tenant %r: its routing threshold %.3f was calibrated for router version %s, not the one in use (%s); "
                "routing it with the default threshold until it is recalibrated (python -m gateway.curation "
                "recalibrate --tenant %s)",
                profile.tenant,
                calibrated.multi_hop_threshold,
                calibrated.router_version or "unknown",
                current,
                profile.tenant,
            )
        return None


@dataclass(frozen=True, slots=True)
class Asked:
    """One question on its way through the service: what every step after the edge reads of it, passed as one
    value instead of threaded argument by argument through the cache layers to the computation."""

    request: QueryRequest  # screened: caches and the model see placeholders only
    started: float  # perf_counter() when the service took it
    profile: AssistantProfile
    instructions: str  # a chat client's system message, used where the profile allows it
    writer: StreamWriter | None  # a streamed request's sink for the answer's text as it is cleared
    reader: Reader  # who asks: the probe, the retrievals and the cache keys read what they may see

    @property
    def visibility(self) -> Visibility:
        return self.reader.visibility

    def key_params(self) -> KeyParams:
        """What keys a cached answer besides the question: the request's knobs and the profile's digest, so a
        changed profile never gets the old one's answers."""
        return {
            "top_k": self.request.top_k,
            "allow_escalation": self.request.allow_escalation,
            **self.profile.key_params(self.instructions),
            # Only when asked: answers cached before the option keep their keys.
            **({"include_passages": True} if self.request.include_passages else {}),
        }


def restore_response(response: QueryResponse, vault: Vault) -> QueryResponse:
    """The response the user sees: every placeholder in its text (answer, steps, events) back to its value."""
    if not vault:
        return response
    restored = _restore_strings(msgspec.to_builtins(response), vault)
    return msgspec.convert(restored, type=QueryResponse)


def _restore_strings(value: object, vault: Vault) -> object:
    if isinstance(value, str):
        return vault.restore(value)
    if isinstance(value, list):
        return [_restore_strings(item, vault) for item in value]
    if isinstance(value, dict):
        return {key: _restore_strings(item, vault) for key, item in value.items()}
    return value


def _served_from_cache(response: QueryResponse, started: float) -> QueryResponse:
    """A cached answer costs no model call: zero new usage, so clients never count the cost twice."""
    return msgspec.structs.replace(
        response,
        cached=True,
        latency_ms=round((time.perf_counter() - started) * 1000, 2),
        usage=Usage(llm_calls=0, input_tokens=0, output_tokens=0, cost_usd=0.0),
    )


def to_route_response(decision: RouteDecision, route: str) -> RouteResponse:
    """``route``: what would run on ``decision`` (the router's choice, clamped by the tenant's profile)."""
    probe = decision.probe
    return RouteResponse(
        route=route,
        confidence=round(decision.confidence, 4),
        reason=decision.reason,
        classifier=decision.classifier,
        classified_route=decision.route,
        probe=None if probe is None else _route_probe(probe),
    )


def _route_probe(probe: Probe) -> RouteProbe:
    return RouteProbe(
        tenant=probe.tenant,
        depth=min(probe.depth, PROBE_DEPTH),  # what the signals read; the probe may search deeper for retrieval
        signals={name: round(float(value), 4) for name, value in probe.signals.as_dict().items()},
        covering_documents=list(probe.covering),
        documents=_sources(list(probe.evidence)),
    )


def _sources(passages: list[Passage]) -> list[Source]:
    """One entry per document, with its best chunk's score, best first."""
    best: dict[str, Passage] = {}
    for passage in passages:
        if passage.doc_id not in best or passage.score > best[passage.doc_id].score:
            best[passage.doc_id] = passage
    ordered = sorted(best.values(), key=lambda p: p.score, reverse=True)
    return [
        Source(id=p.doc_id, title=p.title, score=round(p.score, 4), section=str(p.metadata.get("section", "")))
        for p in ordered
    ]


def _usage(calls: list[LLMCall]) -> Usage:
    return Usage(
        llm_calls=len(calls),
        input_tokens=sum(c.input_tokens for c in calls),
        output_tokens=sum(c.output_tokens for c in calls),
        cost_usd=round(sum(c.cost_usd for c in calls), 8),
    )
