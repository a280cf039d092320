"""``POST /v1/feedback``, ``GET /v1/knowledge-gaps``, a gap's resolution, route outcomes and their recalibration,
the training-pair export, and evaluation suites: their cases, and their runs (started in the background and polled,
:mod:`gateway.curation.suites`)."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Response, get, post, put
from litestar.datastructures import ResponseHeader, State
from litestar.di import NamedDependency
from litestar.params import JSONBody, PathParameter, QueryParameter

from gateway.access import BEARER, Principal, require
from gateway.curation.askers import AskedBy, RunAs, run_as
from gateway.curation.schemas import (
    SUITE_PATTERN,
    CalibrationOut,
    EvalCaseOut,
    EvalCaseRequest,
    EvalRunOut,
    EvalRunRequest,
    EvalRunsResponse,
    EvalSuiteOut,
    EvalSuiteRequest,
    FeedbackRequest,
    FeedbackResponse,
    GapsResponse,
    RecalibrationRequest,
    ResolutionOut,
    ResolutionRequest,
    RouteOutcomesOut,
    RunAsIn,
    gap_out,
    iso,
    resolution_out,
    rules_of,
    run_as_out,
    run_out,
)
from gateway.curation.service import Curation
from gateway.errors import ClientError, NotFoundError, problem_responses
from gateway.knowledge import valid_documents
from gateway.profiles import Profiles
from gateway.providers import TENANT_PATTERN
from gateway.query import QueryService
from gateway.settings import Settings

TenantParam = Annotated[str, QueryParameter(pattern=TENANT_PATTERN)]
# The pattern on the parameter itself: Litestar neither checks nor documents a msgspec Meta inside a path parameter's
# type, and a suite name beyond the store's column is a database error (503) on PostgreSQL instead of a 400.
SuiteParam = Annotated[str, PathParameter(pattern=SUITE_PATTERN)]
# An admin's filters of curation records by who asked: a user id, a visibility key (Visibility.key()).
UserParam = Annotated[
    str | None, QueryParameter(min_length=1, max_length=256, description="Only what this user id asked.")
]
VisibilityParam = Annotated[
    str | None,
    QueryParameter(
        pattern=r"^(all|[0-9a-f]{16})$",
        description="Only what was asked under this visibility key ('all': unrestricted; the tenant-open key for "
        "questions asked before readers were recorded).",
    ),
]
RUN_AS_422 = {422: "run_as names a reserved group ('*' or '~' first), or a user id or groups out of bounds"}


def _run_as(named: RunAsIn | None) -> RunAs | None:
    return None if named is None else run_as(named.user_id, named.groups)


def provide_curation(state: State) -> Curation:
    curation: Curation | None = state.curation
    if curation is None:
        raise NotFoundError("Curation is disabled (GATEWAY_CURATION_ENABLED=false).")
    return curation


class FeedbackController(Controller):
    path = "/v1/feedback"
    tags = ["curation"]
    before_request = require("query")
    security = [{BEARER: []}]

    @post("/", status_code=202, summary="Rate an answer up or down", responses=problem_responses(400, 401, 403, 404))
    async def feedback(
        self,
        data: JSONBody[FeedbackRequest],
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
    ) -> FeedbackResponse:
        if not data.response_id and not data.trace_id:
            raise ClientError("Name the answer: send its response_id (or its trace_id).")
        result = await curation.feedback(
            principal.tenant_for(data.tenant),
            response_id=data.response_id,
            trace_id=data.trace_id,
            rating=data.rating,
            comment=data.comment,
            expected_answer=data.expected_answer,
        )
        return FeedbackResponse(id=result.id, linked=result.linked, recorded=result.recorded)


class CurationController(Controller):
    path = "/v1"
    tags = ["curation"]
    # Question texts of every user of the tenant, and writes to its knowledge.
    before_request = require("admin")
    security = [{BEARER: []}]

    @get(
        "/knowledge-gaps",
        summary="Open questions grouped by similarity, each with its diagnosis and evidence",
        responses=problem_responses(400, 401, 403, 404),
    )
    async def gaps(
        self,
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
        tenant: TenantParam = "default",
        user: UserParam = None,
        visibility: VisibilityParam = None,
    ) -> GapsResponse:
        tenant = principal.tenant_for(tenant)
        found = await curation.gaps(tenant, AskedBy.of(user, visibility))
        tenant_open = curation.nobody().visibility
        return GapsResponse(tenant=tenant, gaps=[gap_out(g, tenant_open) for g in found])

    @post(
        "/knowledge-gaps/{gap_id:str}/resolution",
        status_code=200,
        summary="Add verified documents to a gap, re-run its questions uncached and score before/after",
        responses=problem_responses(
            400, 401, 403, 404, 422, 502, 503, 504, described={422: "A document's access is invalid"}
        ),
    )
    async def resolve(
        self,
        gap_id: Annotated[str, PathParameter(max_length=80)],
        data: JSONBody[ResolutionRequest],
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
        settings: NamedDependency[Settings],
    ) -> ResolutionOut:
        documents = valid_documents(data.documents, settings.limits)
        resolution = await curation.resolve(principal.tenant_for(data.tenant), gap_id, documents, rules_of(data.rules))
        return resolution_out(resolution)

    @get(
        "/route-outcomes",
        summary="What routed answers showed about their routes: the tenant's route accuracy estimate",
        responses=problem_responses(400, 401, 403, 404, 503),
    )
    async def route_outcomes(
        self,
        curation: NamedDependency[Curation],
        query_service: NamedDependency[QueryService],
        principal: NamedDependency[Principal],
        tenant: TenantParam = "default",
        days: Annotated[float, QueryParameter(gt=0, le=365)] = 30.0,
    ) -> RouteOutcomesOut:
        version = query_service.router_version  # the router this app routes with: outcomes are judged against it
        report = await curation.route_report(principal.tenant_for(tenant), days, router_version=version)
        return RouteOutcomesOut(
            tenant=report.tenant,
            since=iso(report.since),
            router_version=report.router_version,
            counts=report.counts,
            disliked=report.disliked,
            accuracy_estimate=None if report.accuracy is None else round(report.accuracy, 4),
            stale_outcomes=report.stale_outcomes,
            multi_hop_threshold=report.multi_hop_threshold,
            calibrated=report.calibrated,
            calibration_stale=report.calibration_stale,
            named_documents_rule=report.named_documents_rule,
            named_outcomes=report.named_outcomes,
            named_accuracy_estimate=None if report.named_accuracy is None else round(report.named_accuracy, 4),
        )

    @post(
        "/route-outcomes/recalibration",
        status_code=200,
        summary="Propose (or, with apply, set) the tenant's routing threshold and named-documents rule from its route "
        "outcomes",
        responses=problem_responses(
            400,
            401,
            403,
            404,
            409,
            503,
            described={
                409: "Too few route outcomes of the router in use to recalibrate on (min_outcomes), or the LLM "
                "classifier routes (no p(multi_hop) to set a threshold on)"
            },
        ),
    )
    async def recalibrate(
        self,
        data: JSONBody[RecalibrationRequest],
        curation: NamedDependency[Curation],
        query_service: NamedDependency[QueryService],
        profiles: NamedDependency[Profiles],
        principal: NamedDependency[Principal],
        tenant: TenantParam = "default",
    ) -> CalibrationOut:
        tenant = principal.tenant_for(tenant)
        found = await curation.recalibrate(
            tenant,
            days=data.days,
            min_outcomes=data.min_outcomes,
            apply=data.apply,
            router_version=query_service.router_version,  # fitted to, and applied for, the router this app routes with
        )
        if data.apply:
            profiles.forget(tenant)  # this process routes by it from the next request; others within their TTL
        return CalibrationOut(
            tenant=tenant,
            outcomes=found.outcomes,
            current_threshold=found.current_threshold,
            multi_hop_threshold=round(found.multi_hop_threshold, 6),
            accuracy_before=found.accuracy_before,
            accuracy_after=found.accuracy_after,
            router_version=found.router_version,
            applied=data.apply,
            current_named_documents_rule=found.current_named_documents,
            named_documents_rule=found.named_documents,
            named_outcomes=found.named_outcomes,
        )

    @get(
        "/training-pairs",
        summary="JSONL (question, positive ids, negative ids) from resolved gaps and feedback",
        media_type="application/x-ndjson",
        responses=problem_responses(400, 401, 403, 404),
    )
    async def training_pairs(
        self,
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
        tenant: TenantParam = "default",
        user: UserParam = None,
        visibility: VisibilityParam = None,
    ) -> str:
        return await curation.training_pairs(principal.tenant_for(tenant), AskedBy.of(user, visibility))


class EvalSuiteController(Controller):
    path = "/v1/eval-suites"
    tags = ["curation"]
    before_request = require("admin")
    security = [{BEARER: []}]

    @post(
        "/{suite:str}/cases",
        status_code=201,
        summary="Add a case to a tenant's evaluation suite",
        responses=problem_responses(400, 401, 403, 404),
    )
    async def add_case(
        self,
        suite: SuiteParam,
        data: JSONBody[EvalCaseRequest],
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
    ) -> EvalCaseOut:
        tenant = principal.tenant_for(data.tenant)
        case = await curation.add_eval_case(tenant, suite, data.question, rules_of(data.rules), data.reference_answer)
        return EvalCaseOut(id=case.id, suite=suite)

    @put(
        "/{suite:str}",
        summary="Set whom a suite's runs ask as (run_as: a user id and groups; null: no user, tenant-open only)",
        responses=problem_responses(400, 401, 403, 422, 503, described=RUN_AS_422),
    )
    async def set_suite(
        self,
        suite: SuiteParam,
        data: JSONBody[EvalSuiteRequest],
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
    ) -> EvalSuiteOut:
        tenant = principal.tenant_for(data.tenant)
        named = _run_as(data.run_as)
        await curation.store.set_suite_run_as(tenant, suite, named)
        return EvalSuiteOut(tenant=tenant, suite=suite, run_as=run_as_out(named))

    @get(
        "/{suite:str}",
        summary="A suite's settings: whom its runs ask as",
        responses=problem_responses(400, 401, 403, 503),
    )
    async def suite_of(
        self,
        suite: SuiteParam,
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
        tenant: TenantParam = "default",
    ) -> EvalSuiteOut:
        tenant = principal.tenant_for(tenant)
        return EvalSuiteOut(
            tenant=tenant, suite=suite, run_as=run_as_out(await curation.store.suite_run_as(tenant, suite))
        )

    @post(
        "/{suite:str}/runs",
        status_code=202,
        summary="Start a run of a suite (answers computed fresh in the background, cache bypassed); poll its Location",
        description="Answered at once with the run in state running (or, while a manual run of the tenant's suite is "
        "running already, with that run); GET the Location until the state is done (score and cases filled) or failed "
        "(error says why).",
        response_headers=[
            ResponseHeader(
                name="Location",
                value="/v1/eval-suites/{suite}/runs/{run_id}?tenant={tenant}",  # its type is the header's schema
                description="The run, to poll.",
                required=True,
                documentation_only=True,
            )
        ],
        responses=problem_responses(400, 401, 403, 404, 422, 503, described=RUN_AS_422),
    )
    async def run(
        self,
        suite: SuiteParam,
        data: JSONBody[EvalRunRequest],
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
    ) -> Response[EvalRunOut]:
        tenant = principal.tenant_for(data.tenant)
        run = await curation.suites.start(tenant, suite, _run_as(data.run_as))
        location = f"{self.path}/{suite}/runs/{run.id}?tenant={tenant}"  # named: open access has no key's tenant
        return Response(run_out(run), status_code=202, headers={"Location": location})

    @get(
        "/{suite:str}/runs/{run_id:str}",
        summary="One run of a suite: its state, and its score and per-case breakdown once done",
        responses=problem_responses(400, 401, 403, 404),
    )
    async def run_of(
        self,
        suite: SuiteParam,
        run_id: Annotated[str, PathParameter(max_length=64)],
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
        tenant: TenantParam = "default",
    ) -> EvalRunOut:
        return run_out(await curation.suites.get(principal.tenant_for(tenant), suite, run_id))

    @get(
        "/{suite:str}/runs",
        summary="A suite's run history, newest first: running runs with their state, finished ones with per-case "
        "breakdowns",
        responses=problem_responses(400, 401, 403, 404),
    )
    async def history(
        self,
        suite: SuiteParam,
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
        tenant: TenantParam = "default",
    ) -> EvalRunsResponse:
        tenant = principal.tenant_for(tenant)
        runs = await curation.store.eval_runs(tenant, suite)
        return EvalRunsResponse(tenant=tenant, suite=suite, runs=[run_out(r) for r in runs])
