"""The corrective graph's evaluation: the fast scorer's cascade, the LLM grader, exploration of later rounds.

Scores are probed before they are relied on (see :mod:`tests.unit.corrective_support`).
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.knowledge.service import KnowledgeBase
from pipelines.corrective.evaluator import evaluate_passages
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.rewrite import expanded_query
from pipelines.shared.deps import Passage
from pipelines.shared.events import Evaluate, Refine, Retrieve
from pipelines.shared.prompts import ABSTAIN_EN, NOT_IN_CONTEXT
from pipelines.shared.relevance import relevance
from pipelines.shared.visibility import Visibility
from tests.calibration_support import corrective_policy
from tests.unit.corrective_support import (
    ANSWERED,
    AURORA,
    AURORA_QUESTION,
    AURORA_REWRITE,
    CANTEEN_ANSWER,
    CANTEEN_FACT,
    CANTEEN_QUESTION,
    CASCADE_QUESTION,
    DOCS,
    HEAVY_QUESTION,
    K2_ANSWER,
    K2_FACT,
    K2_QUESTION,
    K2_ROUND,
    K3_FACT,
    NO_EVIDENCE,
    NOT_RELEVANT,
    OFF_TOPIC,
    OSAKA_FACT,
    TENANT,
    Reply,
    Script,
    doc_ids,
    graded_titles,
    kind,
    make_llm,
    nodes,
    prompts,
    relevant,
    run_graph,
    scores,
)

# --- Correct retrieval ------------------------------------------------------------------------------------------


async def test_correct_retrieval_refines_answers_and_checks_without_extra_calls(knowledge: KnowledgeBase) -> None:
    probe = await scores(knowledge, K2_QUESTION)
    policy = corrective_policy()
    assert probe["k2"] > policy.upper + 0.3
    assert all(s < policy.lower - 0.1 for doc, s in probe.items() if doc != "k2")

    state, model = await run_graph(knowledge, Script(), query=K2_QUESTION)

    assert state.events == [*K2_ROUND, *ANSWERED]
    assert state.verdict == "correct"
    assert state.verdicts == ["correct"]
    assert state.rewrites == 0
    assert state.search_query == ""  # no follow-up round
    assert state.grounded is True
    assert state.useful is True
    assert state.regenerated is False
    assert state.abstained is False
    assert state.stop_reason == "answered"
    assert state.answer == K2_ANSWER
    assert doc_ids(state.evidence) == ["k2"]
    assert doc_ids(state.sources) == ["k2"]
    assert state.context == state.strips
    assert "150 kg" in state.context[0].text
    # The grounding check settled it lexically: only the generation and the usefulness critic called the model.
    assert nodes(state) == ["generate", "check_useful"]
    assert [kind(c) for c in model.calls] == ["generate", "UsefulnessCheck"]
    assert "[1] (Kumo Carrier K2)" in str(model.calls[0][0][1].content)


async def test_upper_zero_forces_correct_even_for_an_off_topic_question(knowledge: KnowledgeBase) -> None:
    # Every fast score is a probability >= 0, so upper=0 makes every document "relevant" without any grading.
    script = Script(answers=[NOT_IN_CONTEXT])
    policy = corrective_policy(upper=0.0, max_rewrites=0)
    state, model = await run_graph(knowledge, script, query=OFF_TOPIC, policy=policy)
    assert state.events[1] == Evaluate(verdict="correct", kept=5, total=5, graded=0)
    assert "Grade" not in [kind(c) for c in model.calls]
    assert len(state.evidence) == 5


# --- Follow-up rounds: scored against the rewrite, the best document explored -----------------------------------


@pytest.mark.parametrize(
    ("round_query", "verdict", "graded"),
    [(None, "incorrect", 0), (HEAVY_QUESTION, "incorrect", 0), ("carrier weight limit", "correct", 1)],
    ids=["first-round", "query-is-the-question", "follow-up-round"],
)
async def test_follow_up_round_scores_each_document_with_the_better_of_question_and_round_query(
    knowledge: KnowledgeBase, round_query: str | None, verdict: str, graded: int
) -> None:
    policy = corrective_policy()
    (k2,) = await knowledge.search(TENANT, "carrier weight limit", 1, visibility=Visibility.everything())
    against_question = relevance(policy.relevance, HEAVY_QUESTION, k2.title, k2.text, k2.score)
    against_rewrite = relevance(policy.relevance, "carrier weight limit", k2.title, k2.text, k2.score)
    # Below lower against the question (but high enough that a follow-up round would explore it), in the band
    # against the rewrite.
    assert policy.explore_floor < against_question < policy.lower - 0.02
    assert policy.lower + 0.01 < against_rewrite < policy.upper - 0.2
    llm, model = make_llm(Script(grades={"Kumo Carrier K2": relevant(K2_FACT)}))

    result = await evaluate_passages(llm, policy, HEAVY_QUESTION, [k2], calls_left=2, scoring_query=round_query)

    assert result.fast_scores == [against_rewrite if graded else against_question]
    assert (result.verdict, result.graded, doc_ids(result.kept)) == (verdict, graded, ["k2"] if graded else [])
    # The first round never explores: a document below lower is dropped without asking the grader.
    assert graded_titles(model) == ["Kumo Carrier K2"] * graded
    if graded:  # graded against the question, not the rewrite
        assert str(model.calls[0][0][-1].content).startswith(f"Question: {HEAVY_QUESTION}\n\nDocument (Kumo")


async def aurora_second_hop_candidates(aurora: KnowledgeBase) -> list[Passage]:
    """What the follow-up round finds once the bridge is known: every other document, best first."""
    expansion = expanded_query(
        AURORA_QUESTION, await aurora.search(AURORA, AURORA_QUESTION, 1, visibility=Visibility.everything())
    )
    return [
        p
        for p in await aurora.search(AURORA, expansion, 5, visibility=Visibility.everything())
        if p.doc_id != "project-aurora"
    ]


@pytest.mark.parametrize(
    ("grade", "verdict", "kept"), [(relevant(K3_FACT), "correct", ["k3-spec"]), (NOT_RELEVANT, "incorrect", [])]
)
async def test_follow_up_round_with_nothing_in_the_band_grades_its_best_document(
    aurora: KnowledgeBase, grade: dict[str, Any], verdict: str, kept: list[str]
) -> None:
    # The missing hop scores low against the question (it does not name Project Aurora) and against the rewrite
    # (which does not name the K3): the fast scorer cannot see it, so the best one is graded anyway.
    policy = corrective_policy()
    candidates = await aurora_second_hop_candidates(aurora)
    assert doc_ids(candidates) == ["k3-spec", "canteen", "parking", "vpn"]
    best = [
        max(relevance(policy.relevance, q, p.title, p.text, p.score) for q in (AURORA_QUESTION, AURORA_REWRITE))
        for p in candidates
    ]
    assert policy.explore_floor < best[0] < policy.lower
    assert all(s < best[0] - 0.05 for s in best[1:])
    script = Script(grades={"Kumo Carrier K3 specification": grade, "Canteen": relevant("lunch costs 300 yen")})
    llm, model = make_llm(script)

    result = await evaluate_passages(
        llm, policy, AURORA_QUESTION, candidates, calls_left=5, scoring_query=AURORA_REWRITE
    )

    assert result.fast_scores == best
    # Only the best document is explored, not max_graded of them, and its grade decides.
    assert graded_titles(model) == ["Kumo Carrier K3 specification"]
    assert (result.verdict, result.graded, doc_ids(result.kept)) == (verdict, 1, kept)

    # The same documents in a first round: nothing in the band, nothing graded.
    llm, model = make_llm(script)
    first = await evaluate_passages(llm, policy, AURORA_QUESTION, candidates, calls_left=5)
    assert (first.verdict, first.graded, first.kept, model.calls) == ("incorrect", 0, [], [])


@pytest.mark.parametrize(
    ("calls_left", "max_graded", "grade"),
    [(0, 2, relevant(K3_FACT)), (5, 0, relevant(K3_FACT)), (5, 2, "Yes, it is relevant.")],
    ids=["no-call-left", "max-graded-0", "malformed-grade"],
)
async def test_explored_document_the_grader_does_not_judge_is_not_kept(
    aurora: KnowledgeBase, calls_left: int, max_graded: int, grade: Reply
) -> None:
    policy = corrective_policy(max_graded=max_graded)
    candidates = await aurora_second_hop_candidates(aurora)
    llm, _ = make_llm(Script(grades={"Kumo Carrier K3 specification": grade}))
    result = await evaluate_passages(
        llm, policy, AURORA_QUESTION, candidates, calls_left=calls_left, scoring_query=AURORA_REWRITE
    )
    assert result.graded == 0
    assert (result.verdict, result.kept) == ("incorrect", [])


async def test_follow_up_round_does_not_explore_a_best_document_below_the_floor(knowledge: KnowledgeBase) -> None:
    # The grader says "yes" too easily: a document that is hopeless against both queries is not offered to it.
    policy = corrective_policy()
    found = await knowledge.search(TENANT, "Sistine Chapel painter", 5, visibility=Visibility.everything())
    assert all(
        relevance(policy.relevance, q, p.title, p.text, p.score) < policy.explore_floor
        for p in found
        for q in (OFF_TOPIC, "Sistine Chapel painter")
    )
    llm, model = make_llm(Script(grades={d.title: relevant(d.text) for d in DOCS}))
    result = await evaluate_passages(
        llm, policy, OFF_TOPIC, found, calls_left=5, scoring_query="Sistine Chapel painter"
    )
    assert (result.verdict, result.graded, result.kept, model.calls) == ("incorrect", 0, [], [])


# --- The LLM grader ---------------------------------------------------------------------------------------------

GRADED_CORRECT = Evaluate(verdict="correct", kept=1, total=5, graded=1)
GRADED_INCORRECT = Evaluate(verdict="incorrect", kept=0, total=5, graded=1)


@pytest.mark.parametrize(
    ("grade", "policy", "evaluated", "kept"),
    [
        (relevant(CANTEEN_FACT), corrective_policy(max_rewrites=0), GRADED_CORRECT, ["canteen"]),
        (NOT_RELEVANT, corrective_policy(max_rewrites=0), GRADED_INCORRECT, []),
        ({"fact": CANTEEN_FACT, "relevant": False}, corrective_policy(max_rewrites=0), GRADED_INCORRECT, []),
        ({"fact": "None", "relevant": True}, corrective_policy(max_rewrites=0), GRADED_INCORRECT, []),
        ({"fact": "  ", "relevant": True}, corrective_policy(max_rewrites=0), GRADED_INCORRECT, []),
        (
            relevant(CANTEEN_FACT),
            corrective_policy(max_rewrites=0, max_graded=0),
            Evaluate(verdict="ambiguous", kept=1, total=5, graded=0),
            [],
        ),
    ],
    ids=[
        "graded-relevant",
        "graded-not-relevant",
        "fact-but-not-relevant",
        "relevant-with-fact-none",
        "relevant-with-empty-fact",
        "not-graded",
    ],
)
async def test_band_document_verdict_depends_on_the_llm_grader(
    knowledge: KnowledgeBase, grade: dict[str, Any], policy: CorrectivePolicy, evaluated: Evaluate, kept: list[str]
) -> None:
    probe = await scores(knowledge, CANTEEN_QUESTION)
    assert policy.lower + 0.03 < probe["canteen"] < policy.upper - 0.2
    assert all(s < policy.lower - 0.1 for doc, s in probe.items() if doc != "canteen")

    script = Script(grades={"Staff canteen": grade}, answers=[CANTEEN_ANSWER])
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy)

    assert state.events[1] == evaluated
    expected_grades = 1 if policy.max_graded else 0
    assert [kind(c) for c in model.calls].count("Grade") == expected_grades
    assert nodes(state).count("grade_document") == expected_grades
    if evaluated.verdict == "ambiguous":
        assert doc_ids(state.evidence) == ["canteen"]  # undecided documents are kept
    else:
        assert doc_ids(state.evidence) == kept
    if expected_grades:
        grade_prompt = prompts(model, "Grade")[0]
        # A short document is graded whole, against the question.
        assert grade_prompt == f"Question: {CANTEEN_QUESTION}\n\nDocument (Staff canteen):\n{DOCS[2].text}"


@pytest.mark.parametrize(
    "invented",
    [
        "closes at midnight on Sundays",  # words the document does not contain
        "closes at 22:00 on weekdays",  # a number the document does not contain
        K2_FACT,  # a true fact, but of another document
    ],
)
async def test_grader_saying_relevant_with_a_fact_the_document_does_not_contain_is_not_believed(
    knowledge: KnowledgeBase, invented: str
) -> None:
    policy = corrective_policy(max_rewrites=0)
    assert invented not in DOCS[2].text
    script = Script(grades={"Staff canteen": relevant(invented)})
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy)
    assert state.events == [
        Retrieve(k=5, found=5),
        Evaluate(verdict="incorrect", kept=0, total=5, graded=1),  # graded (the call is spent) but not kept
        *NO_EVIDENCE,
    ]
    assert graded_titles(model) == ["Staff canteen"]
    assert nodes(state) == ["grade_document"]
    assert state.evidence == []
    assert state.answer == ABSTAIN_EN


HANDBOOK_SENTENCES = [
    "Visitors must sign in at the reception desk and wear a badge at all times.",
    "Printers on every floor need a staff card, and colour printing must be approved.",
    "Meeting rooms are booked through the intranet calendar up to four weeks ahead.",
    "Bicycles are parked in the basement rack, which is locked every night at 22:00.",
    "Expense claims are filed within thirty days with the original receipts attached.",
    "The first aid kits are kept next to the lifts and checked by facilities monthly.",
    "The fire drill is held on the first Monday of every quarter, usually at 10:00.",
    "The staff canteen closes at 14:00 on weekdays and serves a vegetarian dish daily.",
]
HANDBOOK = Passage(
    chunk_id="handbook#0", doc_id="handbook", title="Staff handbook", text=" ".join(HANDBOOK_SENTENCES), score=0.3
)


@pytest.mark.parametrize(
    ("fact", "verdict"),
    [
        ("The staff canteen closes at 14:00 on weekdays", "correct"),
        ("The fire drill is held on the first Monday of every quarter", "incorrect"),  # in the passage, not shown
    ],
)
async def test_grader_sees_the_best_strips_of_a_long_passage_and_its_fact_must_be_among_them(
    fact: str, verdict: str
) -> None:
    assert len(HANDBOOK.text) > 600
    assert fact in HANDBOOK.text
    policy = corrective_policy(lower=0.0, upper=1.0)  # every document is in the band
    llm, model = make_llm(Script(grades={"Staff handbook": relevant(fact)}))
    result = await evaluate_passages(llm, policy, CANTEEN_QUESTION, [HANDBOOK], calls_left=1)
    assert (result.verdict, result.graded, len(result.calls)) == (verdict, 1, 1)
    assert doc_ids(result.kept) == (["handbook"] if verdict == "correct" else [])
    (prompt,) = [str(m[-1].content) for m, _ in model.calls]
    question, shown = prompt.split("\n\nDocument (Staff handbook):\n")
    assert question == f"Question: {CANTEEN_QUESTION}"
    # The last strip (the canteen) is chosen first, then the others (equally irrelevant) in order while they
    # fit in 500 characters; the chosen strips are shown in the passage's order.
    assert shown == " ".join([*HANDBOOK_SENTENCES[:5], HANDBOOK_SENTENCES[-1]])
    assert len(shown) <= 500 < len(shown) + len(HANDBOOK_SENTENCES[5])


@pytest.mark.parametrize("echo", [CANTEEN_QUESTION, "the canteen close time"])
async def test_grader_echoing_the_question_as_its_fact_is_not_believed(knowledge: KnowledgeBase, echo: str) -> None:
    # A fact must add a term beyond the question's own words, and that term must be in the graded text.
    policy = corrective_policy(lower=0.0, max_rewrites=0)  # both documents found are in the band and graded
    assert list(await scores(knowledge, CANTEEN_QUESTION, k=2)) == ["canteen", "parking"]
    assert "canteen" not in DOCS[4].text
    script = Script(grades={"Staff canteen": NOT_RELEVANT, "Parking rules": relevant(echo)})
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=2)
    assert graded_titles(model) == ["Staff canteen", "Parking rules"]
    assert state.events[1] == Evaluate(verdict="incorrect", kept=0, total=2, graded=2)
    assert state.evidence == []


# --- Cascade ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_graded", "graded_titles_expected"), [(2, ["Osaka office", "Staff canteen"]), (1, ["Osaka office"])]
)
async def test_only_band_documents_reach_the_llm_grader_and_at_most_max_graded(
    knowledge: KnowledgeBase, max_graded: int, graded_titles_expected: list[str]
) -> None:
    policy = corrective_policy(upper=0.3, lower=0.05, max_graded=max_graded, max_rewrites=0)
    probe = await scores(knowledge, CASCADE_QUESTION)
    # above upper: k2; band (best first): osaka, canteen, parking; below lower: vpn
    assert probe["k2"] > policy.upper + 0.1
    assert policy.upper - 0.1 > probe["osaka"] > probe["canteen"] + 0.02 > probe["parking"] + 0.02
    assert probe["parking"] > policy.lower + 0.01
    assert probe["vpn"] < policy.lower - 0.01

    script = Script(grades={"Osaka office": relevant(OSAKA_FACT), "Staff canteen": NOT_RELEVANT})
    state, model = await run_graph(knowledge, script, query=CASCADE_QUESTION, policy=policy)

    assert graded_titles(model) == graded_titles_expected
    assert nodes(state).count("grade_document") == max_graded
    assert "Kumo Carrier K2" not in graded_titles(model)  # above upper: relevant without asking
    assert "VPN policy" not in graded_titles(model)  # below lower: irrelevant without asking
    undecided = ["canteen", "parking"] if max_graded == 1 else ["parking"]
    assert state.events[1] == Evaluate(verdict="correct", kept=2 + len(undecided), total=5, graded=max_graded)
    # relevant (fast scorer, then grader) first, then the ungraded band documents; canteen graded no is dropped
    assert doc_ids(state.evidence) == ["k2", "osaka", *undecided]


async def test_grading_leaves_one_call_of_the_budget_for_the_answer(knowledge: KnowledgeBase) -> None:
    policy = corrective_policy(upper=0.3, lower=0.05, max_graded=3, max_llm_calls=2, max_rewrites=0)
    script = Script(grades={"Osaka office": relevant(OSAKA_FACT)})
    state, model = await run_graph(knowledge, script, query=CASCADE_QUESTION, policy=policy)
    assert state.events[1] == Evaluate(verdict="correct", kept=4, total=5, graded=1)
    assert [kind(c) for c in model.calls] == ["Grade", "generate"]
    assert len(state.llm_calls) == policy.max_llm_calls


# --- Malformed grade --------------------------------------------------------------------------------------------


async def test_malformed_grade_leaves_the_document_undecided_and_is_counted(knowledge: KnowledgeBase) -> None:
    policy = corrective_policy(max_rewrites=0)
    script = Script(grades={"Staff canteen": "Yes, this document is relevant."}, answers=[CANTEEN_ANSWER])
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy)
    assert state.events == [
        Retrieve(k=5, found=5),
        Evaluate(verdict="ambiguous", kept=1, total=5, graded=0),
        Refine(strips=1, passages=1),
        *ANSWERED,
    ]
    assert nodes(state) == ["grade_document", "generate", "check_useful"]
    assert [kind(c) for c in model.calls] == ["Grade", "generate", "UsefulnessCheck"]
    assert doc_ids(state.evidence) == ["canteen"]
    assert state.answer == CANTEEN_ANSWER
