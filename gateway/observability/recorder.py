"""One object that turns what happens on the request path into metrics and spans.

The app builds one :class:`Telemetry` in its lifespan and hands it, like any client, to the query
service, the LLM client, the caches, the route table and the graphs (which see it through the
:class:`pipelines.shared.telemetry.PipelineTelemetry` protocol). Each signal can be off on its
own: without metrics the counters are skipped, without tracing the tracer is a no-op one.

Request-scoped facts (the route a request is on) live in a context variable, so an LLM call deep
in a graph is attributed to its route without every function passing it along; LangGraph runs
nodes in tasks that copy the context, so the value reaches them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import BaseMessage
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from gateway.errors import MalformedOutputError, ProviderError, ProviderTimeoutError, ProviderUnavailableError
from gateway.observability.metrics import BREAKER_STATES, GatewayMetrics
from gateway.observability.tracing import records_nothing, trace_id_of, tracer_of
from pipelines.shared import LLMCall

request_log = logging.getLogger("gateway.requests")

# A circuit breaker's states as telemetry reports them; the breakers themselves (gateway.providers.resilience) take
# the type from here, so that what is recorded and what is reported cannot drift apart.
BreakerState = Literal["closed", "half_open", "open"]

NO_ROUTE = "none"
CLIENT_CLOSED = "499"  # nginx's code for a request the client abandoned
ROUTER = "router"
CONTENT_CHARS = 2000

# Which list fields of a node's state update are counted on its span (number of documents, never text).
_COUNTED = {"passages": "documents", "candidates": "documents", "evidence": "evidence", "strips": "strips"}


@dataclass(slots=True)
class RequestScope:
    """The facts of one answer request, filled in as it goes; read when it ends, even on error."""

    route: str = NO_ROUTE
    cached: bool = False
    span: Span = field(default_factory=trace.get_current_span)
    trace_id: str | None = None


_route_var: ContextVar[str] = ContextVar("gateway_route", default=NO_ROUTE)
_request_var: ContextVar[RequestScope | None] = ContextVar("gateway_request", default=None)


class _NodeScope:
    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def finish(self, update: Mapping[str, Any]) -> None:
        if not self.span.is_recording():
            return
        for key, name in _COUNTED.items():
            value = update.get(key)
            if isinstance(value, Sequence):
                self.span.set_attribute(f"gateway.retrieval.{name}", len(value))
        for key in ("verdict", "stop_reason"):
            value = update.get(key)
            if isinstance(value, str):
                self.span.set_attribute(f"gateway.retrieval.{key}" if key == "verdict" else f"gateway.{key}", value)
        calls = update.get("llm_calls")
        if isinstance(calls, Sequence):
            self.span.set_attribute("gateway.llm_calls", len(calls))


class LLMSpan:
    """Handle of one LLM call in flight: :meth:`done` records its usage on the span and the metrics."""

    __slots__ = ("_include_content", "span")

    def __init__(self, span: Span, include_content: bool) -> None:
        self.span = span
        self._include_content = include_content

    def done(self, call: LLMCall, output: str) -> None:
        # The model that answered: the fallback's when the primary could not (the request names the primary's).
        self.span.set_attribute("gen_ai.response.model", call.model)
        self.span.set_attribute("gen_ai.usage.input_tokens", call.input_tokens)
        self.span.set_attribute("gen_ai.usage.output_tokens", call.output_tokens)
        if self._include_content:
            self.span.set_attribute("gen_ai.output.messages", _truncate(output))


class Telemetry:
    """Metrics and tracing for one app; either part may be off (``metrics=None``, ``provider=None``)."""

    def __init__(
        self,
        metrics: GatewayMetrics | None,
        provider: trace.TracerProvider | None,
        *,
        include_content: bool = False,
        llm_provider_name: str = "openai",
    ) -> None:
        self.metrics = metrics
        self.provider = provider
        self.tracer = tracer_of(provider)
        self._records_nothing = records_nothing(provider)
        self.include_content = include_content
        self.llm_provider_name = llm_provider_name

    def _span(self, name: str, **options: Any) -> AbstractContextManager[Span]:
        """A span under the current one, or, when nothing is exported, the current span itself.

        Without an exporter the provider samples everything out (``tracing.build_tracer_provider``): a child
        span would record nothing, and starting and ending one (a new id, a sampling decision, two context
        switches) cost ~6 % of a miss's CPU for the six a request opened. The request keeps the
        trace id of the span it runs in (the HTTP server span), which is what responses and logs carry; log lines
        inside it carry the server span's id too (no span below it exists anywhere to be told apart).
        Outside any span (a pipeline run on its own) a span is still started, for its trace id.
        """
        if self._records_nothing:
            current = trace.get_current_span()
            if current.get_span_context().is_valid:
                return nullcontext(current)
        return self.tracer.start_as_current_span(name, **options)

    # -- request ---------------------------------------------------------------------------

    @contextmanager
    def request(self, requested_route: str, query: str | None = None) -> Iterator[RequestScope]:
        """One answer request: a span, the in-flight gauge, and the request counter/histogram at the end."""
        metrics = self.metrics
        started = time.perf_counter()
        scope = RequestScope(route=requested_route if requested_route != "auto" else NO_ROUTE)
        token = _request_var.set(scope)
        if metrics is not None:
            metrics.in_flight.inc()
        status = "200"
        try:
            with self._span("gateway.answer") as span:
                scope.span = span
                scope.trace_id = trace_id_of(span)
                if query is not None and self.include_content and span.is_recording():
                    span.set_attribute("gateway.query", _truncate(query))
                try:
                    yield scope
                except asyncio.CancelledError:
                    status = CLIENT_CLOSED  # the caller went away: not a server error
                    raise
                except BaseException as exc:
                    status = str(getattr(exc, "status_code", 500))
                    raise
                finally:
                    if span.is_recording():
                        span.set_attribute("gateway.route", scope.route)
                        span.set_attribute("gateway.cached", scope.cached)
                        span.set_attribute("http.response.status_code", int(status))
                    # Inside the span, so the JSON line carries this request's trace_id.
                    request_log.info(
                        "answer %s route=%s cached=%s",
                        status,
                        scope.route,
                        scope.cached,
                        extra={
                            "route": scope.route,
                            "status": int(status),
                            "cached": scope.cached,
                            "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                        },
                    )
        finally:
            _request_var.reset(token)
            if metrics is not None:
                metrics.in_flight.dec()
                cached = "true" if scope.cached else "false"
                metrics.requests.labels(scope.route, status, cached).inc()
                metrics.request_duration.labels(scope.route, cached).observe(time.perf_counter() - started)

    def query_text(self, scope: RequestScope, query: str) -> None:
        """The query as it travels on (masked when the guardrails masked it), with content tracing on."""
        if self.include_content and scope.span.is_recording():
            scope.span.set_attribute("gateway.query", _truncate(query))

    # -- guardrails ------------------------------------------------------------------------

    def guard_checked(self, check: str, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.guard_duration.labels(check).observe(seconds)

    def pii_found(self, categories: Sequence[str], action: str) -> None:
        """Categories only: the values never leave the guardrails."""
        if self.metrics is not None:
            for category in categories:
                self.metrics.guard_pii.labels(category, action).inc()
        span = _request_span()
        if span.is_recording():
            span.set_attribute("gateway.guard.pii.categories", list(categories))
            span.set_attribute("gateway.guard.pii.action", action)

    def injection_found(self, source: str, kinds: Sequence[str], action: str, count: int = 1) -> None:
        if self.metrics is not None:
            self.metrics.guard_injections.labels(source, action).inc(count)
        span = _request_span()
        if span.is_recording():
            span.set_attribute(f"gateway.guard.injection.{source}.kinds", list(kinds))
            span.set_attribute(f"gateway.guard.injection.{source}.action", action)
            span.set_attribute(f"gateway.guard.injection.{source}.count", count)

    def answered(self, scope: RequestScope, *, route: str, cached: bool, answer: str) -> None:
        scope.route = route
        scope.cached = cached
        if self.include_content and scope.span.is_recording():
            scope.span.set_attribute("gateway.answer", _truncate(answer))

    @contextmanager
    def routing(self) -> Iterator[Span]:
        """The front router's decision; its LLM calls (``llm`` classifier) count under route ``router``."""
        token = _route_var.set(ROUTER)
        try:
            with self._span("route_query") as span:
                yield span
        finally:
            _route_var.reset(token)

    def decided(
        self,
        span: Span,
        route: str,
        classifier: str,
        confidence: float,
        signals: Mapping[str, float] | None = None,
        documents: Sequence[str] = (),
    ) -> None:
        """``signals`` are the knowledge-base probe's numbers (always recorded: no text in them);
        ``documents`` the ids that cover the query's parts, recorded only with content tracing on."""
        if self.metrics is not None:
            self.metrics.route_decisions.labels(route, classifier).inc()
        if span.is_recording():
            span.set_attribute("gateway.route", route)
            span.set_attribute("gateway.classifier", classifier)
            span.set_attribute("gateway.route.confidence", confidence)
            for name, value in (signals or {}).items():
                span.set_attribute(f"gateway.route.probe.{name}", value)
            if self.include_content and documents:
                span.set_attribute("gateway.route.probe.covering_documents_ids", list(documents))

    # -- pipelines (PipelineTelemetry) -----------------------------------------------------

    @contextmanager
    def route(self, route: str) -> Iterator[None]:
        token = _route_var.set(route)
        request = _request_var.get()
        if request is not None:
            request.route = route  # an error further down is counted on the route that failed
        try:
            with self._span(f"route {route}", attributes={"gateway.route": route}):
                yield None
        finally:
            _route_var.reset(token)

    @contextmanager
    def node(self, pipeline: str, node: str) -> Iterator[_NodeScope]:
        started = time.perf_counter()
        try:
            attributes = {"gateway.pipeline": pipeline, "gateway.node": node}
            with self._span(f"{pipeline}.{node}", attributes=attributes) as span:
                yield _NodeScope(span)
        finally:
            if self.metrics is not None:
                self.metrics.node_duration.labels(pipeline, node).observe(time.perf_counter() - started)

    def verdict(self, pipeline: str, verdict: str) -> None:
        if self.metrics is not None:
            self.metrics.retrieval_verdicts.labels(pipeline, verdict).inc()

    def corrective_loop(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.corrective_loops.labels(reason).inc()

    def groundedness_failure(self) -> None:
        if self.metrics is not None:
            self.metrics.groundedness_failures.inc()

    def sentence_withheld(self, route: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.sentences_withheld.labels(route, reason).inc()

    def escalation(self, from_route: str, to_route: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.escalations.labels(from_route, to_route, reason).inc()
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event("escalation", {"from_route": from_route, "to_route": to_route, "reason": reason})

    # -- LLM calls -------------------------------------------------------------------------

    @contextmanager
    def llm_call(
        self, node: str, model: str, messages: list[BaseMessage], max_tokens: int | None = None
    ) -> Iterator[LLMSpan]:
        """A GenAI-convention CLIENT span around one chat call; errors are counted by exception type."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.llm_provider_name,
            "gen_ai.request.model": model,
            "gateway.node": node,
        }
        if max_tokens:
            attributes["gen_ai.request.max_tokens"] = max_tokens
        with self._span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes, record_exception=False) as span:
            if self.include_content and span.is_recording():
                span.set_attribute("gen_ai.input.messages", _messages_json(messages))
            try:
                yield LLMSpan(span, self.include_content)
            except Exception as exc:
                kind = _error_kind(exc)
                span.set_attribute("error.type", kind)
                span.set_status(Status(StatusCode.ERROR, kind))
                self.llm_failed(node, model, kind)
                raise

    def llm_failed(self, node: str, model: str, kind: str) -> None:
        if self.metrics is not None:
            self.metrics.llm_errors.labels(node, model, kind).inc()

    def llm_usage(self, call: LLMCall) -> None:
        """Counters of a finished call (malformed structured output included: its tokens were spent)."""
        metrics = self.metrics
        if metrics is None:
            return
        route = _route_var.get()
        metrics.llm_calls.labels(route, call.node, call.model).inc()
        metrics.llm_tokens.labels(route, call.model, "input").inc(call.input_tokens)
        metrics.llm_tokens.labels(route, call.model, "output").inc(call.output_tokens)
        metrics.llm_duration.labels(call.node, call.model).observe(call.duration_s)
        metrics.cost.labels(route, call.model).inc(call.cost_usd)

    # -- caches (gateway.cache.events.CacheEvents) -----------------------------------------

    def cache_result(self, layer: str, result: str) -> None:
        if self.metrics is not None:
            self.metrics.cache_requests.labels(layer, result).inc()
        span = trace.get_current_span()
        if span.is_recording() and getattr(span, "name", "") == "cache.lookup":
            if result == "error":
                span.set_attribute("gateway.cache.error", True)
            else:
                span.set_attribute("gateway.cache.result", result)

    @contextmanager
    def cache_lookup(self, layer: str) -> Iterator[None]:
        """A lookup span; its result is "miss" unless a hit is reported inside it. None outside any span: a lookup
        made before the request's span opens would be a trace of its own, cut off from its request's; it is counted
        only."""
        if not trace.get_current_span().get_span_context().is_valid:
            yield None
            return
        attributes = {"gateway.cache.layer": layer, "gateway.cache.result": "miss"}
        with self._span("cache.lookup", attributes=attributes):
            yield None

    # -- LLM upstreams (gateway.providers.resilience.UpstreamEvents) -----------------------

    def upstream_retried(self, upstream: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.llm_retries.labels(upstream, reason).inc()
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event("retry", {"gateway.llm.upstream": upstream, "error.type": reason})

    def breaker_changed(self, upstream: str, state: BreakerState) -> None:
        if self.metrics is not None:
            self.metrics.llm_breaker_state.labels(upstream).set(BREAKER_STATES.index(state))
            self.metrics.llm_breaker_transitions.labels(upstream, state).inc()

    def fell_back(self, from_upstream: str, to_upstream: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.llm_fallbacks.labels(reason).inc()
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event("fallback", {"from": from_upstream, "to": to_upstream, "error.type": reason})

    # -- dependencies ----------------------------------------------------------------------

    def dependency(self, name: str, up: bool) -> None:
        if self.metrics is not None:
            self.metrics.dependency_up.labels(name).set(1 if up else 0)

    def dependency_changed(self, name: str, up: bool) -> None:
        """A call found a dependency down, or back (``gateway.providers.redis.DependencyEvents``)."""
        if self.metrics is not None:
            self.metrics.dependency_transitions.labels(name, "up" if up else "down").inc()
        self.dependency(name, up)


def reader_known(user_id: str | None, visibility_key: str, source: str) -> None:
    """Who asked, on the request's span (the HTTP server span, current while a handler's dependencies are
    resolved): the end user's id as the key's caller vouched for it, how it was learnt, and the digest of what
    they may see (``Visibility.key``), the one the caches key answers by. The groups themselves are not written:
    the digest ties a trace to a cache entry without listing anyone's memberships."""
    span = _request_span()
    if span.is_recording():
        if user_id is not None:
            span.set_attribute("enduser.id", user_id)
        span.set_attribute("gateway.reader.source", source)
        span.set_attribute("gateway.reader.visibility", visibility_key)


def _request_span() -> Span:
    """The request's span (where a reader looks for its facts), else whichever span is current."""
    scope = _request_var.get()
    return scope.span if scope is not None else trace.get_current_span()


def _error_kind(exc: Exception) -> str:
    """A bounded label for a failed LLM call."""
    if isinstance(exc, ProviderTimeoutError):
        return "timeout"
    if isinstance(exc, ProviderUnavailableError):
        return "unavailable"
    if isinstance(exc, MalformedOutputError):
        return "malformed_output"
    if isinstance(exc, ProviderError):
        return "http_error"
    return "other"


def _truncate(text: str) -> str:
    return text if len(text) <= CONTENT_CHARS else text[:CONTENT_CHARS] + "…"


def _messages_json(messages: list[BaseMessage]) -> str:
    return _truncate(json.dumps([{"role": m.type, "content": str(m.content)} for m in messages], ensure_ascii=False))
