"""Where the corrective graph goes after each deciding node, and why a run stops.

Each decision is a pure function of the state as the node's own update leaves it (see
:func:`pipelines.shared.state.advanced`). The node records it, ``next_step`` for the routing edge
and ``stop_reason`` once the run is bound to end, so nothing is worked out again after the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pipelines.corrective.critique import CITATIONS_ONLY
from pipelines.corrective.state import CorrectiveContext, CorrectiveState, NextStep
from pipelines.shared import StopReason, Update, advanced


@dataclass(frozen=True, slots=True)
class Decision:
    next_step: NextStep
    stop_reason: StopReason | None = None
    loop: str | None = None  # why another round (or a regeneration) starts: the corrective_loop metric's label


Decide = Callable[[CorrectiveState, CorrectiveContext], Decision]


def decide(state: CorrectiveState, update: Update, ctx: CorrectiveContext, decision_of: Decide) -> Update:
    """``update`` plus the decision taken on the state it leads to."""
    decision = decision_of(advanced(state, update), ctx)
    if decision.loop is not None:
        ctx.telemetry.corrective_loop(decision.loop)
    return {**update, "next_step": decision.next_step, "stop_reason": decision.stop_reason}


def follow(state: CorrectiveState) -> NextStep:
    """The routing edge of every deciding node: where the node decided to go."""
    if state.next_step is None:
        raise RuntimeError("a corrective routing edge was reached before any node decided where to go")
    return state.next_step


def calls_left(state: CorrectiveState, ctx: CorrectiveContext) -> int:
    return ctx.policy.max_llm_calls - len(state.llm_calls)


def budget_stop(state: CorrectiveState, ctx: CorrectiveContext, needed: int = 1) -> StopReason | None:
    """The budget that refuses ``needed`` more model calls, if any."""
    if ctx.clock() - state.started_at >= ctx.policy.max_seconds:
        return "max_seconds"
    if calls_left(state, ctx) < needed:
        return "max_llm_calls"
    return None


def round_over(state: CorrectiveState, ctx: CorrectiveContext) -> StopReason | None:
    """Why no new round follows a grounded answer (``None``: one may)."""
    if state.useful:
        return "answered"
    if state.rewrites >= ctx.policy.max_rewrites:
        return "max_rewrites"
    # A new round needs a rewrite, a generation and its checks.
    return budget_stop(state, ctx, needed=3)


def cautious_reason(state: CorrectiveState, ctx: CorrectiveContext) -> StopReason:
    """Why the run ends on ``cautious_answer``, which returns the best earlier answer when there is one."""
    if not state.evidence:
        return "no_evidence"
    if state.best is not None:
        return round_over(state, ctx) or "answered"
    if state.regenerated and not state.grounded:
        return "unsupported"
    return budget_stop(state, ctx) or "unsupported"


def can_plan_hop(state: CorrectiveState, ctx: CorrectiveContext) -> bool:
    """Whether the next hop is planned now: before any answer, on something found, while hops remain
    and the budget holds a planning call and the answer. "Something found" includes this round's
    candidates the evaluator rejected: a bridge page names the entity, not the answer, so it is
    judged irrelevant to the question, yet it is what the next hop is planned from."""
    return (
        state.hops < ctx.policy.max_hops
        and not state.hop_done
        and state.answered_with < 0  # no generation yet (one whose every sentence was withheld left no text)
        and bool(state.evidence or state.candidates)
        and budget_stop(state, ctx, needed=2) is None
    )


def planned(state: CorrectiveState, ctx: CorrectiveContext) -> bool:
    """Whether the hop planner has read this request's evidence and, in the mode where its call judges the
    rounds it reads (``grade_planned_rounds`` off, the service's default), its sub-questions stand for the
    follow-up searches: a rewrite after a round judged Ambiguous or Incorrect would only ask again, at a
    rewrite, a search and a grading round more. With planned rounds graded the rewrite stays. Rewrites always
    stay for an answer the critics reject.
    """
    return not ctx.policy.grade_planned_rounds and (state.hops > 0 or state.hop_done)


def drafts_plain(state: CorrectiveState, ctx: CorrectiveContext) -> bool:
    """Whether plain RAG's answer is drafted now: once, right after the first retrieval is evaluated, on plain RAG's
    passages, with the budget for it and for an answer after it. Not on a retrieval the evaluator judged Incorrect
    (CRAG discards it; single_hop escalates on it): an answer drawn from it would be the floor of nothing."""
    return (
        ctx.policy.plain_floor
        and state.plain is None
        and len(state.rounds) == 1
        and state.verdict != "incorrect"
        and bool(state.first_round)
        and budget_stop(state, ctx, needed=2) is None
    )


def after_evaluate(state: CorrectiveState, ctx: CorrectiveContext) -> Decision:
    if drafts_plain(state, ctx):
        return Decision("answer_plainly")
    if can_plan_hop(state, ctx):
        return Decision("plan_hop")
    wants_more = state.verdict != "correct" and state.rewrites < ctx.policy.max_rewrites and not planned(state, ctx)
    if wants_more and budget_stop(state, ctx, needed=2) is None:
        return Decision("rewrite_query", loop=f"retrieval_{state.verdict}")
    if len(state.evidence) == state.answered_with:
        # Nothing new was found since the last answer: another round would repeat it. An answer the
        # groundedness check rejected is never returned as it is.
        if state.grounded:
            return Decision("finish", round_over(state, ctx) or "answered")
        return Decision("cautious_answer", cautious_reason(state, ctx))
    return Decision("refine")


def after_plan(state: CorrectiveState, ctx: CorrectiveContext) -> Decision:
    # The planner finds the evidence sufficient, the evaluator kept none of it: there is nothing to answer
    # from, so CRAG's action for Incorrect applies (a small model calls a bridge page "sufficient").
    nothing_kept = state.hop_done and not state.evidence and state.rewrites < ctx.policy.max_rewrites
    if nothing_kept and budget_stop(state, ctx, needed=2) is None:
        return Decision("rewrite_query", loop="retrieval_incorrect")
    if state.hop_done:
        return Decision("refine")
    return Decision("search_hop", loop="next_hop")


def after_refine(state: CorrectiveState, ctx: CorrectiveContext) -> Decision:
    if state.strips and budget_stop(state, ctx) is None:
        return Decision("generate")
    return Decision("cautious_answer", cautious_reason(state, ctx))


def after_grounded(state: CorrectiveState, ctx: CorrectiveContext) -> Decision:
    if state.committed or (state.grounded and trusted(state, ctx)):
        return Decision("finish", "answered")
    if state.grounded:
        return Decision("check_useful")
    if not state.regenerated and budget_stop(state, ctx) is None:
        return Decision("generate", loop="unsupported_answer")
    # Twice no supported answer from this evidence: it lacks the answer (typically the second hop of a
    # bridge question whose first hop the grader rightly found relevant), so search for it while rounds
    # remain; the cautious answer is for when they do not.
    # (Reached also when the budget refused the regeneration: then it refuses a new round too.)
    if state.rewrites < ctx.policy.max_rewrites and budget_stop(state, ctx, needed=3) is None:
        said_nothing = state.unsupported_claims == [CITATIONS_ONLY]
        return Decision("rewrite_query", loop="empty_answer" if said_nothing else "unsupported_answer")
    return Decision("cautious_answer", cautious_reason(state, ctx))


TRUSTED_NOTE = "first answer grounded on evidence judged correct"
PLANNER_TRUSTED_NOTE = "first answer grounded on evidence the hop planner found sufficient"


def trust_note(state: CorrectiveState, ctx: CorrectiveContext) -> str | None:
    """Why the usefulness critic is not asked about this answer (None: it is). A first answer, grounded, on
    evidence judged Correct, or (``trust_planner_sufficient``) on evidence the hop planner found sufficient
    with no rewrite since: one call fewer, and no new round started on the small model's "no" (on HotpotQA,
    where retrieval was already complete, further rounds lost ground)."""
    policy = ctx.policy
    if state.regenerated:
        return None
    if policy.trust_correct_grounded and state.verdict == "correct":
        return TRUSTED_NOTE
    if policy.trust_planner_sufficient and state.hop_done and state.rewrites == 0:
        return PLANNER_TRUSTED_NOTE
    return None


def trusted(state: CorrectiveState, ctx: CorrectiveContext) -> bool:
    return trust_note(state, ctx) is not None


def commits(state: CorrectiveState, ctx: CorrectiveContext, *, regenerating: bool) -> bool:
    """Whether the generation about to run is final once any sentence of it passes the gate: the answer the
    usefulness critic would trust (:func:`trust_note`), so no later round could replace it. Only such a generation
    streams to a client (but see :func:`streams`); any other is sent once the run ends, when it is known to be the
    answer."""
    return trust_note(replace(state, regenerated=regenerating), ctx) is not None


def streams(state: CorrectiveState, ctx: CorrectiveContext, *, regenerating: bool) -> bool:
    """Whether the generation about to run goes to a live client as it passes the gate: a committed one, unless plain
    RAG's answer is the floor (:mod:`.floor`) and this is another answer, which may yet give way to it at the end.
    The graph decides alike either way; only when the text leaves differs."""
    plain = state.plain
    if plain is not None and plain.answered and (regenerating or not plain.same_context(state.strips)):
        return False
    return commits(state, ctx, regenerating=regenerating)


def after_useful(state: CorrectiveState, ctx: CorrectiveContext) -> Decision:
    reason = round_over(state, ctx)
    if reason is not None:
        return Decision("finish", reason)
    return Decision("rewrite_query", loop="answer_not_useful")
