"""State and runtime context of the direct pipeline."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.shared import DEFAULT_ASSISTANT, NO_TELEMETRY, Assistant, ChatClient, PipelineState, PipelineTelemetry


@dataclass(kw_only=True)
class DirectState(PipelineState):
    """The shared fields alone: the question in, the answer out."""


@dataclass(frozen=True, kw_only=True)
class DirectContext:
    llm: ChatClient
    assistant: Assistant = DEFAULT_ASSISTANT  # the tenant's, set per request by the route table
    telemetry: PipelineTelemetry = NO_TELEMETRY
    # Whether the run streams: the answer's text goes to the run's stream writer as it is cleared to leave.
    live: bool = False
