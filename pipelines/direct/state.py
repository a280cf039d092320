"""State of the direct pipeline."""

from __future__ import annotations

from pipelines.shared.state import PipelineInput, PipelineOutput


class DirectState(PipelineInput, PipelineOutput):
    pass
