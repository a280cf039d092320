"""The round judge: the evaluator's first stage reading a retrieval round as a whole.

The judge's weights are fitted (``python -m routes.offline.training.fit_judge``) on the shared data and the near-miss
manuals. The documents these tests search (the office documents, the written Japanese SaaS manual) are in neither,
though the near-miss manuals hold similar scenarios (a mid-month cancellation beside plan changes).
"""

from __future__ import annotations

import pytest

from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import CorrectiveSettings
from pipelines.corrective.evaluator import evaluate_passages
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.shared.deps import Passage
from pipelines.shared.events import Evaluate
from pipelines.shared.judge import judge_round, round_features
from pipelines.shared.relevance import QueryScorer
from pipelines.shared.visibility import Visibility
from routes.written_kb import load_written_kb
from tests.calibration_support import corrective_policy, grounding_policy, use_calibration
from tests.unit.corrective_support import (
    CANTEEN_QUESTION,
    OFF_TOPIC,
    TENANT,
    Script,
    doc_ids,
    graded_titles,
    make_knowledge,
    make_llm,
    run_graph,
)


def judged_policy() -> CorrectivePolicy:
    return corrective_policy(judge=use_calibration().judge)


MANUAL = "saas-ja"
MID_MONTH_CANCEL = "月の途中で解約すると日割りになりますか？"


def passage(doc_id: str, title: str, text: str, score: float) -> Passage:
    return Passage(chunk_id=doc_id, doc_id=doc_id, title=title, text=text, score=score)


async def test_the_one_page_that_answers_is_confirmed_without_the_grader(knowledge: KnowledgeBase) -> None:
    """Alone, the canteen page's words leave it in the band and the LLM grader is asked; among four pages about
    other things, it is the only one holding what the question asks, and the judge confirms it."""
    found = await knowledge.search(TENANT, CANTEEN_QUESTION, 5, visibility=Visibility.everything())
    llm, model = make_llm(Script())  # every grade "not relevant": only the first stage can confirm a page
    per_passage = await evaluate_passages(llm, corrective_policy(), CANTEEN_QUESTION, found, calls_left=4)
    assert per_passage.graded == 1
    assert graded_titles(model) == ["Staff canteen"]

    llm, model = make_llm(Script())
    judged = await evaluate_passages(llm, judged_policy(), CANTEEN_QUESTION, found, calls_left=4)
    assert judged.verdict == "correct"
    assert doc_ids(judged.confirmed) == ["canteen"]
    assert judged.graded == 0
    assert model.calls == []


async def test_a_round_where_nothing_answers_is_incorrect_whatever_its_best(knowledge: KnowledgeBase) -> None:
    found = await knowledge.search(TENANT, OFF_TOPIC, 5, visibility=Visibility.everything())
    best = max(round_features(OFF_TOPIC, found), key=lambda f: f["cosine"])
    assert best["cosine_margin"] > 0  # the best page leads the round, on nothing
    llm, model = make_llm(Script())
    result = await evaluate_passages(llm, judged_policy(), OFF_TOPIC, found, calls_left=4)
    assert result.verdict == "incorrect"
    assert result.kept == []
    assert model.calls == []
    assert max(result.fast_scores) < judged_policy().lower


async def test_a_follow_up_round_is_scored_passage_by_passage(knowledge: KnowledgeBase) -> None:
    """A follow-up round's cosines are to the queries that found its passages, not to the question: no margins."""
    found = await knowledge.search(TENANT, CANTEEN_QUESTION, 5, visibility=Visibility.everything())
    rewrite = "staff canteen opening hours"
    llm, _ = make_llm(Script())
    judged = await evaluate_passages(llm, judged_policy(), CANTEEN_QUESTION, found, calls_left=0, scoring_query=rewrite)
    llm, _ = make_llm(Script())
    alone = await evaluate_passages(
        llm, corrective_policy(), CANTEEN_QUESTION, found, calls_left=0, scoring_query=rewrite
    )
    assert judged.fast_scores == alone.fast_scores
    assert judged.fast_scores != judge_round(use_calibration().judge, CANTEEN_QUESTION, found)


async def test_the_corrective_graph_runs_on_the_judge(knowledge: KnowledgeBase) -> None:
    state, model = await run_graph(knowledge, Script(), query=CANTEEN_QUESTION, policy=judged_policy())
    assert state.events[1] == Evaluate(verdict="correct", kept=1, total=5, graded=0)
    assert "Staff canteen" not in graded_titles(model)
    assert doc_ids(state.evidence) == ["canteen"]


def test_a_term_only_one_page_holds_weighs_more_than_terms_every_page_has() -> None:
    """Two pages share the question's 'mid-month' and 'prorated'; only one has 'cancel'."""
    question = "If I cancel mid-month, is the month prorated?"
    cancel = passage("cancel", "Cancellation", "Cancel mid-month and the month is not prorated.", 0.5)
    change = passage("change", "Plan change", "Change plan mid-month and the month is prorated.", 0.5)
    features = round_features(question, [cancel, change])
    # 'cancel' is the term that tells them apart: it weighs more than the terms both pages have.
    gap = {name: features[0][name] - features[1][name] for name in ("overlap", "distinctive")}
    assert gap["distinctive"] > gap["overlap"] > 0
    assert features[0]["distinctive_margin"] > 0 > features[1]["distinctive_margin"]
    assert features[0]["cosine_margin"] == features[1]["cosine_margin"] == 0.0
    scores = judge_round(use_calibration().judge, question, [cancel, change])
    assert scores[0] > scores[1]


K2_QUESTION = "What is the maximum payload of the Kumo Carrier K2?"
K2 = passage("k2", "Kumo Carrier K2", "The Kumo Carrier K2 has a maximum payload of 150 kg.", 0.8)


def fast(question: str, p: Passage) -> float:
    return QueryScorer.of(use_calibration().relevance, question).score(p.title, p.text, p.score)


def test_with_nothing_to_compare_the_fast_scorer_scores() -> None:
    """A lone passage (no round: the fit never saw one) and a question without content words."""
    model = use_calibration().judge
    assert judge_round(model, K2_QUESTION, [K2]) == [fast(K2_QUESTION, K2)]
    vpn = passage("vpn", "VPN policy", "The VPN policy was last updated on 1 February 2024.", 0.3)
    assert judge_round(model, "?", [K2, vpn]) == [fast("?", K2), fast("?", vpn)]
    assert judge_round(model, K2_QUESTION, [K2, vpn]) != [fast(K2_QUESTION, K2), fast(K2_QUESTION, vpn)]
    assert judge_round(model, "anything", []) == []


def test_a_passage_in_the_other_script_is_left_out_of_the_round() -> None:
    """Scored on its cosine; the round of the question's script is judged as if it were not there."""
    model = use_calibration().judge
    cancel = passage(
        "cancel", "解約について", "月の途中で解約しても、その月の料金は日割りにならず全額請求される。", 0.6
    )
    change = passage("change", "プラン変更", "月の途中でプランを変更すると、その月の料金は日割りで計算される。", 0.62)
    english = passage("en", "Cancellation", "Cancelling mid-month is charged in full.", 0.9)
    mixed = judge_round(model, MID_MONTH_CANCEL, [cancel, english, change])
    assert mixed[1] == model.relevance.cross_script_probability(0.9)
    assert [mixed[0], mixed[2]] == judge_round(model, MID_MONTH_CANCEL, [cancel, change])


@pytest.fixture
async def manual(embeddings: USEEmbeddings) -> KnowledgeBase:
    docs = [NewDocument(id=d.id, title=d.title, text=d.text) for d in load_written_kb().documents if d.lang == "ja"]
    return await make_knowledge(embeddings, MANUAL, docs)


async def test_japanese_neighbouring_page_leaves_the_grader_out(manual: KnowledgeBase) -> None:
    """Asked about cancelling mid-month: the per-passage scorer sends the seats page (charged from the day seats
    are added, mid-month) to the grader; the judge sees the round's only cancellation page and drops it unasked."""
    found = await manual.search(MANUAL, MID_MONTH_CANCEL, 8, visibility=Visibility.everything())
    llm, model = make_llm(Script())
    await evaluate_passages(llm, corrective_policy(), MID_MONTH_CANCEL, found, calls_left=4)
    seats = next(p.title for p in found if p.doc_id == "ja-seats")
    assert graded_titles(model) == [seats]
    llm, model = make_llm(Script())
    judged = await evaluate_passages(llm, judged_policy(), MID_MONTH_CANCEL, found, calls_left=4)
    assert judged.verdict == "correct"
    assert doc_ids(judged.kept) == ["ja-cancellation"]
    assert model.calls == []


def test_the_service_turns_the_judge_on_and_a_setting_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    grounding = grounding_policy()
    calibration = use_calibration()
    assert CorrectiveSettings().policy(grounding, calibration).judge == calibration.judge
    monkeypatch.setenv("GATEWAY_EVALUATOR_JUDGE", "false")
    assert CorrectiveSettings().policy(grounding, calibration).judge is None
