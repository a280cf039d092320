"""Japanese through every place words are compared: the fast scorer, the evaluator, support, metrics.

The issue's failure: on a Japanese SaaS manual, asked when tasks stop being editable after a card
payment fails, the right passage was the top hit by cosine, yet the LLM-free check judged the
retrieval wrong and the corrective evaluator kept nothing, so the gateway said the knowledge base
had no answer. On the code before the shared tokenizer (word overlap diluted by particle bigrams,
one English-fitted model) this question's retrieval was "ambiguous" at best and "incorrect" for
paraphrases; the manual (routes/data/written_kb.json) has distractors that share its words
(invoice payments overdue, payment methods, cancellation, pro-rating on plan change).
"""

from __future__ import annotations

import pytest

from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from pipelines.corrective.evaluator import evaluate_passages
from pipelines.shared import events as ev
from pipelines.shared.citations import states_nothing
from pipelines.shared.relevance import QueryScorer, fast_verdict
from pipelines.shared.support import lexical_support
from pipelines.shared.visibility import Visibility
from routes.offline.eval.metrics import answer_in_prediction, f1_score, normalize_answer
from routes.written_kb import load_written_kb
from tests.calibration_support import corrective_policy
from tests.unit.corrective_support import Script, make_knowledge, make_llm, run_graph

MANUAL = "saas-ja"
FAILED_PAYMENT = "カード決済に失敗した後、タスクを編集できなくなるのはいつですか？"
FAILED_PAYMENT_ANSWER = "決済失敗日から8日目以降は閲覧のみモードになり、タスクの作成・編集ができなくなります [1]。"
MID_MONTH_CANCEL = "月の途中で解約すると日割りになりますか？"


@pytest.fixture
async def manual(embeddings: USEEmbeddings) -> KnowledgeBase:
    """Every Japanese document of the written knowledge base (the SaaS manual and the towns) in one tenant."""
    docs = [NewDocument(id=d.id, title=d.title, text=d.text) for d in load_written_kb().documents if d.lang == "ja"]
    return await make_knowledge(embeddings, MANUAL, docs)


async def test_failed_payment_question_finds_its_passage_correct_and_its_distractors_not(
    manual: KnowledgeBase,
) -> None:
    policy = corrective_policy()
    found = await manual.search(MANUAL, FAILED_PAYMENT, 8, visibility=Visibility.everything())
    assert found[0].doc_id == "ja-payment-failure"  # the top hit by cosine, as in the issue
    scorer = QueryScorer.of(policy.relevance, FAILED_PAYMENT)
    scores = {p.doc_id: scorer.score(p.title, p.text, p.score) for p in found}
    assert scores["ja-payment-failure"] >= policy.upper
    for distractor in ("ja-invoice-overdue", "ja-payment-methods", "ja-plan-change", "ja-cancellation"):
        assert scores.get(distractor, 0.0) < policy.upper, distractor
    assert fast_verdict(policy.relevance, FAILED_PAYMENT, found, policy.lower, policy.upper) == "correct"


async def test_mid_month_cancellation_prefers_the_cancellation_passage_over_plan_change(
    manual: KnowledgeBase,
) -> None:
    policy = corrective_policy()
    found = await manual.search(MANUAL, MID_MONTH_CANCEL, 8, visibility=Visibility.everything())
    scorer = QueryScorer.of(policy.relevance, MID_MONTH_CANCEL)
    scores = {p.doc_id: scorer.score(p.title, p.text, p.score) for p in found}
    assert scores["ja-cancellation"] >= policy.upper
    assert scores["ja-plan-change"] < policy.lower  # shares 日割り, but is about plan changes
    assert max(scores, key=lambda d: scores[d]) == "ja-cancellation"


async def test_evaluator_keeps_the_failed_payment_passage_without_asking_the_model(manual: KnowledgeBase) -> None:
    found = await manual.search(MANUAL, FAILED_PAYMENT, 8, visibility=Visibility.everything())
    llm, _ = make_llm(Script())  # every grade "not relevant": only the fast scorer can keep a passage
    result = await evaluate_passages(llm, corrective_policy(), FAILED_PAYMENT, found, calls_left=4)
    assert result.verdict == "correct"
    assert "ja-payment-failure" in [p.doc_id for p in result.confirmed]


async def test_corrective_pipeline_answers_the_failed_payment_question_from_the_manual(
    manual: KnowledgeBase,
) -> None:
    state, _ = await run_graph(
        manual, Script(answers=[FAILED_PAYMENT_ANSWER]), query=FAILED_PAYMENT, tenant=MANUAL, top_k=8
    )
    first = next(e for e in state.events if isinstance(e, ev.Evaluate))
    assert first.verdict == "correct"
    assert first.kept >= 1
    assert not state.abstained
    assert state.answer == FAILED_PAYMENT_ANSWER
    assert "ja-payment-failure" in [p.doc_id for p in state.sources]


# --- support and the generation gate --------------------------------------------------------------------------


PAYMENT_FAILURE_TEXT = load_written_kb().document("ja-payment-failure").text


def test_japanese_answer_copied_from_the_manual_is_supported() -> None:
    support = lexical_support(FAILED_PAYMENT_ANSWER, FAILED_PAYMENT, [PAYMENT_FAILURE_TEXT])
    assert support.novel_terms > 0
    assert support.supported(0.8)


def test_japanese_answer_with_an_invented_stage_is_not_supported() -> None:
    invented = "決済失敗日から15日目以降は、管理者の電話認証が必要になります[1]。"
    support = lexical_support(invented, FAILED_PAYMENT, [PAYMENT_FAILURE_TEXT])
    assert support.missing_numbers == ("15",)
    assert {"電話", "認証"} <= set(support.missing)
    assert not support.supported(0.5)


@pytest.mark.parametrize(
    ("reply", "nothing"),
    [
        ("8日目から編集できなくなります[1]。", False),
        ("閲覧のみモード[1]", False),
        ("[1] [2]", True),
        ("The maximum payload of the robot is [1].", True),
    ],
)
def test_a_japanese_reply_is_words_not_one_word(reply: str, nothing: bool) -> None:
    assert states_nothing(reply) is nothing


# --- evaluation metrics ---------------------------------------------------------------------------------------


def test_japanese_answers_are_scored_by_characters_after_nfkc_and_japanese_punctuation() -> None:
    assert normalize_answer("「８日目」から。[1]") == "8日目から"
    assert f1_score("８日目", ["8日目"]) == 1.0
    # All 4 characters of the gold answer in a 7-character prediction: P 4/7, R 1, F1 8/11.
    assert f1_score("8日目以降です", ["8日以降"]) == pytest.approx(8 / 11)
    assert f1_score("閲覧のみ", ["8日目"]) == 0.0
    assert answer_in_prediction("第２段階、８日目からです。", ["8日目"]) == 1.0
    assert f1_score("The Eiffel Tower [1]", ["eiffel tower"]) == 1.0
