"""The steps of a request as clients get them: typed events, and their text form.

The pipelines' events (:mod:`pipelines.shared.events`) plus the gateway's own (the router's model
call, a semantic cache hit, a chat follow-up's rewrite) make the ``events`` list of a response;
:func:`render_steps` turns them into the ``steps`` strings clients have always read. It is the only
place that text is made: nothing parses it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

from pipelines.shared import (
    Assess,
    Check,
    Escalate,
    Evaluate,
    Event,
    Generate,
    PipelineEvent,
    PlanHop,
    Refine,
    Retrieve,
    Rewrite,
    SearchHop,
    SearchMore,
    Stop,
    Withhold,
)


class RouteQuery(Event, tag="route_query", frozen=True):
    """The router asked the model which route to take."""

    route: str
    classifier: str


class SemanticCacheHit(Event, tag="semantic_cache", frozen=True):
    """A paraphrase's cached answer was served; ``similarity`` is the cosine of the two questions."""

    similarity: float


class RouteClamp(Event, tag="route_clamp", frozen=True):
    """The router picked a route the tenant's assistant profile does not allow; the nearest allowed one ran."""

    from_route: str
    to_route: str


class RewriteFollowup(Event, tag="rewrite_followup", frozen=True):
    """A chat follow-up was made self-contained before routing (``changed``: the model altered it)."""

    changed: bool


StepEvent = PipelineEvent | RouteQuery | SemanticCacheHit | RewriteFollowup | RouteClamp

_ANSWER_STEPS = {
    "answer": "generate_answer",
    "regenerate": "regenerate_answer",
    "direct": "answer_directly",
    "cautious": "cautious_answer",
    "keep_best": "keep_best_answer",
    "plain": "answer_plainly",
    "reuse_plain": "reuse_plain_answer",
    "keep_plain": "keep_plain_answer",
}


def render_steps(events: Sequence[StepEvent]) -> list[str]:
    return [step_text(event) for event in events]


def step_text(event: StepEvent) -> str:
    """The text of one step, word for word as the API has always written it."""
    match event:
        case Retrieve(k=k, found=found):
            return f"retrieve(k={k}, found={found})"
        case Assess(verdict=verdict):
            return f"assess_retrieval: {verdict}"
        case Evaluate(verdict=verdict, kept=kept, total=total, graded=graded):
            return f"evaluate: {verdict} (kept {kept}/{total}, llm graded {graded})"
        case PlanHop(hop=hop, query=query, done=done, bridges=bridges):
            plan = "evidence suffices" if done else query[:120]
            return f"plan_hop({hop}): {plan}" + (f" (kept {bridges} bridge passage(s))" if bridges else "")
        case SearchHop(hop=hop, k=k, new=new):
            return f"search_hop({hop}, k={k}, new={new})"
        case Rewrite(round=round_, query=query):
            return f"rewrite_query({round_}): {query[:120]}"
        case SearchMore(source=source, queries=queries, new=new):
            return f"search_more({source}, queries={queries}, new={new})"
        case Refine(strips=strips, passages=passages):
            return f"refine(strips from {strips}/{passages} passages)"
        case Generate(mode=mode, abstention=abstention):
            return _ANSWER_STEPS[mode] + (f" (abstained: {abstention})" if abstention is not None else "")
        case Withhold(index=index, reason=reason, missing=missing):
            why = f"{reason.replace('_', ' ')}" + (f": {', '.join(missing)}" if missing else "")
            return f"withhold(sentence {index + 1}): {why}"
        case Check():
            return _check_text(event)
        case Escalate(from_route=source, to_route=target, reason=reason):
            return f"escalate: {source} -> {target} ({reason.replace('_', ' ')})"
        case Stop(reason=reason):
            return f"stop: {reason}"
        case RouteQuery():
            return "route_query"
        case SemanticCacheHit(similarity=similarity):
            return f"semantic_cache(similarity={similarity:.3f})"
        case RewriteFollowup(changed=changed):
            return f"rewrite_followup(changed={changed})"
        case RouteClamp(from_route=source, to_route=target):
            return f"route_clamp: {source} -> {target} (not allowed by the assistant profile)"
        case _:
            assert_never(event)


def _check_text(check: Check) -> str:
    if check.outcome == "skipped":
        return f"check_{check.critic}: skipped ({check.note})"
    if check.critic == "grounded":
        passed = check.outcome == "passed"
        return "check_grounded: supported" if passed else f"check_grounded: unsupported {list(check.claims[:3])}"
    return "check_useful: yes" if check.outcome == "passed" else f"check_useful: no ({check.note})"
