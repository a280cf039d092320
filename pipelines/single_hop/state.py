"""State of the single-hop pipeline."""

from __future__ import annotations

from typing import NotRequired

from pipelines.shared.deps import Passage
from pipelines.shared.state import PipelineInput, PipelineOutput


class SingleHopState(PipelineInput, PipelineOutput):
    top_k: int
    query_vector: NotRequired[list[float] | None]
    passages: NotRequired[list[Passage]]
