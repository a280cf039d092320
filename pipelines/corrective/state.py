"""State and runtime context of the corrective graph.

Every decision is kept in the state as well as in ``events``: the routing decision of the last
deciding node (``next_step``) and, once the run is bound to end, why (``stop_reason``).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pipelines.corrective.floor import PlainDraft
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.shared import (
    DEFAULT_ASSISTANT,
    NO_TELEMETRY,
    Assistant,
    ChatClient,
    Embedder,
    Judged,
    Passage,
    PipelineState,
    PipelineTelemetry,
    Retriever,
    StopReason,
    Verdict,
    Visibility,
    WebSearch,
)

NextStep = Literal[
    "answer_plainly",
    "plan_hop",
    "search_hop",
    "rewrite_query",
    "refine",
    "generate",
    "check_useful",
    "cautious_answer",
    "finish",
]


def merge_passages(old: list[Passage], new: list[Passage]) -> list[Passage]:
    """The evidence reducer: new passages are appended once, known chunks are not repeated."""
    seen = {p.chunk_id for p in old}
    return [*old, *(p for p in new if p.chunk_id not in seen)]


@dataclass(frozen=True, slots=True)
class AnswerSnapshot:
    """An answer that passed its checks, kept so a worse later one never replaces it."""

    answer: str
    sources: list[Passage]
    context: list[Passage]


@dataclass(kw_only=True)
class CorrectiveState(PipelineState):
    top_k: int
    # Whose request it is: the first retrieval, every hop's searches and search-more all search what this reader
    # may see. No default, so a run started without it fails at once instead of searching the whole tenant.
    visibility: Visibility
    started_at: float  # on the context's clock
    query_vector: list[float] | None = None
    search_query: str = ""  # the query of the current follow-up round ("" in the first)
    queries: Annotated[list[str], operator.add] = field(default_factory=list)
    seen: Annotated[list[str], operator.add] = field(default_factory=list)  # chunk ids of every candidate
    rounds: Annotated[list[list[str]], operator.add] = field(default_factory=list)  # each round's, search order
    candidates: list[Passage] = field(default_factory=list)  # the current round's search results
    first_round: list[Passage] = field(default_factory=list)  # plain RAG's context on the first retrieval
    plain: PlainDraft | None = None  # plain RAG's answer on it, the floor (policy.plain_floor)
    evidence: Annotated[list[Passage], merge_passages] = field(default_factory=list)
    confirmed: Annotated[list[str], operator.add] = field(default_factory=list)  # judged relevant, not undecided
    bridges: Annotated[list[str], operator.add] = field(default_factory=list)  # rejected pages a hop built on
    strips: list[Passage] = field(default_factory=list)
    verdict: Verdict | None = None
    verdicts: Annotated[list[Verdict], operator.add] = field(default_factory=list)
    rewrites: int = 0
    hops: int = 0  # sub-questions planned (and searched) so far
    hop_done: bool = False  # the planner found the evidence sufficient
    hop_facts: Annotated[list[str], operator.add] = field(default_factory=list)  # what each hop built on
    regenerated: bool = False
    answered_with: int = -1  # how much evidence the last answer was generated from
    drafted: list[Judged] = field(default_factory=list)  # the last generation's sentences, as the gate judged them
    committed: bool = False  # the answer is final: a generation commits() allowed passed a sentence
    grounded: bool = False
    useful: bool = False
    unsupported_claims: list[str] = field(default_factory=list)
    missing: str = ""
    fallback: bool = False
    best: AnswerSnapshot | None = None
    next_step: NextStep | None = None
    stop_reason: StopReason | None = None


@dataclass(frozen=True, kw_only=True)
class CorrectiveContext:
    """What the corrective nodes run on; built once at start-up, handed to every run."""

    llm: ChatClient
    retriever: Retriever
    search: WebSearch
    embedder: Embedder
    policy: CorrectivePolicy
    assistant: Assistant = DEFAULT_ASSISTANT  # the tenant's, set per request by the route table
    telemetry: PipelineTelemetry = NO_TELEMETRY
    # Whether the run streams: the answer's text goes to the run's stream writer as it is cleared to leave.
    live: bool = False
    clock: Callable[[], float] = time.monotonic  # the time budget's clock; ``started_at`` is read on it
