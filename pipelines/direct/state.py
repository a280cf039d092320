"""State and runtime context of the direct pipeline."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.shared.deps import ChatClient
from pipelines.shared.state import PipelineState
from pipelines.shared.telemetry import NO_TELEMETRY, PipelineTelemetry


@dataclass(kw_only=True)
class DirectState(PipelineState):
    """The shared fields alone: the question in, the answer out."""


@dataclass(frozen=True, kw_only=True)
class DirectContext:
    llm: ChatClient
    telemetry: PipelineTelemetry = NO_TELEMETRY
