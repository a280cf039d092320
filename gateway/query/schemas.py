"""Wire types of the v1 API. msgspec structs: Litestar validates them natively and fast."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from gateway.knowledge import Tenant
from gateway.query.steps import StepEvent
from routes.types import RouteRequest


class QueryRequest(msgspec.Struct, kw_only=True):
    query: Annotated[str, Meta(description="The user's question; 1 to GATEWAY_MAX_QUERY_CHARS characters.")]
    tenant: Tenant = "default"
    route: RouteRequest = "auto"
    top_k: Annotated[int, Meta(ge=1, le=100)] | None = None
    allow_escalation: Annotated[
        bool, Meta(description="Let single_hop escalate to the corrective pipeline when retrieval fails.")
    ] = True
    include_passages: Annotated[
        bool,
        Meta(description="Return the numbered passages the answer's [n] citations point to, with their text."),
    ] = False


class RouteRequestBody(msgspec.Struct, kw_only=True):
    query: str
    tenant: Tenant = "default"


class Source(msgspec.Struct):
    id: str
    title: str
    score: float
    section: str = ""  # the best chunk's heading path in its file ("Billing › Failed payments"); "" for plain text


class Passage(msgspec.Struct):
    """One passage as the generator was given it: the answer's citation ``[n]`` is this passage."""

    n: int
    chunk_id: str
    doc_id: str
    title: str
    section: str
    score: float
    text: str


class TimedStep(msgspec.Struct):
    """One step of the request on the gateway's clock: the router's decision (``route``), a pipeline node, or an
    escalation; ``events`` are the indexes of the response's ``events`` the step added."""

    name: str
    start_ms: float
    ms: float
    events: list[int]


class Usage(msgspec.Struct):
    llm_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


class RouteProbe(msgspec.Struct, kw_only=True):
    """What one search of the tenant's knowledge base said about the query: the signals the router read."""

    tenant: str
    depth: Annotated[int, Meta(description="Passages asked for (at least what retrieval uses, so it can reuse them).")]
    signals: Annotated[
        dict[str, float],
        Meta(
            description="top_score, margin, coverage of the query's terms by the best document and by the top "
            "documents together, the share a second document adds, how many documents cover its parts, ..."
        ),
    ]
    covering_documents: Annotated[list[str], Meta(description="Document ids that cover the query's parts, in order.")]
    documents: Annotated[list[Source], Meta(description="The probe's documents, best chunk's score, best first.")]


class QueryResponse(msgspec.Struct):
    answer: str
    route: str
    route_confidence: float
    route_reason: str
    sources: list[Source]
    cached: bool
    usage: Usage
    latency_ms: float
    steps: Annotated[list[str], Meta(description="The steps taken, as text: the rendering of ``events``.")]
    classifier: str
    classified_route: str
    abstained: bool
    evidence: list[Source]
    stop_reason: str | None
    escalated_from: str | None
    trace_id: Annotated[
        str | None,
        Meta(description="OpenTelemetry trace id of this request (32 hex digits); null with tracing off."),
    ] = None
    events: Annotated[
        list[StepEvent],
        Meta(description="The steps taken, typed: one object per step, its ``kind`` naming it."),
    ] = []
    response_id: Annotated[
        str | None,
        Meta(description="This answer's id, new on every response (cached ones too): what POST /v1/feedback names."),
    ] = None
    timeline: Annotated[
        list[TimedStep],
        Meta(description="When each step ran, in ms from the request's arrival (a cached answer: when it was made)."),
    ] = []
    probe: Annotated[
        RouteProbe | None, Meta(description="What the router's search of the knowledge base said; null if none ran.")
    ] = None
    passages: Annotated[
        list[Passage] | None, Meta(description="The numbered passages, when the request set include_passages.")
    ] = None
    p_multi_hop: Annotated[
        float | None,
        Meta(
            description="The router's probability that a second document holds a part of the question (null: the "
            "LLM classifier decided, the caller forced the route, or the router answered direct before reading it)."
        ),
    ] = None
    router_version: Annotated[
        str | None,
        Meta(
            description="The version of the router model p_multi_hop came from: a tenant's recalibrated threshold "
            "applies to that version's probabilities only (null when the LLM classifier decided)."
        ),
    ] = None
    named_documents: Annotated[
        bool,
        Meta(
            description="The question asks about two or more of the tenant's documents by their titles: the router "
            "routes it multi_hop unless the tenant's recalibration turned that rule off."
        ),
    ] = False


class RouteResponse(msgspec.Struct, kw_only=True):
    route: Annotated[str, Meta(description="The route a query would run on: the router's, within the profile's.")]
    confidence: float
    reason: str
    classifier: str
    classified_route: Annotated[
        str, Meta(description="The router's own choice; differs from ``route`` when the profile does not allow it.")
    ]
    probe: RouteProbe | None = None
