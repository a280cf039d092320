"""What the curation store holds, as plain dataclasses (rows in, rows out)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from gateway.curation.askers import Asker, RunAs

Rating = Literal["up", "down"]
# An evaluation run answers in the background: ``running`` until every case is scored (``done``) or one could not be
# answered or scored (``failed``, with the reason).
RunState = Literal["running", "done", "failed"]
# Why an answer needs a human (one or more).
Reason = Literal["abstained", "incorrect_evidence", "ambiguous_evidence", "draft_rejected", "negative_feedback"]


@dataclass(frozen=True, slots=True)
class RetrievedDocument:
    id: str
    title: str
    score: float


@dataclass(slots=True)
class AnswerRecord:
    id: str
    tenant: str
    trace_id: str | None
    route: str
    reasons: list[str]
    verdicts: list[str]  # the retrieval evaluator's verdicts, in order (correct / ambiguous / incorrect)
    top_k: int  # how deep the answer's retrieval read (the deepest Retrieve step)
    documents: list[RetrievedDocument]
    cited: list[str]
    answer: str
    question: str
    embedding: list[float]
    created_at: float
    expected_answer: str | None = None
    resolution_id: str | None = None
    checks_failed: list[str] = field(default_factory=list)
    asker: Asker = field(default_factory=Asker)  # who asked, and the visibility the answer ran under

    def row(self) -> dict[str, Any]:
        row = asdict(self)
        row.pop("checks_failed")
        row.pop("asker")
        row["verdicts"] = {"retrieval": self.verdicts, "checks_failed": self.checks_failed}
        return row | self.asker.columns()

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> AnswerRecord:
        verdicts = row["verdicts"] or {}
        return cls(
            id=row["id"],
            tenant=row["tenant"],
            trace_id=row["trace_id"],
            route=row["route"],
            reasons=list(row["reasons"]),
            verdicts=list(verdicts.get("retrieval", [])),
            checks_failed=list(verdicts.get("checks_failed", [])),
            top_k=row["top_k"],
            documents=[RetrievedDocument(**d) for d in row["documents"]],
            cited=list(row["cited"]),
            answer=row["answer"],
            question=row["question"],
            embedding=list(row["embedding"]),
            created_at=row["created_at"],
            expected_answer=row["expected_answer"],
            resolution_id=row["resolution_id"],
            asker=Asker.from_row(row),
        )


@dataclass(slots=True)
class Feedback:
    id: str
    tenant: str
    response_id: str | None
    trace_id: str | None
    rating: Rating
    comment: str | None
    expected_answer: str | None
    question: str | None
    documents: list[RetrievedDocument]
    cited: list[str]
    created_at: float
    asker: Asker = field(default_factory=Asker)  # who asked the rated answer (its record's)

    def row(self) -> dict[str, Any]:
        row = asdict(self)
        row.pop("asker")
        columns = self.asker.columns()
        columns.pop("reader_source")
        return row | columns

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Feedback:
        values = {k: v for k, v in dict(row).items() if k not in ("user_id", "visibility_key", "visible_tags")}
        values["documents"] = [RetrievedDocument(**d) for d in row["documents"]]
        return cls(**values, asker=Asker.from_row(row))


@dataclass(slots=True)
class Resolution:
    id: str
    tenant: str
    gap_id: str
    document_ids: list[str]
    rules: list[dict[str, Any]]
    cases: list[dict[str, Any]]  # per question: question, before/after answers, their scores and breakdowns
    score_before: float
    score_after: float
    closed: bool
    created_at: float

    def row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Resolution:
        return cls(**dict(row))


@dataclass(slots=True)
class EvalCase:
    id: str
    tenant: str
    suite: str
    question: str
    rules: list[dict[str, Any]]
    reference: str | None
    created_at: float

    def row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> EvalCase:
        return cls(**dict(row))


@dataclass(frozen=True, slots=True)
class EvalRun:
    """One run of a suite. Frozen: the runner replaces a running run by its finished one, so a run handed to a caller
    (a POST's ``running`` answer) never changes under it."""

    id: str
    tenant: str
    suite: str
    trigger: str  # manual / knowledge_change
    score: float | None  # None until done
    cases: list[dict[str, Any]]  # per case: question, answer, score, rules, judge (a failed run's: those scored)
    started_at: float
    finished_at: float | None  # None while running
    state: RunState
    error: str | None = None  # why a failed run failed
    run_as: RunAs | None = None  # the user its cases were asked as (None: no user, tenant-open)

    def row(self) -> dict[str, Any]:
        row = asdict(self)
        row["run_as"] = None if self.run_as is None else self.run_as.stored()
        return row

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> EvalRun:
        values = dict(row)
        values["run_as"] = RunAs.from_stored(values.get("run_as"))
        return cls(**values)
