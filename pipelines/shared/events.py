"""What a pipeline did, step by step, as typed events.

Nodes append these to the state's ``events`` list; the gateway renders them to the ``steps`` text
clients read, once, at the API edge (:func:`gateway.query.steps.render_steps`), and sends them as they are
beside it. Tests, the evaluation harness and anything else that needs a fact (a verdict, a count, the
reason a run stopped) read the fields, never the text. msgspec structs tagged by ``kind``: they go on
the wire (and into the answer caches) as they are, and decode back to the right type.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from pipelines.shared.relevance import Verdict

StopReason = Literal[
    "answered", "max_rewrites", "max_llm_calls", "max_seconds", "no_evidence", "unsupported", "recursion_limit"
]
# How the answer came to be: grounded on the evidence (``answer``), again with the critic's feedback
# (``regenerate``), by the model alone (``direct``), as a statement of what the documents say
# (``cautious``), or the best earlier answer kept instead of a worse last one (``keep_best``). The corrective route
# first drafts plain RAG's answer on its first retrieval (``plain``), takes that draft again when its generator is
# handed the same passages (``reuse_plain``), and returns it when no later answer beats it (``keep_plain``).
AnswerMode = Literal["answer", "regenerate", "direct", "cautious", "keep_best", "plain", "reuse_plain", "keep_plain"]
Critic = Literal["grounded", "useful"]
CheckOutcome = Literal["passed", "failed", "skipped"]


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """One step of a request; ``kind`` (the tag) names it on the wire."""


class Retrieve(Event, tag="retrieve", frozen=True):
    k: int
    found: int


class Assess(Event, tag="assess", frozen=True):
    """single_hop's LLM-free retrieval check: the fast scorer's verdict over what was retrieved."""

    verdict: Verdict


class Evaluate(Event, tag="evaluate", frozen=True):
    """The corrective evaluator's round: ``kept`` of ``total`` candidates, ``graded`` of them by the LLM."""

    verdict: Verdict
    kept: int
    total: int
    graded: int


class Rewrite(Event, tag="rewrite", frozen=True):
    round: int
    query: str


class SearchMore(Event, tag="search_more", frozen=True):
    source: str
    queries: int
    new: int


class PlanHop(Event, tag="plan_hop", frozen=True):
    """Multi-hop planning after an evaluated retrieval: the next sub-question (``query``), or none (``done``).

    ``found`` is the fact of the evidence the planner built on; ``bridges`` counts the passages the evaluator
    had rejected that hold that fact and so became evidence (a bridge page names the entity, not the answer).
    """

    hop: int
    query: str = ""
    done: bool = False
    found: str = ""
    bridges: int = 0


class SearchHop(Event, tag="search_hop", frozen=True):
    """The tenant's store searched for hop ``hop``'s sub-question: ``new`` chunks not seen before."""

    hop: int
    k: int
    new: int


class Refine(Event, tag="refine", frozen=True):
    """``strips`` of the ``passages`` evidence passages reach the generator (whole: their strips chose them)."""

    strips: int
    passages: int


class Generate(Event, tag="generate", frozen=True):
    mode: AnswerMode = "answer"
    abstention: str | None = None  # why a grounded answer abstained, when the step should say so


WithholdReason = Literal["unsupported", "states_nothing", "declined"]


class Withhold(Event, tag="withhold", frozen=True):
    """A sentence of the generated answer that was never sent: ``index`` counts the answer's sentences from 0.

    ``unsupported``: it adds words or numbers the evidence lacks (``missing``, at most five), or the round judge
    finds no passage that holds its claim (``missing`` may then be empty); ``states_nothing``:
    citation numbers alone, or a sentence broken off before its claim; ``declined``: the model said the passages
    lack the answer after it had already answered from them.
    """

    index: int
    sentence: str
    reason: WithholdReason
    missing: tuple[str, ...] = ()


class AnswerText(msgspec.Struct, frozen=True):
    """Text of the answer cleared to reach the client now (LangGraph's ``custom`` stream carries it): checked
    sentences of a grounded answer, or the tokens of a direct one. Not an event: the answer holds the text."""

    text: str


class Check(Event, tag="check", frozen=True):
    """A Self-RAG critic's judgement. ``claims`` are the unsupported claims (``grounded``); ``note`` is
    what the answer misses (``useful``, failed) or why the check was skipped."""

    critic: Critic
    outcome: CheckOutcome
    claims: tuple[str, ...] = ()
    note: str = ""


class Escalate(Event, tag="escalate", frozen=True):
    from_route: str
    to_route: str
    reason: str


class Stop(Event, tag="stop", frozen=True):
    reason: StopReason


PipelineEvent = (
    Retrieve
    | Assess
    | Evaluate
    | PlanHop
    | SearchHop
    | Rewrite
    | SearchMore
    | Refine
    | Generate
    | Withhold
    | Check
    | Escalate
    | Stop
)
