"""State and runtime context of the single-hop pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.shared import (
    DEFAULT_ASSISTANT,
    NO_TELEMETRY,
    Assistant,
    ChatClient,
    GroundingPolicy,
    Passage,
    PipelineState,
    PipelineTelemetry,
    RelevanceModel,
    Retriever,
    Verdict,
    Visibility,
)


@dataclass(kw_only=True)
class SingleHopState(PipelineState):
    top_k: int
    # Whose request it is: every retrieval of the run searches what this reader may see. No default, so a run
    # started without it fails at once instead of searching the whole tenant.
    visibility: Visibility
    query_vector: list[float] | None = None
    allow_escalation: bool = False
    passages: list[Passage] = field(default_factory=list)
    verdict: Verdict | None = None
    escalate: bool = False  # assess_retrieval's decision: end here and let the route table escalate


@dataclass(frozen=True, kw_only=True)
class SingleHopContext:
    """``lower``/``upper``: the fast scorer's thresholds; all below ``lower`` is *Incorrect*."""

    llm: ChatClient
    retriever: Retriever
    grounding: GroundingPolicy
    relevance: RelevanceModel
    lower: float
    upper: float
    assistant: Assistant = DEFAULT_ASSISTANT  # the tenant's, set per request by the route table
    telemetry: PipelineTelemetry = NO_TELEMETRY
    # Whether the run streams: the answer's text goes to the run's stream writer as it is cleared to leave.
    live: bool = False
