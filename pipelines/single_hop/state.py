"""State of the single-hop pipeline."""

from __future__ import annotations

from typing import NotRequired

from pipelines.shared.deps import Passage
from pipelines.shared.relevance import Verdict
from pipelines.shared.state import PipelineInput, PipelineOutput


class SingleHopState(PipelineInput, PipelineOutput):
    top_k: int
    query_vector: NotRequired[list[float] | None]
    allow_escalation: NotRequired[bool]
    passages: NotRequired[list[Passage]]
    verdict: NotRequired[Verdict]
    escalate: NotRequired[bool]
