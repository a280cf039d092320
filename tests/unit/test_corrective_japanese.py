"""The corrective graph on a Japanese knowledge base: every prompt that makes the model write says which language,
and the groundedness check compares a Japanese answer's words instead of handing it to the critic.

What the local 1.5B model did before: told in English to answer again, it answered a Japanese question
in English; an English answer over Japanese passages can only be checked by the critic, which rejected correct
answers ("1,800円 [2]" among them, read as English because it is mostly digits), and the run ended ``unsupported``
with the evidence in hand. Its hop queries and rewrites were English too, which the Japanese keyword index cannot
match.
"""

from __future__ import annotations

import pytest

from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from pipelines.corrective.critique import CITATIONS_ONLY, regeneration_note
from pipelines.corrective.hops import bridge_fact
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.prompts import EMPTY_ANSWER_NOTE, EMPTY_ANSWER_NOTE_JA, REGENERATE_NOTE_JA
from pipelines.shared import events as ev
from pipelines.shared.deps import Passage
from pipelines.shared.prompts import ANSWER_CUE_JA
from tests.calibration_support import corrective_policy
from tests.unit.corrective_support import (
    SUPPORTED_CHECK,
    Script,
    kind,
    make_knowledge,
    nodes,
    relevant,
    run_graph,
)

TASKNOTE = "tasknote"
PLANS = "スタンダードプランは1ユーザーあたり月額900円、ビジネスプランは1ユーザーあたり月額1,800円である。"
SUPPORT = "ビジネスプランでは、メールに加えて電話でのサポートを平日9時から18時まで受けられる。"
TASKNOTE_DOCS = [
    NewDocument(id="plans", title="料金プラン", text=PLANS),
    NewDocument(id="support", title="サポート窓口", text=SUPPORT),
    NewDocument(id="storage", title="ストレージ容量", text="ビジネスプランは1ユーザーあたり50GBである。"),
]
QUESTION = "電話サポートを受けられるプランの料金は、1ユーザーあたり月額いくらですか？"
HOP_QUERY = "ビジネスプランの料金は月額いくらですか？"


def hop_policy() -> CorrectivePolicy:
    return corrective_policy(max_hops=1, max_rewrites=0, trust_correct_grounded=True)


@pytest.fixture
async def tasknote(embeddings: USEEmbeddings) -> KnowledgeBase:
    return await make_knowledge(embeddings, TASKNOTE, TASKNOTE_DOCS)


def script(*answers: str) -> Script:
    """Both pages judged relevant; the planner names the plan, then the answers in order."""
    return Script(
        answers=list(answers),
        grades={"料金プラン": relevant(PLANS), "サポート窓口": relevant(SUPPORT)},
        hops=[{"found": "電話サポートはビジネスプラン", "next_query": HOP_QUERY}],
        rewrites=[HOP_QUERY],
    )


async def test_a_japanese_answer_of_a_number_is_checked_against_the_passages_without_the_critic(
    tasknote: KnowledgeBase,
) -> None:
    state, model = await run_graph(
        tasknote, script("1,800円 [1]"), query=QUESTION, policy=hop_policy(), tenant=TASKNOTE
    )

    assert state.stop_reason == "answered"
    assert state.answer == "1,800円 [1]"
    assert SUPPORTED_CHECK in state.events
    assert "GroundednessCheck" not in [kind(call) for call in model.calls]  # the words were compared, no critic


async def test_the_hop_planner_is_told_to_write_in_japanese(tasknote: KnowledgeBase) -> None:
    _, model = await run_graph(tasknote, script("1,800円 [1]"), query=QUESTION, policy=hop_policy(), tenant=TASKNOTE)

    planner_system = [str(m[0].content) for m, kwargs in model.calls if kind((m, kwargs)) == "NextHop"]
    assert planner_system
    assert all('"found" and "next_query" in Japanese' in system for system in planner_system)


async def test_an_answer_of_citations_alone_is_asked_again_in_japanese(tasknote: KnowledgeBase) -> None:
    answers = script("[1] [2]", "ビジネスプランは月額1,800円です [1]。")
    state, model = await run_graph(tasknote, answers, query=QUESTION, policy=hop_policy(), tenant=TASKNOTE)

    generations = [messages for messages, kwargs in model.calls if kind((messages, kwargs)) == "generate"]
    assert len(generations) == 2
    assert str(generations[0][-1].content).endswith(f"\n{ANSWER_CUE_JA}")  # asked for an answer in Japanese
    assert str(generations[1][-1].content) == EMPTY_ANSWER_NOTE_JA
    assert state.answer == "ビジネスプランは月額1,800円です [1]。"
    assert nodes(state).count("generate") == 2
    assert ev.Generate(mode="regenerate") in state.events
    assert state.stop_reason == "answered"


async def test_the_rewriter_is_told_to_write_in_japanese(tasknote: KnowledgeBase) -> None:
    # No planning and a doubted answer: the rewrite is the only way to a new round.
    policy = corrective_policy(max_rewrites=1)
    japanese = Script(answers=["月額2,400円です [1]。"], grounded=[{"unsupported_claims": ["月額2,400円"]}])
    _, model = await run_graph(tasknote, japanese, query=QUESTION, policy=policy, tenant=TASKNOTE)

    rewrites = [messages for messages, kwargs in model.calls if kind((messages, kwargs)) == "rewrite"]
    assert rewrites
    assert "Write the search query in Japanese" in str(rewrites[0][0].content)


def test_regeneration_notes_are_in_the_answers_language() -> None:
    claim = "月額2,400円"
    assert regeneration_note([claim], "ja") == REGENERATE_NOTE_JA.format(claims=claim)
    assert regeneration_note([CITATIONS_ONLY], "ja") == EMPTY_ANSWER_NOTE_JA
    assert regeneration_note([CITATIONS_ONLY], None) == EMPTY_ANSWER_NOTE
    assert regeneration_note([CITATIONS_ONLY], "fr") == f"{EMPTY_ANSWER_NOTE}\nAnswer in French."
    assert regeneration_note([], "ja") == ""


def test_a_bridge_clause_that_only_repeats_the_question_is_no_fact() -> None:
    # Cut at the Japanese comma, the painting's name shares most with the question and adds nothing to it.
    text = "「朝霧の渡し」は、水野澄江が1931年に描いた油彩画である。霧里町の渡し場を舞台に描いている。"
    page = Passage(chunk_id="w", doc_id="w", title="朝霧の渡し", text=text, score=0.4)
    question = "「朝霧の渡し」の舞台となった町の人口はどのくらいですか？"
    assert bridge_fact(question, page) == "霧里町の渡し場を舞台に描いている。"
