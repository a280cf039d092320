"""Wire types of the curation endpoints (msgspec, validated by Litestar like the v1 API's)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from gateway.curation.askers import RunAs
from gateway.curation.evaluator import Rule, RuleKind
from gateway.curation.gaps import Diagnosis, Gap
from gateway.curation.models import EvalRun, Resolution, RunState
from gateway.knowledge import DocumentIn, Tenant
from pipelines.shared import Visibility

ResponseRef = Annotated[str, Meta(min_length=1, max_length=64)]


class FeedbackRequest(msgspec.Struct, kw_only=True):
    rating: Literal["up", "down"]
    response_id: Annotated[ResponseRef | None, Meta(description="The response_id of /v1/query or chat.")] = None
    trace_id: Annotated[str, Meta(pattern=r"^[0-9a-f]{32}$")] | None = None
    comment: Annotated[str, Meta(max_length=2000)] | None = None
    expected_answer: Annotated[str, Meta(max_length=4000)] | None = None
    tenant: Tenant = "default"


class FeedbackResponse(msgspec.Struct):
    id: str
    linked: Annotated[bool, Meta(description="The named answer was found.")]
    recorded: Annotated[bool, Meta(description="The answer is on record for curation.")]


class GapRecordOut(msgspec.Struct, kw_only=True):
    """One question of a gap, with who asked it."""

    id: Annotated[str, Meta(description="The answer's response id.")]
    question: str
    user_id: Annotated[str | None, Meta(description="Who asked (null: the request named no user).")]
    visibility: Annotated[
        str,
        Meta(
            description="The key of the visibility the answer ran under, and a re-run runs under ('all': every "
            "document; the tenant-open key for questions asked before readers were recorded)."
        ),
    ]
    asked_at: str


class GapOut(msgspec.Struct):
    id: str
    diagnosis: Annotated[
        Diagnosis,
        Meta(
            description="stale, generation, ranking, restricted (the answer is held only in documents its askers may "
            "not read: an access decision), or knowledge_gap (nothing holds it: add a verified document)."
        ),
    ]
    visibility: Annotated[
        str,
        Meta(
            description="The key of the visibility every question of the gap was asked under: gaps never mix "
            "visibilities, and the evidence searched only what it allows."
        ),
    ]
    evidence: dict[str, Any]
    count: int
    examples: list[str]
    reasons: list[str]
    first_seen: str
    last_seen: str
    expected_answer: str | None
    records: Annotated[list[GapRecordOut], Meta(description="The gap's questions, each with who asked it.")] = []


class GapsResponse(msgspec.Struct):
    tenant: str
    gaps: list[GapOut]


class RuleIn(msgspec.Struct, kw_only=True):
    kind: RuleKind
    value: Annotated[str, Meta(min_length=1, max_length=1000)]
    weight: Annotated[float, Meta(gt=0, le=100)] = 1.0


class ResolutionRequest(msgspec.Struct, kw_only=True):
    tenant: Tenant = "default"
    documents: Annotated[list[DocumentIn], Meta(min_length=1, max_length=32)]
    rules: Annotated[list[RuleIn], Meta(max_length=50)] = []


class ResolutionOut(msgspec.Struct):
    id: str
    gap_id: str
    closed: bool
    score_before: float
    score_after: float
    document_ids: list[str]
    cases: list[dict[str, Any]]


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def gap_out(gap: Gap, tenant_open: Visibility) -> GapOut:
    """``tenant_open``: the visibility of questions asked before readers were recorded."""
    return GapOut(
        id=gap.id,
        diagnosis=gap.diagnosis,
        visibility=gap.visibility.key(),
        evidence=gap.evidence,
        count=len(gap.records),
        examples=gap.questions[:5],
        reasons=sorted({reason for r in gap.records for reason in r.reasons}),
        first_seen=iso(gap.records[0].created_at),
        last_seen=iso(gap.records[-1].created_at),
        expected_answer=gap.expected_answer,
        records=[
            GapRecordOut(
                id=r.id,
                question=r.question,
                user_id=r.asker.user_id,
                visibility=r.asker.key(tenant_open),
                asked_at=iso(r.created_at),
            )
            for r in gap.records
        ],
    )


def resolution_out(resolution: Resolution) -> ResolutionOut:
    return ResolutionOut(
        id=resolution.id,
        gap_id=resolution.gap_id,
        closed=resolution.closed,
        score_before=resolution.score_before,
        score_after=resolution.score_after,
        document_ids=resolution.document_ids,
        cases=resolution.cases,
    )


def rules_of(rules: list[RuleIn]) -> list[Rule]:
    return [Rule(kind=r.kind, value=r.value, weight=r.weight) for r in rules]


SUITE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # fits the store's suite column (64)


class EvalCaseRequest(msgspec.Struct, kw_only=True):
    tenant: Tenant = "default"
    question: Annotated[str, Meta(min_length=1, max_length=4000)]
    rules: Annotated[list[RuleIn], Meta(max_length=50)] = []
    reference_answer: Annotated[str, Meta(max_length=8000)] | None = None


class EvalCaseOut(msgspec.Struct):
    id: str
    suite: str


class RunAsIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A user to ask a suite's cases as. Checked as the identity module checks a named user (422 otherwise): a user
    id of 1 to 256 characters, at most 512 group names, none starting with '*' or '~' (a group path's one leading
    '/', as Keycloak sends them, is dropped: "/eng/platform" is the group "eng/platform")."""

    user_id: str
    groups: list[str] = []


class RunAsOut(msgspec.Struct):
    user_id: str
    groups: list[str]


class EvalRunRequest(msgspec.Struct, kw_only=True):
    tenant: Tenant = "default"
    run_as: Annotated[
        RunAsIn | None,
        Meta(description="Ask this run's cases as this user (else as the suite's run_as, else as no user)."),
    ] = None


class EvalSuiteRequest(msgspec.Struct, kw_only=True):
    tenant: Tenant = "default"
    run_as: Annotated[
        RunAsIn | None,
        Meta(description="The user the suite's runs ask as, knowledge-change runs included; null: no user."),
    ] = None


class EvalSuiteOut(msgspec.Struct, kw_only=True):
    tenant: str
    suite: str
    run_as: RunAsOut | None


def run_as_out(run_as: RunAs | None) -> RunAsOut | None:
    return None if run_as is None else RunAsOut(user_id=run_as.user_id, groups=list(run_as.groups))


class EvalRunOut(msgspec.Struct, kw_only=True):
    id: str
    suite: str
    trigger: Annotated[
        str, Meta(description="manual, or knowledge_change: run by itself after the tenant's knowledge changed.")
    ]
    state: Annotated[
        RunState,
        Meta(description="running until every case is answered and scored, then done, or failed (see error)."),
    ]
    score: Annotated[float | None, Meta(description="The cases' mean score in [0, 1], once done; null before.")]
    cases: Annotated[
        list[dict[str, Any]],
        Meta(
            description="Per case: question, answer, score, rules, judge. Empty while running; a failed run's "
            "holds the cases scored before it failed."
        ),
    ]
    started_at: str
    finished_at: Annotated[str | None, Meta(description="null while running.")]
    error: Annotated[str | None, Meta(description="Why a failed run failed; null otherwise.")]
    run_as: Annotated[
        RunAsOut | None,
        Meta(description="The user its cases were asked as; null: no user (what is open to the whole tenant)."),
    ] = None


class EvalRunsResponse(msgspec.Struct):
    tenant: str
    suite: str
    runs: list[EvalRunOut]


def run_out(run: EvalRun) -> EvalRunOut:
    return EvalRunOut(
        id=run.id,
        suite=run.suite,
        trigger=run.trigger,
        state=run.state,
        score=run.score,
        cases=run.cases,
        started_at=iso(run.started_at),
        finished_at=None if run.finished_at is None else iso(run.finished_at),
        error=run.error,
        run_as=run_as_out(run.run_as),
    )


class RouteOutcomesOut(msgspec.Struct, kw_only=True):
    tenant: str
    since: str
    router_version: Annotated[
        str | None,
        Meta(description="The router in use, which the counts are of (null: the LLM classifier routes)."),
    ]
    counts: Annotated[
        dict[str, int],
        Meta(
            description="Outcomes recorded under the router in use. right; over_routed: multi_hop where one document "
            "answered; under_routed: escalated."
        ),
    ]
    disliked: Annotated[int, Meta(description="Of those, answers rated down (reported, not used to recalibrate).")]
    accuracy_estimate: Annotated[float | None, Meta(description="right / all those outcomes; null without any.")]
    stale_outcomes: Annotated[
        int,
        Meta(
            description="Outcomes in the window recorded under another router version (or before versions were "
            "recorded): not counted above, not used to recalibrate."
        ),
    ]
    multi_hop_threshold: Annotated[
        float,
        Meta(description="The threshold routing uses: the router's default unless a current calibration applies."),
    ]
    calibrated: Annotated[bool, Meta(description="Whether an operator applied a recalibrated threshold.")]
    calibration_stale: Annotated[
        bool,
        Meta(
            description="The applied calibration was made for another router version: it is set aside (the default "
            "routes) until the tenant is recalibrated."
        ),
    ]
    named_documents_rule: Annotated[
        bool,
        Meta(
            description="Whether the named-documents rule decides (a question asking about two of the tenant's "
            "documents by title routes multi_hop): on unless a current calibration turned it off."
        ),
    ] = True
    named_outcomes: Annotated[
        int, Meta(description="Of the outcomes counted, those whose question asked about two documents by title.")
    ] = 0
    named_accuracy_estimate: Annotated[
        float | None, Meta(description="right / those named-documents outcomes; null without any.")
    ] = None


class RecalibrationRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    apply: Annotated[bool, Meta(description="false: only say what the outcomes propose; true: store it.")] = False
    days: Annotated[float, Meta(gt=0, le=365)] = 30.0
    min_outcomes: Annotated[int, Meta(ge=1, le=100_000)] = 20


class CalibrationOut(msgspec.Struct, kw_only=True):
    tenant: str
    outcomes: int
    current_threshold: float
    multi_hop_threshold: float
    accuracy_before: Annotated[
        float, Meta(description="Share of the outcomes the current threshold and named-documents rule route right.")
    ]
    accuracy_after: Annotated[float, Meta(description="The same with the proposed ones.")]
    router_version: Annotated[
        str | None, Meta(description="The router version the threshold is for: it applies to no other.")
    ]
    applied: bool
    current_named_documents_rule: Annotated[
        bool, Meta(description="Whether the named-documents rule decides now for the tenant.")
    ] = True
    named_documents_rule: Annotated[
        bool,
        Meta(
            description="Whether it should: turned off only where the threshold routes strictly more of all the "
            "outcomes right, on at least 5 outcomes of the questions it covers; kept as it is on a tie."
        ),
    ] = True
    named_outcomes: Annotated[
        int, Meta(description="Of the outcomes, those whose question asked about two documents by title.")
    ] = 0
