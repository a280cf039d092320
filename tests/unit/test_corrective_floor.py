"""Plain RAG's answer as the corrective route's floor: drafted on the first retrieval, replaced only by an answer that
rests on evidence it lacked (or when it is no answer), returned when the run ends without a better one.

The Project Aurora corpus is a two-step question: the first retrieval (top_k=1) finds only the bridge page, so plain
RAG can say what Project Aurora is but not the payload; the K3 sheet, found by the hop, holds the payload.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from gateway.knowledge.service import KnowledgeBase
from gateway.query.steps import render_steps
from gateway.settings import CorrectiveSettings
from pipelines.corrective.floor import new_support
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.routing import TRUSTED_NOTE
from pipelines.corrective.state import CorrectiveState
from pipelines.shared import events as ev
from pipelines.shared.deps import Passage
from pipelines.shared.prompts import NOT_IN_CONTEXT
from tests.calibration_support import corrective_policy, use_calibration
from tests.unit.corrective_support import (
    AURORA,
    AURORA_ANSWER,
    AURORA_QUESTION,
    ENOUGH,
    K2_ANSWER,
    K2_QUESTION,
    K3_FACT,
    OFF_TOPIC,
    SUPPORTED,
    SUPPORTED_CHECK,
    Script,
    doc_ids,
    nodes,
    relevant,
    run_graph,
    unsupported,
)

K2_REGENERATED = "The maximum payload of the Kumo Carrier K2 is 150 kg [1]."

HOP_QUERY = "What is the maximum payload of the Kumo Carrier K3?"
BRIDGE_FACT = "Project Aurora is the internal codename for the Kumo Carrier K3"
NEXT = {"found": BRIDGE_FACT, "next_query": HOP_QUERY}
# Plain RAG on the bridge page alone: supported, but not the payload asked for.
PLAIN = "Project Aurora is the internal codename for the Kumo Carrier K3 [1]."


def no_floor() -> CorrectivePolicy:
    return corrective_policy(max_hops=2, trust_correct_grounded=True, answer_passages=1, hop_passages=1)


def floor() -> CorrectivePolicy:
    return replace(no_floor(), plain_floor=True)


TRUSTED = ev.Check(critic="useful", outcome="skipped", note=TRUSTED_NOTE)
# The run up to the hop's evidence: the plain draft right after the first evaluation, then one planned hop.
FLOOR_AND_HOP = [
    ev.Retrieve(k=1, found=1),
    ev.Evaluate(verdict="correct", kept=1, total=1, graded=1),
    ev.Generate(mode="plain"),
    ev.PlanHop(hop=1, query=HOP_QUERY, found=BRIDGE_FACT),
    ev.SearchHop(hop=1, k=1, new=1),
    ev.Evaluate(verdict="correct", kept=1, total=1, graded=0),
    ev.PlanHop(hop=2, done=True),
    ev.Refine(strips=2, passages=2),
]


def aurora_script(*answers: str) -> Script:
    return Script(
        answers=list(answers),
        grades={"Project Aurora": relevant("the Kumo Carrier K3"), "Kumo Carrier K3 specification": relevant(K3_FACT)},
        hops=[NEXT, ENOUGH],
    )


async def run_aurora(aurora: KnowledgeBase, *answers: str, policy: CorrectivePolicy | None = None) -> CorrectiveState:
    """The two-step question with top_k=1, the generator answering ``answers`` in turn."""
    state, _ = await run_graph(
        aurora, aurora_script(*answers), query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=policy or floor()
    )
    return state


async def test_an_answer_resting_on_the_hops_evidence_replaces_plain_rags(aurora: KnowledgeBase) -> None:
    state = await run_aurora(aurora, PLAIN, AURORA_ANSWER)

    assert state.events == [*FLOOR_AND_HOP, ev.Generate(), SUPPORTED_CHECK, TRUSTED, ev.Stop(reason="answered")]
    assert state.answer == AURORA_ANSWER
    assert set(doc_ids(state.context)) == {"project-aurora", "k3-spec"}
    assert state.plain is not None
    assert state.plain.draft.text == PLAIN
    # One call more than without the floor (the plain draft); the trusted answer still skips both critics.
    without = await run_aurora(aurora, AURORA_ANSWER, policy=no_floor())
    assert without.answer == AURORA_ANSWER
    assert nodes(state) == ["grade_document", "answer_plainly", "plan_hop", "plan_hop", "generate"]
    assert nodes(without) == ["grade_document", "plan_hop", "plan_hop", "generate"]
    assert render_steps(state.events)[2] == "answer_plainly"


async def test_a_later_answer_from_the_evidence_plain_rag_had_gives_way_to_it(aurora: KnowledgeBase) -> None:
    # The hop found the sheet, but the answer only restates the bridge page: nothing new rests on the hop.
    restated = "Project Aurora is led by Mei Suzuki and is scheduled to ship in 2026 [1]."
    state = await run_aurora(aurora, PLAIN, restated)

    assert state.events == [
        *FLOOR_AND_HOP,
        ev.Generate(),
        SUPPORTED_CHECK,
        TRUSTED,
        ev.Generate(mode="keep_plain"),
        ev.Stop(reason="answered"),
    ]
    assert state.answer == PLAIN
    assert doc_ids(state.context) == doc_ids(state.sources) == ["project-aurora"]
    assert not state.abstained
    assert not state.fallback


async def test_a_later_abstention_returns_plain_rags_answer(aurora: KnowledgeBase) -> None:
    state = await run_aurora(aurora, PLAIN, NOT_IN_CONTEXT)

    assert state.events[len(FLOOR_AND_HOP) :] == [
        ev.Generate(),
        ev.Check(critic="grounded", outcome="skipped", note="no answer found"),
        ev.Generate(mode="keep_plain"),
        ev.Stop(reason="answered"),
    ]
    assert state.answer == PLAIN
    assert not state.abstained


async def test_a_run_ending_on_its_budget_returns_plain_rags_answer_not_a_cautious_one(aurora: KnowledgeBase) -> None:
    # The hop's answer invents its figure, and the call budget ends the run before another round: the plain answer
    # is returned, with the sentence plain RAG's own gate withheld reported, instead of a cautious statement.
    invented = "The Kumo Carrier K3 has a maximum payload of 900 kg [2]."
    policy = replace(floor(), max_llm_calls=5)
    plain_with_a_guess = f"{PLAIN} It can probably lift 500 kg [1]."
    state = await run_aurora(aurora, plain_with_a_guess, invented, policy=policy)

    assert nodes(state) == ["grade_document", "answer_plainly", "plan_hop", "plan_hop", "generate"]
    assert ev.Generate(mode="cautious") in state.events
    guess = ev.Withhold(
        index=1,
        sentence="It can probably lift 500 kg [1].",
        reason="unsupported",
        missing=("500", "kg", "lift", "probably"),
    )
    assert state.events[-3:] == [ev.Generate(mode="keep_plain"), guess, ev.Stop(reason="max_llm_calls")]
    assert state.answer == PLAIN
    assert not state.fallback
    assert not state.abstained


async def test_when_plain_rag_abstains_the_later_answer_stands(aurora: KnowledgeBase) -> None:
    state = await run_aurora(aurora, NOT_IN_CONTEXT, AURORA_ANSWER)

    assert ev.Generate(mode="plain", abstention="no plain answer") in state.events
    assert state.events[-4:] == [ev.Generate(), SUPPORTED_CHECK, TRUSTED, ev.Stop(reason="answered")]
    assert state.answer == AURORA_ANSWER


async def test_the_generator_takes_plain_rags_answer_again_on_the_same_passages(knowledge: KnowledgeBase) -> None:
    # The planner finds the first retrieval sufficient: the generator would be handed plain RAG's very passages.
    with_floor, model = await run_graph(
        knowledge, Script(answers=[K2_ANSWER]), query=K2_QUESTION, top_k=1, policy=floor()
    )
    without, _ = await run_graph(
        knowledge,
        Script(answers=[K2_ANSWER]),
        query=K2_QUESTION,
        top_k=1,
        policy=no_floor(),
    )

    assert with_floor.events == [
        ev.Retrieve(k=1, found=1),
        ev.Evaluate(verdict="correct", kept=1, total=1, graded=0),
        ev.Generate(mode="plain"),
        ev.PlanHop(hop=1, done=True),
        ev.Refine(strips=1, passages=1),
        ev.Generate(mode="reuse_plain"),
        SUPPORTED_CHECK,
        TRUSTED,
        ev.Stop(reason="answered"),
    ]
    assert with_floor.answer == without.answer == K2_ANSWER
    # As many calls as without the floor: the plain draft stands in for the generation.
    assert nodes(with_floor) == ["answer_plainly", "plan_hop"]
    assert nodes(without) == ["plan_hop", "generate"]
    assert len(model.calls) == 2


def passage(chunk_id: str, text: str) -> Passage:
    return Passage(chunk_id=chunk_id, doc_id=chunk_id, title="", text=text, score=0.5)


def test_new_support_names_what_only_the_later_evidence_holds_in_english_and_japanese() -> None:
    basic = passage("basic", "The Basic plan costs 1,000 yen a month and includes 10 GB of storage.")
    premium = passage("premium", "The Premium plan costs 3,000 yen a month and includes 100 GB of storage.")
    question = "How much does the Premium plan cost?"
    assert new_support("It costs 3,000 yen a month [2].", question, [basic, premium], [basic], 0.5) == ("3000",)
    # A later passage about a neighbouring case supports its own figures, but holds no part of the question the first
    # passages lacked: what it supports is not what plain RAG was missing.
    launch = passage("launch", "The Premium plan launched on 3 May 2021 with 100 GB of storage.")
    neighbour = passage("neighbour", "The Basic plan launched on 9 June 2019 with 10 GB of storage.")
    when = "When did the Premium plan launch?"
    assert new_support("It launched on 9 June 2019.", when, [launch, neighbour], [launch], 0.5) == ()
    # Said from the passage plain RAG had, or from a later passage that repeats it: nothing new rests on the later one.
    assert new_support("It costs 1,000 yen a month [1].", question, [basic, premium], [basic], 0.5) == ()
    retold = passage("retold", premium.text)
    assert new_support("It costs 3,000 yen [1].", question, [premium, retold], [premium], 0.5) == ()
    # A sentence the gate would withhold is no evidence of anything.
    assert new_support("It costs 3,000 yen and 9 euros.", question, [basic, premium], [basic], 0.5) == ()

    ja_basic = passage("ja-basic", "ベーシックプランは月額1,000円で、保存容量は10GBです。")
    ja_premium = passage("ja-premium", "プレミアムプランは月額3,000円で、専任サポートが付きます。")
    ja_question = "プレミアムプランの料金はいくらですか？"
    found = new_support("月額3,000円で、専任サポートが付きます。", ja_question, [ja_basic, ja_premium], [ja_basic], 0.5)
    assert "3000" in found
    assert "専任" in found
    assert new_support("月額1,000円です。", ja_question, [ja_basic, ja_premium], [ja_basic], 0.5) == ()
    # Numbers by value, as the gate reads them: "3千円" is 3,000 yen.
    assert new_support("月額3千円です。", ja_question, [ja_basic, ja_premium], [ja_basic], 0.5) == ("3000",)


async def test_a_draft_the_critic_rejects_is_no_floor(knowledge: KnowledgeBase) -> None:
    # A Japanese draft over English passages: the gate compares only its numbers, so the critic is asked when the
    # generator takes it again, and rejects it. The regeneration from the same passages is the answer, not the draft.
    translated = "Kumo Carrier K2の最大積載量は150kgです [1]。"
    script = Script(answers=[translated, K2_REGENERATED], grounded=[unsupported(translated), SUPPORTED])
    policy = replace(floor(), trust_correct_grounded=False)
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, top_k=1, policy=policy)

    assert [e for e in state.events if isinstance(e, ev.Generate)] == [
        ev.Generate(mode="plain"),
        ev.Generate(mode="reuse_plain"),
        ev.Generate(mode="regenerate"),
    ]
    assert state.plain is not None
    assert state.plain.rejected
    assert state.answer == K2_REGENERATED

    # Rejected again, and no round left: the run ends on a cautious answer, never on the draft the critic rejected.
    script = Script(answers=[translated], grounded=[unsupported(translated)])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, top_k=1, policy=replace(policy, max_rewrites=0))
    assert state.fallback
    assert ev.Generate(mode="keep_plain") not in state.events
    assert state.answer != translated


async def test_no_floor_is_drafted_on_a_retrieval_judged_incorrect(knowledge: KnowledgeBase) -> None:
    state, _ = await run_graph(knowledge, Script(), query=OFF_TOPIC, top_k=1, policy=floor())

    assert state.verdicts[0] == "incorrect"
    assert state.plain is None
    assert "answer_plainly" not in nodes(state)


def test_the_floor_without_passages_of_its_own_fails_the_start() -> None:
    with pytest.raises(ValidationError, match="GATEWAY_ANSWER_PASSAGES"):
        CorrectiveSettings(answer_passages=0)
    assert (
        CorrectiveSettings(answer_passages=0, plain_floor=False)
        .policy(floor().grounding, use_calibration())
        .answer_passages
        == 0
    )
