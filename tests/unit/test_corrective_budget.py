"""The corrective graph's bounds: the LLM-call budget, the time budget and the worst-case loop length."""

from __future__ import annotations

import time
from typing import Any, get_args

import pytest

from gateway.knowledge.service import KnowledgeBase
from pipelines.shared.events import Check, Evaluate, Generate, Refine, Retrieve, Rewrite, SearchMore, Stop, StopReason
from tests.calibration_support import corrective_policy
from tests.unit.corrective_support import (
    CANTEEN_ANSWER,
    CANTEEN_FACT,
    CANTEEN_QUESTION,
    CAUTIOUS_K2,
    DOCS,
    K2_ANSWER,
    K2_EXPANSION,
    K2_FACT,
    K2_INVENTED,
    K2_QUESTION,
    K2_ROUND,
    K2_WITHHELD,
    NO_EVIDENCE,
    OFF_TOPIC,
    OSAKA_FACT,
    SUPPORTED_CHECK,
    FakeClock,
    Reply,
    Script,
    canteen_follow_up,
    doc_ids,
    doubted,
    follow_up_score,
    graded_titles,
    k2_useless_then_rewritten,
    kind,
    nodes,
    not_useful,
    relevant,
    run_graph,
    scores,
    unsupported,
    useless,
    withheld,
)

# --- The LLM-call budget ----------------------------------------------------------------------------------------


async def test_no_llm_budget_ends_in_a_cautious_answer_without_model_calls(knowledge: KnowledgeBase) -> None:
    state, model = await run_graph(knowledge, Script(), query=K2_QUESTION, policy=corrective_policy(max_llm_calls=0))
    assert state.events == [*K2_ROUND, Generate(mode="cautious"), Stop(reason="max_llm_calls")]
    assert model.calls == []
    assert state.stop_reason == "max_llm_calls"
    assert state.answer.startswith("I could not confirm a complete answer")
    assert "“The Kumo Carrier K2 has a maximum payload of 150 kg.” [1]" in state.answer
    assert "do not state" not in state.answer
    assert doc_ids(state.sources) == ["k2"]  # the quoted passages are still its sources
    assert state.abstained is True  # a statement of what the documents say, not an answer


async def test_one_call_budget_generates_then_cannot_check_and_falls_back(knowledge: KnowledgeBase) -> None:
    policy = corrective_policy(max_llm_calls=1)
    state, _ = await run_graph(knowledge, Script(answers=[K2_INVENTED]), query=K2_QUESTION, policy=policy)
    assert state.events[3:] == [
        Generate(),
        K2_WITHHELD,
        doubted(K2_INVENTED),  # the lexical doubt, unconfirmed: no call left
        Generate(mode="cautious"),
        Stop(reason="max_llm_calls"),
    ]
    assert nodes(state) == ["generate"]
    assert state.grounded is False
    assert state.regenerated is False
    said, _, missing = state.answer.partition(" They do not state: ")
    assert said == CAUTIOUS_K2
    # The quoted claim loses its [1] (the citation numbers belong to the evidence quoted above) and its own
    # full stop (the template adds one).
    assert missing == "The Kumo Carrier K2 has a maximum payload of 900 kg."
    assert state.stop_reason == "max_llm_calls"


@pytest.mark.parametrize("budget", [2, 3])
async def test_regeneration_needs_budget_and_the_last_check_falls_back_to_the_lexical_doubt(
    knowledge: KnowledgeBase, budget: int
) -> None:
    policy = corrective_policy(max_llm_calls=budget)
    script = Script(answers=[K2_INVENTED], grounded=[unsupported("900 kg")])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy)
    if budget == 2:  # generate + critic: nothing left to regenerate with
        assert state.events[3:] == [
            Generate(),
            K2_WITHHELD,
            doubted("900 kg"),
            Generate(mode="cautious"),
            Stop(reason="max_llm_calls"),  # the budget prevented the regeneration
        ]
        assert nodes(state) == ["generate", "check_grounded"]
        assert state.regenerated is False
        assert state.stop_reason == "max_llm_calls"
    else:  # generate + critic + regenerate: the second check cannot ask the critic
        assert state.events[3:] == [
            Generate(),
            K2_WITHHELD,
            doubted("900 kg"),
            Generate(mode="regenerate"),
            K2_WITHHELD,
            doubted(K2_INVENTED),
            Generate(mode="cautious"),
            Stop(reason="unsupported"),  # the one regeneration happened and is still unsupported: no loop was cut
        ]
        assert nodes(state) == ["generate", "check_grounded", "generate"]
        assert state.regenerated is True
        assert state.stop_reason == "unsupported"
    assert len(state.llm_calls) == budget
    assert state.fallback is True


async def test_usefulness_is_assumed_when_no_call_is_left_for_the_critic(knowledge: KnowledgeBase) -> None:
    state, _ = await run_graph(knowledge, Script(), query=K2_QUESTION, policy=corrective_policy(max_llm_calls=1))
    assert state.events[3:] == [
        Generate(),
        SUPPORTED_CHECK,
        Check(critic="useful", outcome="skipped", note="no LLM calls left"),  # the event says it was not checked
        Stop(reason="answered"),
    ]
    assert nodes(state) == ["generate"]
    assert state.useful is True
    assert state.missing == ""  # the skip reason is not passed on as missing information
    assert state.stop_reason == "answered"


async def test_incorrect_loop_stops_rewriting_when_a_rewrite_could_not_be_followed_by_an_answer(
    knowledge: KnowledgeBase,
) -> None:
    policy = corrective_policy(max_llm_calls=2, max_rewrites=5)
    state, _ = await run_graph(knowledge, Script(rewrites=["nothing"]), query=OFF_TOPIC, policy=policy)
    assert state.events == [
        Retrieve(k=5, found=5),
        Evaluate(verdict="incorrect", kept=0, total=5, graded=0),
        Rewrite(round=1, query="nothing"),
        SearchMore(source="local", queries=2, new=0),  # all five documents were seen in round 1
        Evaluate(verdict="incorrect", kept=0, total=0, graded=0),
        *NO_EVIDENCE,
    ]
    assert nodes(state) == ["rewrite_query"]
    assert state.rewrites == 1 < policy.max_rewrites


@pytest.mark.parametrize("budget", [3, 4])
async def test_useless_answer_is_not_retried_when_the_budget_cannot_pay_for_a_new_round(
    knowledge: KnowledgeBase, budget: int
) -> None:
    policy = corrective_policy(max_llm_calls=budget)  # generate + useful = 2; a new round needs 3 more
    script = Script(useful=[not_useful("the payload in pounds")])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy)
    assert state.events[3:-1] == [
        Generate(),
        SUPPORTED_CHECK,
        useless("the payload in pounds"),
    ]
    assert nodes(state) == ["generate", "check_useful"]
    assert state.rewrites == 0
    assert state.answer == K2_ANSWER  # the grounded answer is returned, not replaced by a fallback


@pytest.mark.parametrize("budget", [3, 4])
async def test_useless_answer_cut_by_the_call_budget_reports_max_llm_calls(
    knowledge: KnowledgeBase, budget: int
) -> None:
    # 1-2 calls left: after_useful needs 3 for a new round, and the stop reason says the budget cut it.
    script = Script(useful=[not_useful("the payload in pounds")])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=corrective_policy(max_llm_calls=budget))
    assert state.events[-2:] == [useless("the payload in pounds"), Stop(reason="max_llm_calls")]
    assert budget - len(state.llm_calls) in (1, 2)
    assert state.useful is False
    assert state.rewrites == 0
    assert state.stop_reason == "max_llm_calls"


async def test_useless_answer_with_the_budget_spent_exactly_reports_max_llm_calls(knowledge: KnowledgeBase) -> None:
    script = Script(useful=[not_useful("the payload in pounds")])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=corrective_policy(max_llm_calls=2))
    assert state.events[-2:] == [useless("the payload in pounds"), Stop(reason="max_llm_calls")]
    assert state.stop_reason == "max_llm_calls"


# --- Every bound holds against an adversarial model -------------------------------------------------------------


# A fact from each document, for a grader that finds every document relevant.
AGREEABLE_GRADES: dict[str, Reply] = {
    "Kumo Carrier K2": relevant(K2_FACT),
    "VPN policy": relevant("last updated on 1 February 2024"),
    "Staff canteen": relevant(CANTEEN_FACT),
    "Osaka office": relevant(OSAKA_FACT),
    "Parking rules": relevant("park in the north garage"),
}


def adversarial_script() -> Script:
    """Every critic disagrees, the grader agrees with everything and every answer invents: the graph loops as
    long as its bounds allow."""
    return Script(
        answers=[K2_INVENTED],
        rewrites=["canteen hours"],
        grades=dict(AGREEABLE_GRADES),
        grounded=[unsupported("900 kg")],
        useful=[not_useful("everything")],
    )


@pytest.mark.parametrize("top_k", [1, 5])
@pytest.mark.parametrize("budget", range(0, 9))
@pytest.mark.parametrize("question", [CANTEEN_QUESTION, K2_QUESTION, OFF_TOPIC])
async def test_llm_calls_never_exceed_the_budget(
    knowledge: KnowledgeBase, budget: int, question: str, top_k: int
) -> None:
    policy = corrective_policy(max_llm_calls=budget)
    state, model = await run_graph(knowledge, adversarial_script(), query=question, policy=policy, top_k=top_k)
    assert len(state.llm_calls) <= budget
    assert len(model.calls) <= budget
    assert state.stop_reason in get_args(StopReason)
    assert state.rewrites <= policy.max_rewrites
    assert len(graded_titles(model)) == len(set(graded_titles(model)))  # no document graded twice


async def test_worst_case_loops_end_within_the_recursion_limit_when_calls_are_unlimited(
    knowledge: KnowledgeBase,
) -> None:
    # lower=0 puts every document in the band and the grader keeps each one: with top_k=1 every round adds a
    # document, so every round ends in a full generation round (a round that adds nothing would just stop).
    policy = corrective_policy(max_llm_calls=1000, lower=0.0)
    script = adversarial_script()
    # Every round: an invented answer, its regeneration (supported), a useless verdict, a rewrite.
    script.answers = ["The staff canteen closes at 23:00 [1].", CANTEEN_ANSWER] * (policy.max_rewrites + 1)
    script.grounded = [unsupported("closes at 23:00")]
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=1)
    generation_round = [
        Generate(),
        withheld("The staff canteen closes at 23:00 [1].", "23"),
        doubted("closes at 23:00"),
        Generate(mode="regenerate"),
        SUPPORTED_CHECK,
        useless("everything"),
    ]
    expansion = f"{CANTEEN_QUESTION} Staff canteen: {DOCS[2].text}"
    assert state.events == [
        Retrieve(k=1, found=1),
        Evaluate(verdict="correct", kept=1, total=1, graded=1),
        Refine(strips=1, passages=1),
        *generation_round,
        Rewrite(round=1, query="canteen hours"),
        SearchMore(source="local", queries=2, new=1),
        Evaluate(verdict="correct", kept=1, total=1, graded=1),
        Refine(strips=2, passages=2),
        *generation_round,
        Rewrite(round=2, query=expansion),  # "canteen hours" again: replaced by the expansion
        SearchMore(source="local", queries=1, new=1),
        Evaluate(verdict="correct", kept=1, total=1, graded=1),
        # The third document has no strip that bears on the question, but the grader judged it relevant: it keeps
        # its best strip (refinement picks within what the evaluator kept, it does not overrule it).
        Refine(strips=3, passages=3),
        *generation_round,
        Stop(reason="max_rewrites"),
    ]
    assert graded_titles(model) == ["Staff canteen", "Parking rules", "Osaka office"]  # each graded once
    assert len(state.evidence) == state.answered_with == 3
    assert [kind(c) for c in model.calls].count("generate") == 2 * (policy.max_rewrites + 1)
    assert state.rewrites == policy.max_rewrites
    assert len(state.events) < policy.recursion_limit
    assert state.stop_reason == "max_rewrites"


# --- The time budget --------------------------------------------------------------------------------------------


def out_of_time() -> dict[str, Any]:
    """``run_graph`` arguments for a run whose time budget was spent before it started."""
    return {"policy": corrective_policy(max_seconds=0.0001), "started_at": time.monotonic() - 1.0}


async def test_time_budget_spent_skips_generation(knowledge: KnowledgeBase) -> None:
    state, model = await run_graph(knowledge, Script(), query=K2_QUESTION, **out_of_time())
    assert state.events == [*K2_ROUND, Generate(mode="cautious"), Stop(reason="max_seconds")]
    assert model.calls == []
    assert state.stop_reason == "max_seconds"
    assert state.answer.startswith("I could not confirm a complete answer")


async def test_time_budget_spent_skips_rewrites(knowledge: KnowledgeBase) -> None:
    state, model = await run_graph(knowledge, Script(), query=OFF_TOPIC, **out_of_time())
    assert state.events == [
        Retrieve(k=5, found=5),
        Evaluate(verdict="incorrect", kept=0, total=5, graded=0),
        *NO_EVIDENCE,
    ]
    assert model.calls == []
    assert state.rewrites == 0


async def test_time_budget_spent_skips_the_llm_grader(knowledge: KnowledgeBase) -> None:
    # The canteen is in the band and the call budget is untouched, but the time is up: no Grade call.
    script = Script(grades={"Staff canteen": relevant(CANTEEN_FACT)})
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, **out_of_time())
    assert model.calls == []
    assert state.events[1:] == [
        Evaluate(verdict="ambiguous", kept=1, total=5, graded=0),  # left undecided, so kept
        Refine(strips=1, passages=1),
        Generate(mode="cautious"),
        Stop(reason="max_seconds"),
    ]
    assert doc_ids(state.evidence) == ["canteen"]
    assert state.rewrites == 0


async def test_time_budget_running_out_in_a_later_round_keeps_the_best_answer_so_far(
    knowledge: KnowledgeBase, clock: FakeClock
) -> None:
    # The clock jumps past max_seconds while the second round's query is being rewritten. That round finds the
    # canteen document in the band, cannot grade it (no time), keeps it undecided, and cannot answer again.
    policy = corrective_policy(max_seconds=10.0)
    assert policy.lower < (await scores(knowledge, CANTEEN_QUESTION, k=1))["canteen"] < policy.upper
    script = canteen_follow_up(relevant(CANTEEN_FACT), on_rewrite=clock.expire)
    state, model = await run_graph(
        knowledge, script, query=K2_QUESTION, policy=policy, started_at=clock.now, top_k=1, clock=clock.monotonic
    )
    assert state.events == [
        *k2_useless_then_rewritten("when the canteen closes", CANTEEN_QUESTION),
        Evaluate(verdict="ambiguous", kept=1, total=1, graded=0),
        Refine(strips=2, passages=2),
        Generate(mode="keep_best"),
        Stop(reason="max_seconds"),
    ]
    assert graded_titles(model) == []
    assert doc_ids(state.evidence) == ["k2", "canteen"]
    assert state.stop_reason == "max_seconds"
    # Self-RAG returns the best answer so far: the first round's grounded answer, not a fallback, and with the
    # sources and context that answer was generated from.
    assert state.best is not None
    assert state.answer == state.best.answer
    assert not state.answer.startswith("I could not confirm a complete answer")
    assert doc_ids(state.context) == ["k2"]
    assert state.fallback is False
    assert state.abstained is False
    assert state.useful is False


async def test_time_budget_running_out_in_a_later_round_that_finds_nothing_keeps_the_answer(
    knowledge: KnowledgeBase, clock: FakeClock
) -> None:
    # As above, but the second round finds only an irrelevant document: the evidence did not grow, so the
    # first round's grounded answer is returned instead of a fallback.
    policy = corrective_policy(max_seconds=10.0)
    osaka = await follow_up_score(knowledge, K2_QUESTION, "Kumo Carrier K2 payload", K2_EXPANSION, "osaka")
    assert osaka < policy.explore_floor  # not even explored
    script = Script(useful=[not_useful("the payload in pounds")], on_rewrite=clock.expire)
    state, _ = await run_graph(
        knowledge, script, query=K2_QUESTION, policy=policy, started_at=clock.now, top_k=1, clock=clock.monotonic
    )
    assert state.events == [
        *k2_useless_then_rewritten("the payload in pounds", "Kumo Carrier K2 payload"),
        Evaluate(verdict="incorrect", kept=0, total=1, graded=0),
        Stop(reason="max_seconds"),
    ]
    assert state.seen == ["k2#0", "osaka#0"]
    assert doc_ids(state.evidence) == ["k2"]
    assert nodes(state) == ["generate", "check_useful", "rewrite_query"]
    assert state.answer == K2_ANSWER
    assert state.fallback is False
    assert state.useful is False
    assert state.stop_reason == "max_seconds"
