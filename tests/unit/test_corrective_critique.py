"""The corrective graph's critics: groundedness, regeneration, the cautious answer, and usefulness."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.knowledge.service import KnowledgeBase
from pipelines.corrective.critique import CITATIONS_ONLY, cautious_answer
from pipelines.corrective.prompts import EMPTY_ANSWER_NOTE, REGENERATE_NOTE
from pipelines.shared import events as ev
from pipelines.shared.deps import Passage
from pipelines.shared.prompts import ABSTAIN_EN, NOT_IN_CONTEXT
from tests.calibration_support import corrective_policy
from tests.unit.corrective_support import (
    ANSWERED,
    CANTEEN_FACT,
    CANTEEN_QUESTION,
    CAUTIOUS_K2,
    DOCS,
    K2_ANSWER,
    K2_EXPANSION,
    K2_INVENTED,
    K2_QUESTION,
    K2_ROUND,
    K2_WITHHELD,
    NOT_RELEVANT,
    SUPPORTED_CHECK,
    USEFUL,
    Script,
    canteen_follow_up,
    critics,
    doc_ids,
    doubted,
    follow_up_score,
    k2_useless_then_rewritten,
    kind,
    nodes,
    not_useful,
    prompts,
    relevant,
    run_graph,
    scores,
    unsupported,
    useless,
    withheld,
)


def regenerated_then_answered(held: ev.Withhold, *doubt: str) -> list[ev.PipelineEvent]:
    """The events of an answer whose sentence the gate ``held`` and the critic doubted (``doubt``: the unsupported
    claims), regenerated, then accepted."""
    return [ev.Generate(), held, doubted(*doubt), ev.Generate(mode="regenerate"), *ANSWERED[1:]]


# --- Ungrounded answers -----------------------------------------------------------------------------------------


async def test_ungrounded_answer_is_regenerated_then_replaced_by_a_cautious_answer(knowledge: KnowledgeBase) -> None:
    claim = "maximum payload of 900 kg"
    script = Script(answers=[K2_INVENTED], grounded=[unsupported(claim)])

    # No rounds left to search for better evidence (see the next test): the fallback follows the regeneration.
    state, model = await run_graph(knowledge, script, query=K2_QUESTION, policy=corrective_policy(max_rewrites=0))

    assert state.events == [
        *K2_ROUND,
        ev.Generate(),
        K2_WITHHELD,
        doubted(claim),
        ev.Generate(mode="regenerate"),
        K2_WITHHELD,
        doubted(claim),
        ev.Generate(mode="cautious"),
        ev.Stop(reason="unsupported"),
    ]
    assert nodes(state) == ["generate", "check_grounded", "generate", "check_grounded"]
    assert [kind(c) for c in model.calls] == ["generate", "GroundednessCheck", "generate", "GroundednessCheck"]
    regenerate_messages = model.calls[2][0]
    assert len(regenerate_messages) == 3
    assert str(regenerate_messages[-1].content) == REGENERATE_NOTE.format(claims=claim)
    assert "900 kg" in str(model.calls[1][0][-1].content)  # the critic saw the answer
    assert state.grounded is False
    assert state.regenerated is True
    assert state.unsupported_claims == [claim]
    assert "useful" not in critics(state)  # no usefulness check on an unsupported answer
    assert state.abstained is True  # the cautious answer quotes the documents: it counts as an abstention
    answer = state.answer
    assert answer.startswith("I could not confirm a complete answer from the knowledge base.")
    assert "“The Kumo Carrier K2 has a maximum payload of 150 kg.” [1]" in answer
    assert answer.endswith(f" They do not state: {claim}.")
    assert "900" not in answer.replace(claim, "")
    assert doc_ids(state.sources) == ["k2"]
    assert state.context == state.strips
    assert state.fallback is True
    assert state.stop_reason == "unsupported"


async def test_ungrounded_regeneration_with_rounds_left_searches_again_before_the_cautious_answer(
    knowledge: KnowledgeBase,
) -> None:
    claim = "maximum payload of 900 kg"
    script = Script(answers=[K2_INVENTED], grounded=[unsupported(claim)], rewrites=["Kumo Carrier K2 specification"])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=corrective_policy(max_rewrites=1))
    round_of_answers = [
        ev.Generate(),  # each round's first answer is a first answer, not a regeneration
        K2_WITHHELD,
        doubted(claim),
        ev.Generate(mode="regenerate"),
        K2_WITHHELD,
        doubted(claim),
    ]
    assert state.events[: len(K2_ROUND) + 7] == [
        *K2_ROUND,
        *round_of_answers,
        ev.Rewrite(round=1, query="Kumo Carrier K2 specification"),
    ]
    # The new search finds nothing new: no second generation round; the rejected answer is never returned.
    assert state.events[len(K2_ROUND) + 7 :] == [
        ev.SearchMore(source="local", queries=2, new=0),
        ev.Evaluate(verdict="incorrect", kept=0, total=0, graded=0),
        ev.Generate(mode="cautious"),
        ev.Stop(reason="unsupported"),
    ]
    assert state.rewrites == 1
    assert state.fallback is True
    assert "900" not in state.answer.replace(claim, "")
    assert state.abstained is True


async def test_unsupported_answer_after_retrieval_rewrites_reports_unsupported(
    knowledge: KnowledgeBase, vpn_vector: list[float]
) -> None:
    # Round 1 Incorrect, as in test_incorrect_round_is_discarded_*: the retrieval rounds use up the rewrites.
    script = Script(rewrites=["K2 payload"], answers=[K2_INVENTED], grounded=[unsupported("900 kg")])
    policy = corrective_policy(max_rewrites=1)
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy, top_k=1, query_vector=vpn_vector)
    assert state.verdicts == ["incorrect", "correct"]
    assert state.rewrites == policy.max_rewrites
    assert state.events[-3:-1] == [doubted("900 kg"), ev.Generate(mode="cautious")]
    assert state.fallback is True
    assert state.stop_reason == "unsupported"


async def test_unsupported_answer_that_spends_the_last_call_reports_unsupported(knowledge: KnowledgeBase) -> None:
    script = Script(answers=[K2_INVENTED], grounded=[unsupported("900 kg")])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=corrective_policy(max_llm_calls=4))
    assert nodes(state) == ["generate", "check_grounded", "generate", "check_grounded"]
    assert state.events[-2] == ev.Generate(mode="cautious")
    assert state.stop_reason == "unsupported"


async def test_regenerated_answer_that_is_supported_goes_on_to_the_usefulness_check(
    knowledge: KnowledgeBase,
) -> None:
    script = Script(answers=[K2_INVENTED, K2_ANSWER], grounded=[unsupported("payload of 900 kg")])
    state, model = await run_graph(knowledge, script, query=K2_QUESTION)
    assert state.events[3:] == regenerated_then_answered(K2_WITHHELD, "payload of 900 kg")
    assert nodes(state) == ["generate", "check_grounded", "generate", "check_useful"]
    assert state.answer == K2_ANSWER
    assert state.grounded is True
    assert state.regenerated is True
    assert state.useful is True
    assert state.unsupported_claims == []
    assert str(model.calls[2][0][-1].content) == REGENERATE_NOTE.format(claims="payload of 900 kg")


async def test_answer_of_citations_alone_is_regenerated_with_a_request_for_a_sentence(
    knowledge: KnowledgeBase,
) -> None:
    script = Script(answers=["[1] [2]", K2_ANSWER])
    state, model = await run_graph(knowledge, script, query=K2_QUESTION)
    assert state.events[3:] == regenerated_then_answered(withheld("[1]", reason="states_nothing"), CITATIONS_ONLY)
    # No critic call for an answer that states nothing: the check is lexical.
    assert [kind(c) for c in model.calls] == ["generate", "generate", "UsefulnessCheck"]
    assert str(model.calls[1][0][-1].content) == EMPTY_ANSWER_NOTE
    assert state.answer == K2_ANSWER


async def test_answer_of_citations_twice_falls_back_to_a_cautious_answer_without_naming_a_claim(
    knowledge: KnowledgeBase,
) -> None:
    # No rewrites allowed: with rounds left the pipeline would search for evidence the model can answer from
    # (see test_corrective_search_more).
    policy = corrective_policy(max_rewrites=0)
    state, _ = await run_graph(knowledge, Script(answers=["[1]", "[1]."]), query=K2_QUESTION, policy=policy)
    assert state.events[-2:] == [ev.Generate(mode="cautious"), ev.Stop(reason="unsupported")]
    assert state.abstained is True
    assert "do not state" not in state.answer
    assert "“The Kumo Carrier K2 has a maximum payload of 150 kg.” [1]" in state.answer


async def test_lexical_doubt_cleared_by_the_critic_needs_no_regeneration(knowledge: KnowledgeBase) -> None:
    paraphrase = "The K2 can carry at most 150 kilograms [1]."  # "carry", "kilograms" are not in the passage
    state, _ = await run_graph(knowledge, Script(answers=[paraphrase]), query=K2_QUESTION)
    assert state.events[3:] == ANSWERED
    assert nodes(state) == ["generate", "check_grounded", "check_useful"]
    assert state.answer == paraphrase
    assert state.regenerated is False


async def test_model_that_finds_nothing_skips_the_grounding_check_and_is_not_useful(knowledge: KnowledgeBase) -> None:
    policy = corrective_policy(max_rewrites=1)
    script = Script(answers=[NOT_IN_CONTEXT], rewrites=["Kumo Carrier K2 payload"])
    # The new round finds only the Osaka document, too far from the question and the rewrite to be explored.
    osaka = await follow_up_score(knowledge, K2_QUESTION, "Kumo Carrier K2 payload", K2_EXPANSION, "osaka")
    assert osaka < policy.explore_floor
    state, model = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy, top_k=1)
    missing = "the answer says the information was not found"
    assert state.events == [
        ev.Retrieve(k=1, found=1),
        ev.Evaluate(verdict="correct", kept=1, total=1, graded=0),
        ev.Refine(strips=1, passages=1),
        ev.Generate(),
        ev.Check(critic="grounded", outcome="skipped", note="no answer found"),
        useless(missing),
        ev.Rewrite(round=1, query="Kumo Carrier K2 payload"),
        ev.SearchMore(source="local", queries=2, new=1),
        ev.Evaluate(verdict="incorrect", kept=0, total=1, graded=0),
        # the evidence did not grow: answering again from the same passages would only repeat the abstention
        ev.Stop(reason="max_rewrites"),
    ]
    # Neither critic needed the model for an abstention.
    assert nodes(state) == ["generate", "rewrite_query"]
    assert f"Missing: {missing}" in str(model.calls[1][0][-1].content)
    assert state.answered_with == len(state.evidence) == 1
    assert state.abstained is True
    assert state.answer == ABSTAIN_EN
    assert state.sources == []
    assert state.useful is False
    assert state.stop_reason == "max_rewrites"


K2_PASSAGE = Passage(chunk_id="k2#0", doc_id="k2", title="Kumo Carrier K2", text=DOCS[0].text, score=0.9)


def test_cautious_answer_quotes_at_most_three_unsupported_claims_without_their_citations() -> None:
    claims = ["It lifts 900 kg [1]", "It was built in 2020 [1, 2]", "It is blue[3]", "It flies [1]"]
    answer = cautious_answer(K2_QUESTION, [K2_PASSAGE], claims)
    assert answer == f"{CAUTIOUS_K2} They do not state: It lifts 900 kg; It was built in 2020; It is blue."


def test_cautious_answer_keeps_brackets_that_are_not_citations() -> None:
    answer = cautious_answer(K2_QUESTION, [K2_PASSAGE], ["The limit is [unknown]", "Model [K2] lifts 900 kg"])
    assert answer == f"{CAUTIOUS_K2} They do not state: The limit is [unknown]; Model [K2] lifts 900 kg."


def test_cautious_answer_ends_a_quoted_claim_with_one_full_stop() -> None:
    answer = cautious_answer(K2_QUESTION, [K2_PASSAGE], [K2_INVENTED])
    assert answer == f"{CAUTIOUS_K2} They do not state: The Kumo Carrier K2 has a maximum payload of 900 kg."
    two = cautious_answer(K2_QUESTION, [K2_PASSAGE], ["It lifts 900 kg.", "It was built in 2020 [2]."])
    assert two == f"{CAUTIOUS_K2} They do not state: It lifts 900 kg; It was built in 2020."


def test_cautious_answer_in_japanese_ends_a_quoted_claim_with_one_full_stop() -> None:
    question = "K2の最大積載量は何kgですか"
    answer = cautious_answer(question, [K2_PASSAGE], ["K2の最大積載量は900 kgです。[1]", "2020年に発売されました。"])
    assert answer.endswith(" 文書に記載がないこと: K2の最大積載量は900 kgです; 2020年に発売されました。")
    assert "。。" not in answer


# --- Useless answers --------------------------------------------------------------------------------------------


async def test_useless_answer_rewrites_for_the_missing_information_bounded_by_max_rewrites(
    knowledge: KnowledgeBase,
) -> None:
    missing = "the payload in pounds"
    policy = corrective_policy(max_rewrites=2)
    script = Script(useful=[not_useful(missing)], rewrites=["K2 payload pounds", "K2 weight lb"])
    # Each new round finds one more document, too far from the question and its query to be explored.
    osaka = await follow_up_score(knowledge, K2_QUESTION, "K2 payload pounds", K2_EXPANSION, "osaka")
    parking = await follow_up_score(knowledge, K2_QUESTION, "K2 weight lb", K2_EXPANSION, "parking")
    assert max(osaka, parking) < policy.explore_floor

    state, model = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy, top_k=1)

    assert state.events == [
        *k2_useless_then_rewritten(missing, "K2 payload pounds"),
        ev.Evaluate(verdict="incorrect", kept=0, total=1, graded=0),
        ev.Rewrite(round=2, query="K2 weight lb"),
        ev.SearchMore(source="local", queries=2, new=1),
        ev.Evaluate(verdict="incorrect", kept=0, total=1, graded=0),
        # nothing was added to the evidence: no second answer from the same passages
        ev.Stop(reason="max_rewrites"),
    ]
    assert nodes(state) == ["generate", "check_useful", "rewrite_query", "rewrite_query"]
    rewrite_prompts = prompts(model, "rewrite")
    assert all(f"Missing: {missing}" in p for p in rewrite_prompts)
    assert all("- (Kumo Carrier K2) The Kumo Carrier K2 has a maximum payload" in p for p in rewrite_prompts)
    assert state.seen == ["k2#0", "osaka#0", "parking#0"]
    assert state.rewrites == policy.max_rewrites
    assert state.useful is False
    assert state.missing == missing
    assert state.grounded is True
    assert state.answer == K2_ANSWER  # the last grounded answer is returned, not an abstention
    assert doc_ids(state.evidence) == ["k2"]
    assert state.fallback is False
    assert state.stop_reason == "max_rewrites"


@pytest.mark.parametrize(
    ("grade", "evaluated", "tail"),
    [
        (NOT_RELEVANT, ev.Evaluate(verdict="incorrect", kept=0, total=1, graded=1), [ev.Stop(reason="max_rewrites")]),
        (
            relevant(CANTEEN_FACT),
            ev.Evaluate(verdict="correct", kept=1, total=1, graded=1),
            [
                ev.Refine(strips=2, passages=2),
                ev.Generate(),
                SUPPORTED_CHECK,
                useless("when the canteen closes"),
                ev.Stop(reason="max_rewrites"),
            ],
        ),
    ],
    ids=["evidence-unchanged", "evidence-grew"],
)
async def test_a_new_round_answers_again_only_when_it_added_evidence(
    knowledge: KnowledgeBase, grade: dict[str, Any], evaluated: ev.Evaluate, tail: list[ev.PipelineEvent]
) -> None:
    policy = corrective_policy(max_rewrites=1)
    assert policy.lower < (await scores(knowledge, CANTEEN_QUESTION, k=1))["canteen"] < policy.upper
    state, model = await run_graph(knowledge, canteen_follow_up(grade), query=K2_QUESTION, policy=policy, top_k=1)
    assert state.events == [
        *k2_useless_then_rewritten("when the canteen closes", CANTEEN_QUESTION),
        evaluated,
        *tail,
    ]
    generations = 2 if ev.Generate() in tail else 1
    assert [kind(c) for c in model.calls].count("generate") == generations
    assert state.answered_with == len(state.evidence) == generations
    assert state.answer == K2_ANSWER
    assert state.stop_reason == "max_rewrites"


async def test_useless_answer_new_round_merges_the_documents_found_for_the_missing_information(
    knowledge: KnowledgeBase,
) -> None:
    # upper=0 keeps every found document, so the second round's document joins the evidence.
    policy = corrective_policy(upper=0.0, max_rewrites=1)
    script = Script(
        answers=[K2_ANSWER, "The K2 carries 150 kg [1]; the canteen closes at 14:00 [2]."],
        useful=[not_useful("when the canteen closes"), USEFUL],
        rewrites=["staff canteen closing time"],
    )
    state, model = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy, top_k=1)
    assert state.events[5:] == [
        useless("when the canteen closes"),
        ev.Rewrite(round=1, query="staff canteen closing time"),
        ev.SearchMore(source="local", queries=2, new=1),
        ev.Evaluate(verdict="correct", kept=1, total=1, graded=0),
        ev.Refine(strips=2, passages=2),
        *ANSWERED,
    ]
    assert doc_ids(state.evidence) == ["k2", "canteen"]
    assert sorted(doc_ids(state.sources)) == ["canteen", "k2"]
    assert state.useful is True
    assert "Missing: when the canteen closes" in str(model.calls[2][0][-1].content)


# --- Malformed critic output ------------------------------------------------------------------------------------


async def test_malformed_groundedness_check_keeps_the_lexical_doubt(knowledge: KnowledgeBase) -> None:
    script = Script(answers=[K2_INVENTED, K2_ANSWER], grounded=["The answer looks fine to me."])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION)
    assert state.events[3:] == regenerated_then_answered(K2_WITHHELD, K2_INVENTED)
    assert nodes(state) == ["generate", "check_grounded", "generate", "check_useful"]
    assert state.answer == K2_ANSWER


async def test_malformed_usefulness_check_counts_as_useful(knowledge: KnowledgeBase) -> None:
    state, _ = await run_graph(knowledge, Script(useful=["```json\n{not json}\n```"]), query=K2_QUESTION)
    assert state.events[-2:] == [
        ev.Check(critic="useful", outcome="skipped", note="critic output malformed"),
        ev.Stop(reason="answered"),
    ]
    assert nodes(state) == ["generate", "check_useful"]  # the malformed call is counted
    assert state.useful is True
    assert state.missing == ""
    assert state.rewrites == 0
    assert state.stop_reason == "answered"


async def test_a_later_answer_that_is_not_useful_either_does_not_replace_the_first_grounded_one(
    knowledge: KnowledgeBase,
) -> None:
    # Round 1 answers from the K2 sheet (grounded, judged not useful); round 2 adds the canteen document and
    # answers something else that is judged not useful too. The best answer so far is the first one.
    later = "The staff canteen closes at 14:00 on weekdays [2]."
    script = canteen_follow_up(relevant(CANTEEN_FACT))
    script.answers = [K2_ANSWER, later]
    script.useful = [not_useful("when the canteen closes"), not_useful("still missing")]
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=corrective_policy(max_rewrites=1), top_k=1)
    assert nodes(state).count("generate") == 2
    assert state.events[-2:] == [ev.Generate(mode="keep_best"), ev.Stop(reason="max_rewrites")]
    assert state.answer == K2_ANSWER
    assert doc_ids(state.context) == ["k2"]
    assert state.abstained is False
    assert state.stop_reason == "max_rewrites"


async def test_a_useful_later_answer_replaces_the_first(knowledge: KnowledgeBase) -> None:
    later = "The staff canteen closes at 14:00 on weekdays [2]."
    script = canteen_follow_up(relevant(CANTEEN_FACT))
    script.answers = [K2_ANSWER, later]
    script.useful = [not_useful("when the canteen closes"), USEFUL]
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=corrective_policy(max_rewrites=1), top_k=1)
    assert state.answer == later
    assert state.best is not None
    assert state.best.answer == later
    assert ev.Generate(mode="keep_best") not in state.events
    assert state.stop_reason == "answered"
