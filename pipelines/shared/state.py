"""State every pipeline shares, and how a node sees its own update before LangGraph merges it.

Graph states are dataclasses with defaults, as in LangGraph's templates: a node reads
``state.answer`` (never ``state.get("answer", "")``) and returns only the fields it changes. Every
list that grows over a run has a reducer, so a node returns only its new items.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from pipelines.shared.deps import LLMCall, Passage
from pipelines.shared.events import PipelineEvent

Update = dict[str, Any]
StateT = TypeVar("StateT", bound="PipelineState")


@dataclass(kw_only=True)
class PipelineState:
    query: str
    tenant: str
    answer: str = ""
    sources: list[Passage] = field(default_factory=list)
    context: list[Passage] = field(default_factory=list)
    abstained: bool = False
    events: Annotated[list[PipelineEvent], operator.add] = field(default_factory=list)
    llm_calls: Annotated[list[LLMCall], operator.add] = field(default_factory=list)


def advanced(state: StateT, update: Update) -> StateT:
    """``state`` after ``update``, merged as LangGraph merges it: through a field's reducer, else replaced.

    A node that decides where its graph goes next decides on this view, so the decision sees the
    node's own update exactly as the next node will.
    """
    schema: type = type(state)  # a class is hashable, whatever its instances are
    reducers = _reducers(schema)
    merged = {
        key: reducers[key](getattr(state, key), value) if key in reducers else value for key, value in update.items()
    }
    return dataclasses.replace(state, **merged)


@functools.cache  # per state class: type hints are resolved once, not per merged update
def _reducers(schema: type) -> dict[str, Callable[[Any, Any], Any]]:
    hints = typing.get_type_hints(schema, include_extras=True)
    return {
        name: hint.__metadata__[-1]
        for name, hint in hints.items()
        if typing.get_origin(hint) is Annotated and callable(hint.__metadata__[-1])
    }
