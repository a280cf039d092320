"""Every Prometheus metric of the gateway, created per app on its own registry.

Per app rather than at import, so each test builds a fresh app with fresh counters. Labels take
bounded values only: routes, nodes, verdicts and configured model names, never tenants, queries,
request ids or keys.

Multi-process serving (several uvicorn/gunicorn workers): set ``PROMETHEUS_MULTIPROC_DIR`` to an
empty, writable directory *before* the workers start (prometheus-client reads it at import). Every
worker then writes its samples to files there and ``/metrics`` sums them across workers with
:class:`prometheus_client.multiprocess.MultiProcessCollector`, whichever worker answers the scrape.
Wipe the directory between runs of the server, as prometheus-client requires.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0)
LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
GUARD_BUCKETS = (0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5)
NODE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


ROUTES = ("direct", "single_hop", "multi_hop")
VERDICTS = ("correct", "ambiguous", "incorrect")
BREAKER_STATES = ("closed", "half_open", "open")  # the gauge's values: their index
RETRY_REASONS = ("timeout", "unavailable", "rate_limited", "http_5xx")
LOOP_REASONS = (
    "retrieval_incorrect",
    "retrieval_ambiguous",
    "unsupported_answer",
    "empty_answer",
    "answer_not_useful",
    "next_hop",
)


def multiprocess_dir() -> Path | None:
    value = os.environ.get(MULTIPROC_ENV) or os.environ.get(MULTIPROC_ENV.lower())
    return Path(value) if value else None


GaugeMode = Literal["livesum", "max", "mostrecent"]  # the modes used below; prometheus-client accepts more


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric of :class:`GatewayMetrics`: the attribute it is reached by and how it is declared.

    ``buckets`` only for histograms, ``multiprocess_mode`` (how ``/metrics`` combines the workers' values) only
    for gauges, where it is required: prometheus-client's default keeps one series per process id.
    """

    attribute: str
    kind: type[Counter] | type[Gauge] | type[Histogram]
    name: str
    documentation: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    multiprocess_mode: GaugeMode | None = None

    def __post_init__(self) -> None:
        if (self.buckets is not None) != (self.kind is Histogram):
            raise ValueError(f"{self.name}: buckets are required for a histogram and meaningless otherwise")
        if (self.multiprocess_mode is not None) != (self.kind is Gauge):
            raise ValueError(f"{self.name}: a multiprocess mode is required for a gauge and meaningless otherwise")

    def create(self, registry: CollectorRegistry) -> Counter | Gauge | Histogram:
        if self.buckets is not None:
            return Histogram(self.name, self.documentation, self.labels, buckets=self.buckets, registry=registry)
        if self.multiprocess_mode is not None:
            return Gauge(
                self.name, self.documentation, self.labels, registry=registry, multiprocess_mode=self.multiprocess_mode
            )
        return Counter(self.name, self.documentation, self.labels, registry=registry)


# Every metric, in exposition order. A new metric is a row here plus its typed attribute on GatewayMetrics
# (a unit test checks the two agree).
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "requests",
        Counter,
        "gateway_requests_total",
        "Answer requests by answering route, HTTP status and whether the cache served them.",
        ("route", "status", "cached"),
    ),
    MetricSpec(
        "request_duration",
        Histogram,
        "gateway_request_duration_seconds",
        "Answer latency seen by the caller, by answering route and cache use.",
        ("route", "cached"),
        buckets=REQUEST_BUCKETS,
    ),
    MetricSpec(
        "in_flight",
        Gauge,
        "gateway_requests_in_flight",
        "Answer requests being processed now (summed over live workers): an HPA custom metric.",
        multiprocess_mode="livesum",
    ),
    MetricSpec(
        "route_decisions",
        Counter,
        "gateway_route_decisions_total",
        "Front-router decisions by chosen route and classifier (logistic, llm, override).",
        ("route", "classifier"),
    ),
    MetricSpec(
        "escalations",
        Counter,
        "gateway_escalations_total",
        "Requests handed from one route to another mid-flight.",
        ("from_route", "to_route", "reason"),
    ),
    MetricSpec(
        "llm_calls",
        Counter,
        "gateway_llm_calls_total",
        "LLM calls by the route running them, the pipeline node and the configured model.",
        ("route", "node", "model"),
    ),
    MetricSpec(
        "llm_errors",
        Counter,
        "gateway_llm_errors_total",
        "LLM calls that failed (timeout, unreachable, HTTP error, malformed structured output).",
        ("node", "model", "error"),
    ),
    MetricSpec(
        "llm_tokens",
        Counter,
        "gateway_llm_tokens_total",
        "Tokens reported by the LLM endpoint, by route, model and kind (input or output).",
        ("route", "model", "kind"),
    ),
    MetricSpec(
        "llm_duration",
        Histogram,
        "gateway_llm_duration_seconds",
        "Wall time of one LLM call, by pipeline node and model.",
        ("node", "model"),
        buckets=LLM_BUCKETS,
    ),
    MetricSpec(
        "cost",
        Counter,
        "gateway_cost_usd_total",
        "LLM spend in US dollars from the configured per-model prices (GATEWAY_LLM_PRICES).",
        ("route", "model"),
    ),
    MetricSpec(
        "retrieval_verdicts",
        Counter,
        "gateway_retrieval_verdicts_total",
        "Retrieval evaluator verdicts (CRAG's correct / ambiguous / incorrect), by pipeline.",
        ("pipeline", "verdict"),
    ),
    MetricSpec(
        "corrective_loops",
        Counter,
        "gateway_corrective_loops_total",
        "Extra rounds the corrective pipeline took, by reason (retrieval verdict, unsupported, not useful).",
        ("reason",),
    ),
    MetricSpec(
        "curation_answers",
        Counter,
        "gateway_curation_answers_total",
        "Answers seen by the curation recorder: recorded (need a human), counted (the rest) or dropped.",
        ("outcome",),
    ),
    MetricSpec(
        "route_outcomes",
        Counter,
        "gateway_route_outcomes_total",
        "Routed answers by what they showed about their route afterwards (right, over_routed: multi_hop where one "
        "document answered, under_routed: single_hop escalated), per tenant: the route accuracy estimate.",
        ("tenant", "verdict"),
    ),
    MetricSpec(
        "eval_score",
        Gauge,
        "gateway_eval_score",
        "Score (0-1) of the last run of each evaluation suite (run on demand and after knowledge changes).",
        ("suite",),
        multiprocess_mode="mostrecent",
    ),
    MetricSpec(
        "knowledge_gaps_open",
        Gauge,
        "gateway_knowledge_gaps_open",
        "Open knowledge gaps by diagnosis, summed over tenants as last computed (gaps API, review page).",
        ("diagnosis",),
        multiprocess_mode="mostrecent",
    ),
    MetricSpec(
        "groundedness_failures",
        Counter,
        "gateway_groundedness_failures_total",
        "Generated answers the groundedness check (Self-RAG IsSup) found unsupported by the evidence.",
    ),
    MetricSpec(
        "sentences_withheld",
        Counter,
        "gateway_sentences_withheld_total",
        "Sentences of generated answers the sentence gate never sent, by route and reason (unsupported by the "
        "evidence, stating nothing, declining after an answer); counted once the answer is final.",
        ("route", "reason"),
    ),
    MetricSpec(
        "cache_requests",
        Counter,
        "gateway_cache_requests_total",
        "Cache lookups by layer and result; 'error' counts failed cache operations (served as misses).",
        ("layer", "result"),
    ),
    MetricSpec(
        "node_duration",
        Histogram,
        "gateway_node_duration_seconds",
        "Wall time of one pipeline node run.",
        ("pipeline", "node"),
        buckets=NODE_BUCKETS,
    ),
    MetricSpec(
        "llm_retries",
        Counter,
        "gateway_llm_retries_total",
        "LLM attempts retried, by upstream (primary, fallback) and the fault retried (timeout, unavailable, "
        "rate_limited, http_5xx).",
        ("upstream", "reason"),
    ),
    MetricSpec(
        "llm_breaker_state",
        Gauge,
        "gateway_llm_breaker_state",
        "Circuit breaker of an LLM upstream: 0 closed, 1 half-open, 2 open (the worst over live workers).",
        ("upstream",),
        multiprocess_mode="max",
    ),
    MetricSpec(
        "llm_breaker_transitions",
        Counter,
        "gateway_llm_breaker_transitions_total",
        "Circuit breaker transitions of an LLM upstream, by the state entered (open, half_open, closed).",
        ("upstream", "state"),
    ),
    MetricSpec(
        "llm_fallbacks",
        Counter,
        "gateway_llm_fallbacks_total",
        "LLM calls handed from the primary upstream to the fallback, by the primary's fault.",
        ("reason",),
    ),
    MetricSpec(
        "dependency_up",
        Gauge,
        "gateway_dependency_up",
        "1 when the last readiness probe (or, for redis, the last call) reached the dependency, else 0.",
        ("dependency",),
        multiprocess_mode="mostrecent",
    ),
    MetricSpec(
        "dependency_transitions",
        Counter,
        "gateway_dependency_transitions_total",
        "A degradable dependency (redis) going down or coming back, as seen by calls to it (state: down, up).",
        ("dependency", "state"),
    ),
    MetricSpec(
        "guard_pii",
        Counter,
        "gateway_guard_pii_total",
        "Personal data found in requests, by category and what the tenant's policy did (masked, blocked).",
        ("category", "action"),
    ),
    MetricSpec(
        "guard_injections",
        Counter,
        "gateway_guard_injections_total",
        "Injections found: where (prompt, passage) and what the policy did (flagged, redacted, dropped, refused).",
        ("source", "action"),
    ),
    MetricSpec(
        "guard_duration",
        Histogram,
        "gateway_guard_check_seconds",
        "Time one guardrail check took (check: pii, injection).",
        ("check",),
        buckets=GUARD_BUCKETS,
    ),
)


class GatewayMetrics:
    """The metric objects; :class:`gateway.observability.recorder.Recorder` is what updates them.

    The attributes are declared here so callers and mypy see each metric's type; ``__init__`` creates
    them from :data:`METRICS`.
    """

    requests: Counter
    request_duration: Histogram
    in_flight: Gauge
    route_decisions: Counter
    escalations: Counter
    llm_calls: Counter
    llm_errors: Counter
    llm_tokens: Counter
    llm_duration: Histogram
    cost: Counter
    retrieval_verdicts: Counter
    corrective_loops: Counter
    curation_answers: Counter
    route_outcomes: Counter
    eval_score: Gauge
    knowledge_gaps_open: Gauge
    groundedness_failures: Counter
    sentences_withheld: Counter
    cache_requests: Counter
    node_duration: Histogram
    llm_retries: Counter
    llm_breaker_state: Gauge
    llm_breaker_transitions: Counter
    llm_fallbacks: Counter
    dependency_up: Gauge
    dependency_transitions: Counter
    guard_pii: Counter
    guard_injections: Counter
    guard_duration: Histogram

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        for spec in METRICS:
            setattr(self, spec.attribute, spec.create(self.registry))

    def initialise(
        self,
        *,
        classifier: str,
        cache_layers: Iterable[str],
        dependencies: Iterable[str] = (),
        llm_upstreams: Iterable[str] = (),
    ) -> None:
        """Create the series every deployment will have at zero, so ``rate()`` sees their first increment.

        A counter series that appears at 1 has no increase in Prometheus' eyes until it moves again; the
        label values here are the bounded, known ones (LLM node/model series appear with their first call).
        """
        for route in ROUTES:
            for cached in ("true", "false"):
                self.requests.labels(route, "200", cached)
                self.request_duration.labels(route, cached)
            for name in (classifier, "override"):
                self.route_decisions.labels(route, name)
        self.escalations.labels("single_hop", "multi_hop", "retrieval_incorrect")
        for pipeline in ("single_hop", "corrective"):
            for verdict in VERDICTS:
                self.retrieval_verdicts.labels(pipeline, verdict)
        for reason in LOOP_REASONS:
            self.corrective_loops.labels(reason)
        for layer in cache_layers:
            for result in ("hit", "miss", "error"):
                self.cache_requests.labels(layer, result)
        for dependency in dependencies:
            for state in ("down", "up"):
                self.dependency_transitions.labels(dependency, state)
        for upstream in llm_upstreams:
            self.llm_breaker_state.labels(upstream).set(0)
            for state in BREAKER_STATES:
                self.llm_breaker_transitions.labels(upstream, state)
            for reason in RETRY_REASONS:
                self.llm_retries.labels(upstream, reason)
        for reason in (*RETRY_REASONS, "circuit_open"):
            self.llm_fallbacks.labels(reason)  # zero without a fallback: dashboards and alerts see a series

    def exposition(self) -> bytes:
        """The text format for ``/metrics``: this process's registry, or every worker's in multiprocess mode."""
        path = multiprocess_dir()
        if path is None:
            return generate_latest(self.registry)
        combined = CollectorRegistry()
        multiprocess.MultiProcessCollector(combined, path=str(path))  # type: ignore[no-untyped-call]
        return generate_latest(combined)

    def close(self) -> None:
        """Drop this worker's live gauges so ``in_flight`` stops counting a worker that exited."""
        path = multiprocess_dir()
        if path is not None:
            multiprocess.mark_process_dead(os.getpid(), str(path))  # type: ignore[no-untyped-call]
