"""State of the corrective graph. Every decision is kept here as well as in ``steps``."""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from pipelines.shared.deps import Passage
from pipelines.shared.relevance import Verdict
from pipelines.shared.state import PipelineInput, PipelineOutput

StopReason = Literal["answered", "max_rewrites", "max_llm_calls", "max_seconds", "no_evidence", "unsupported"]


class CorrectiveState(PipelineInput, PipelineOutput):
    top_k: int
    started_at: float
    query_vector: NotRequired[list[float] | None]
    search_query: NotRequired[str]
    queries: NotRequired[list[str]]
    seen: NotRequired[list[str]]
    candidates: NotRequired[list[Passage]]
    evidence: NotRequired[list[Passage]]
    confirmed: NotRequired[list[str]]  # chunk ids of evidence judged relevant, not merely kept undecided
    strips: NotRequired[list[Passage]]
    verdict: NotRequired[Verdict]
    verdicts: NotRequired[list[Verdict]]
    rewrites: NotRequired[int]
    regenerated: NotRequired[bool]
    answered_with: NotRequired[int]
    grounded: NotRequired[bool]
    useful: NotRequired[bool]
    unsupported_claims: NotRequired[list[str]]
    missing: NotRequired[str]
    fallback: NotRequired[bool]
    best: NotRequired[dict[str, Any]]
    stop_reason: NotRequired[StopReason]
