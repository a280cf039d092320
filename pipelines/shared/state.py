"""State fields every pipeline shares, with the reducers that let nodes append to them."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from pipelines.shared.deps import LLMCall, Passage


class PipelineInput(TypedDict):
    query: str
    tenant: str


class PipelineOutput(TypedDict, total=False):
    answer: str
    sources: list[Passage]
    context: list[Passage]
    abstained: bool
    steps: Annotated[list[str], operator.add]
    llm_calls: Annotated[list[LLMCall], operator.add]
