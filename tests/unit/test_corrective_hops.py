"""Multi-hop as iterative retrieval: the model plans the next sub-question, the pipeline searches for it.

The Project Aurora corpus is a two-step question: the bridge document names the robot (the Kumo
Carrier K3), only the K3's sheet gives the payload. Scores are probed before they are relied on.
"""

from __future__ import annotations

import pytest

from gateway.knowledge.service import KnowledgeBase
from gateway.query.steps import render_steps
from pipelines.corrective.hops import bridge_fact, clean_query
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.routing import PLANNER_TRUSTED_NOTE, TRUSTED_NOTE
from pipelines.shared import events as ev
from pipelines.shared.deps import Passage
from pipelines.shared.relevance import relevance
from pipelines.shared.visibility import Visibility
from tests.calibration_support import corrective_policy
from tests.unit.corrective_support import (
    AURORA,
    AURORA_ANSWER,
    AURORA_QUESTION,
    ENOUGH,
    K3_FACT,
    SUPPORTED_CHECK,
    Script,
    doc_ids,
    graded_titles,
    nodes,
    prompts,
    relevant,
    run_graph,
)

HOP_QUERY = "What is the maximum payload of the Kumo Carrier K3?"
BRIDGE_FACT = "Project Aurora is the internal codename for the Kumo Carrier K3"
NEXT = {"found": BRIDGE_FACT, "next_query": HOP_QUERY}


def hops() -> CorrectivePolicy:
    return corrective_policy(max_hops=2, trust_correct_grounded=True)


def aurora_script(hops: list[dict[str, str]]) -> Script:
    return Script(
        answers=[AURORA_ANSWER],
        grades={"Project Aurora": relevant("the Kumo Carrier K3"), "Kumo Carrier K3 specification": relevant(K3_FACT)},
        hops=list(hops),
    )


async def test_bridge_question_is_answered_by_one_planned_hop_in_four_calls(aurora: KnowledgeBase) -> None:
    assert doc_ids(await aurora.search(AURORA, AURORA_QUESTION, 1, visibility=Visibility.everything())) == [
        "project-aurora"
    ]  # only the bridge
    [sheet] = await aurora.search(AURORA, HOP_QUERY, 1, visibility=Visibility.everything())
    assert relevance(hops().relevance, HOP_QUERY, sheet.title, sheet.text, sheet.score) >= hops().upper  # no grading

    state, model = await run_graph(
        aurora, aurora_script([NEXT, ENOUGH]), query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=hops()
    )

    assert state.events == [
        ev.Retrieve(k=1, found=1),
        ev.Evaluate(verdict="correct", kept=1, total=1, graded=1),
        ev.PlanHop(hop=1, query=HOP_QUERY, found=BRIDGE_FACT),
        ev.SearchHop(hop=1, k=1, new=1),
        ev.Evaluate(verdict="correct", kept=1, total=1, graded=0),
        ev.PlanHop(hop=2, done=True),
        ev.Refine(strips=2, passages=2),
        ev.Generate(),
        SUPPORTED_CHECK,
        ev.Check(critic="useful", outcome="skipped", note=TRUSTED_NOTE),
        ev.Stop(reason="answered"),
    ]
    assert state.answer == AURORA_ANSWER
    assert set(doc_ids(state.context)) == {"project-aurora", "k3-spec"}
    # Grade, plan, plan, answer: no usefulness critic for a grounded first answer on Correct evidence.
    assert nodes(state) == ["grade_document", "plan_hop", "plan_hop", "generate"]
    # The planner sees the question first (the prompt prefix every hop shares), then the evidence so far.
    first_plan, second_plan = prompts(model, "NextHop")
    assert first_plan.startswith(f"Question: {AURORA_QUESTION}\n\nEvidence so far:\n- (Project Aurora)")
    assert "(Kumo Carrier K3 specification)" in second_plan
    assert f"Already searched: {AURORA_QUESTION}; {HOP_QUERY}" in second_plan
    # The generator is told the chain of facts the hops built on, after the passages and the question.
    [generation] = prompts(model, "generate")
    assert f"Question: {AURORA_QUESTION}\n(Facts found so far, step by step: {BRIDGE_FACT})\n" in generation
    assert state.hop_facts == [BRIDGE_FACT]
    assert render_steps(state.events)[2:4] == [f"plan_hop(1): {HOP_QUERY}", "search_hop(1, k=1, new=1)"]


async def test_hops_stop_at_the_bound_and_the_answer_uses_what_was_found(aurora: KnowledgeBase) -> None:
    # A planner that always asks for more: after max_hops the pipeline refines and answers.
    endless = [NEXT, {"found": "", "next_query": "Who leads Project Aurora?"}, {"found": "", "next_query": "More?"}]
    state, _ = await run_graph(
        aurora, aurora_script(endless), query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=hops()
    )
    planned = [e for e in state.events if isinstance(e, ev.PlanHop)]
    assert [e.hop for e in planned] == [1, 2]
    assert len([e for e in state.events if isinstance(e, ev.SearchHop)]) == hops().max_hops
    assert state.hops == hops().max_hops
    assert "k3-spec" in doc_ids(state.evidence)
    assert state.stop_reason == "answered"


async def test_planner_repeating_a_searched_query_ends_the_hops(aurora: KnowledgeBase) -> None:
    repeat = {"found": "", "next_query": AURORA_QUESTION}
    state, _ = await run_graph(
        aurora, aurora_script([repeat]), query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=hops()
    )
    assert [e for e in state.events if isinstance(e, ev.PlanHop)] == [ev.PlanHop(hop=1, done=True)]
    assert not [e for e in state.events if isinstance(e, ev.SearchHop)]


async def test_without_trust_the_usefulness_critic_still_judges(aurora: KnowledgeBase) -> None:
    policy = corrective_policy(max_hops=2, trust_correct_grounded=False)
    state, _ = await run_graph(
        aurora, aurora_script([NEXT, ENOUGH]), query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=policy
    )
    assert nodes(state) == ["grade_document", "plan_hop", "plan_hop", "generate", "check_useful"]
    assert state.events[-2] == ev.Check(critic="useful", outcome="passed")


async def test_a_bridge_page_judged_irrelevant_still_plans_the_hop_and_joins_the_evidence(
    aurora: KnowledgeBase,
) -> None:
    # The grader rejects the bridge (it names the robot, not the payload): the round keeps nothing, yet the
    # planner reads the rejected page, names the K3, and the hop's search finds the sheet. The page holds the
    # fact the planner built on, so it becomes evidence: the answer rests on it too.
    script = aurora_script([NEXT, ENOUGH])
    script.grades = {"Kumo Carrier K3 specification": relevant(K3_FACT)}
    state, model = await run_graph(aurora, script, query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=hops())
    assert state.events[:4] == [
        ev.Retrieve(k=1, found=1),
        ev.Evaluate(verdict="incorrect", kept=0, total=1, graded=1),
        ev.PlanHop(hop=1, query=HOP_QUERY, found=BRIDGE_FACT, bridges=1),
        ev.SearchHop(hop=1, k=1, new=1),
    ]
    assert render_steps(state.events)[2] == f"plan_hop(1): {HOP_QUERY} (kept 1 bridge passage(s))"
    assert "(Project Aurora)" in prompts(model, "NextHop")[0]
    assert doc_ids(state.evidence) == ["project-aurora", "k3-spec"]
    assert set(doc_ids(state.context)) == {"project-aurora", "k3-spec"}
    assert state.answer == AURORA_ANSWER
    assert BRIDGE_FACT in prompts(model, "generate")[0]  # the bridge reaches the generator as a found fact


async def test_a_planner_naming_no_fact_keeps_the_best_rejected_page_and_its_closest_clause(
    aurora: KnowledgeBase,
) -> None:
    # A small model often leaves "found" empty. Nothing was kept, so the page it planned from (the round's best
    # candidate) is the bridge, and its clause sharing most words with the question is the fact for the generator.
    script = aurora_script([{"found": "", "next_query": HOP_QUERY}, ENOUGH])
    script.grades = {"Kumo Carrier K3 specification": relevant(K3_FACT)}
    state, model = await run_graph(aurora, script, query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=hops())
    clause = "Project Aurora is the internal codename for the Kumo Carrier K3"
    assert state.events[2] == ev.PlanHop(hop=1, query=HOP_QUERY, found=clause, bridges=1)
    assert doc_ids(state.evidence) == ["project-aurora", "k3-spec"]
    assert state.hop_facts == [clause]
    assert clause in prompts(model, "generate")[0]


async def test_a_hop_page_the_planner_read_before_calling_the_evidence_sufficient_joins_the_evidence(
    aurora: KnowledgeBase,
) -> None:
    # The grader rejects both pages (the fast scorer did so with the Japanese manual's API page: it lacks the
    # question's storage words). The planner reads the hop's sheet and finds the evidence sufficient: the answer
    # rests on that sheet, so it is kept (before, only the bridge reached the generator, which could not answer).
    vague = "K3 robot"  # leaves the sheet in the fast scorer's uncertain band, where the grader rejects it
    script = aurora_script([{"found": BRIDGE_FACT, "next_query": vague}, {"found": K3_FACT, "next_query": ""}])
    script.grades = {}
    state, model = await run_graph(aurora, script, query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=hops())
    evaluations = [e for e in state.events if isinstance(e, ev.Evaluate)]
    assert [e.kept for e in evaluations] == [0, 0]
    assert ev.PlanHop(hop=2, query="", done=True, found=K3_FACT, bridges=1) in state.events
    assert doc_ids(state.evidence) == ["project-aurora", "k3-spec"]
    assert set(doc_ids(state.context)) == {"project-aurora", "k3-spec"}
    assert "(Kumo Carrier K3 specification)" in prompts(model, "generate")[0]


async def test_a_planner_calling_a_rejected_round_sufficient_leads_to_a_rewrite(aurora: KnowledgeBase) -> None:
    # The local model's failure: the grader rejects the bridge, the planner calls it sufficient. With nothing kept
    # there is nothing to answer from, so CRAG's action for Incorrect follows: a rewrite and a search, with the
    # question expanded by the rejected page as its second query, which finds the sheet, and the answer.
    script = aurora_script([ENOUGH])
    script.grades = {"Kumo Carrier K3 specification": relevant(K3_FACT)}
    script.rewrites = [HOP_QUERY]
    state, _ = await run_graph(aurora, script, query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=hops())
    assert state.events[:6] == [
        ev.Retrieve(k=1, found=1),
        ev.Evaluate(verdict="incorrect", kept=0, total=1, graded=1),
        ev.PlanHop(hop=1, done=True),
        ev.Rewrite(round=1, query=HOP_QUERY),
        ev.SearchMore(source="local", queries=2, new=1),
        ev.Evaluate(verdict="correct", kept=1, total=1, graded=0),
    ]
    assert "k3-spec" in doc_ids(state.evidence)
    assert state.answer == AURORA_ANSWER
    assert state.stop_reason == "answered"


async def test_after_planned_hops_a_round_judged_incorrect_is_answered_not_rewritten(aurora: KnowledgeBase) -> None:
    # The second hop asks for something the store does not hold: its round keeps nothing (Incorrect). The
    # planner's hops were this request's follow-up searches, so the pipeline answers from the evidence the
    # first hop found instead of rewriting the question (a rewrite, a search and a grading round more).
    # (The cheaper mode, where the planner's call judges the rounds it reads; the default rewrites.)
    second = {"found": BRIDGE_FACT, "next_query": "Who manufactures the K3's battery cells?"}
    cheap = corrective_policy(max_hops=2, trust_correct_grounded=True, grade_planned_rounds=False)
    state, _ = await run_graph(
        aurora, aurora_script([NEXT, second]), query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=cheap
    )
    assert state.verdicts[-1] == "incorrect"
    assert not [e for e in state.events if isinstance(e, ev.Rewrite | ev.SearchMore)]
    assert [e.hop for e in state.events if isinstance(e, ev.PlanHop)] == [1, 2]
    # The last round was not judged Correct, so the usefulness critic still judges the answer.
    assert nodes(state)[-2:] == ["generate", "check_useful"]
    assert "rewrite_query" not in nodes(state)
    assert state.answer == AURORA_ANSWER
    assert state.stop_reason == "answered"


async def test_without_planning_an_incorrect_round_is_still_rewritten(aurora: KnowledgeBase) -> None:
    # The same first round with hop planning off: CRAG's rewrite is the follow-up search.
    script = aurora_script([])
    script.grades = {}
    state, _ = await run_graph(
        aurora, script, query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=corrective_policy(max_rewrites=1)
    )
    assert state.verdicts[0] == "incorrect"
    assert nodes(state)[0] == "grade_document"
    assert "rewrite_query" in nodes(state)


async def test_planner_judges_the_rounds_it_reads_when_planned_rounds_are_not_graded(aurora: KnowledgeBase) -> None:
    # The bridge page is in the fast scorer's uncertain band: graded by the LLM in the first test above. Here the
    # planner's call judges the round it reads: the page is kept undecided (Ambiguous) without a grading call,
    # the hop finds the sheet (relevant on the fast score alone) and the planner finds the evidence sufficient.
    policy = corrective_policy(max_hops=2, trust_correct_grounded=True, grade_planned_rounds=False)
    state, model = await run_graph(
        aurora, aurora_script([NEXT, ENOUGH]), query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=policy
    )
    assert [e for e in state.events if isinstance(e, ev.Evaluate)] == [
        ev.Evaluate(verdict="ambiguous", kept=1, total=1, graded=0),
        ev.Evaluate(verdict="correct", kept=1, total=1, graded=0),
    ]
    assert nodes(state) == ["plan_hop", "plan_hop", "generate"]
    assert not prompts(model, "Grade")
    assert set(doc_ids(state.context)) == {"project-aurora", "k3-spec"}
    assert state.answer == AURORA_ANSWER


async def test_a_round_no_planner_reads_is_still_graded(aurora: KnowledgeBase) -> None:
    # One hop allowed: the hop's own round is not read by the planner, so the LLM grader judges it as CRAG does.
    # A vague sub-question leaves the sheet in the fast scorer's uncertain band (probed first).
    vague = "K3 robot"
    [_, sheet] = await aurora.search(AURORA, vague, 2, visibility=Visibility.everything())
    policy = corrective_policy(max_hops=1, trust_correct_grounded=True, grade_planned_rounds=False)
    assert policy.lower <= relevance(policy.relevance, vague, sheet.title, sheet.text, sheet.score) < policy.upper
    script = aurora_script([{"found": BRIDGE_FACT, "next_query": vague}])
    state, model = await run_graph(aurora, script, query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=policy)
    assert [e for e in state.events if isinstance(e, ev.Evaluate)] == [
        ev.Evaluate(verdict="ambiguous", kept=1, total=1, graded=0),
        ev.Evaluate(verdict="correct", kept=1, total=1, graded=1),
    ]
    assert graded_titles(model) == ["Kumo Carrier K3 specification"]
    assert nodes(state) == ["plan_hop", "grade_document", "generate"]
    assert state.answer == AURORA_ANSWER


async def test_an_answer_on_evidence_the_planner_found_sufficient_can_skip_the_usefulness_critic(
    aurora: KnowledgeBase,
) -> None:
    # The planner judges the rounds it reads: the vague hop's round is kept undecided (Ambiguous, no grading
    # call), the planner then finds the evidence sufficient. Trusting that verdict as the grader's Correct
    # spares the usefulness critic; without the setting the critic judges the answer.
    vague = {"found": BRIDGE_FACT, "next_query": "K3 robot"}
    runs = {}
    for trust in (True, False):
        policy = corrective_policy(
            max_hops=2, trust_correct_grounded=True, grade_planned_rounds=False, trust_planner_sufficient=trust
        )
        runs[trust], _ = await run_graph(
            aurora, aurora_script([vague, ENOUGH]), query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=policy
        )
    assert [e.verdict for e in runs[True].events if isinstance(e, ev.Evaluate)] == ["ambiguous", "ambiguous"]
    assert runs[True].events[-2] == ev.Check(critic="useful", outcome="skipped", note=PLANNER_TRUSTED_NOTE)
    assert nodes(runs[True]) == ["plan_hop", "plan_hop", "generate"]
    assert nodes(runs[False]) == ["plan_hop", "plan_hop", "generate", "check_useful"]
    assert runs[True].answer == runs[False].answer == AURORA_ANSWER


@pytest.mark.parametrize(
    ("planned", "query"),
    [
        (
            "What is the API limit of the Business plan? Found: 50 GB storage is on the Business plan.",
            "What is the API limit of the Business plan?",
        ),
        ("ビジネスプランのAPI上限は？ found? found?", "ビジネスプランのAPI上限は？"),
        ('"Where was Christopher Nolan born?"', "Where was Christopher Nolan born?"),
        ("What was found in the cave?", "What was found in the cave?"),
    ],
)
def test_a_planned_query_loses_a_leaked_field_tail(planned: str, query: str) -> None:
    assert clean_query(planned) == query


def test_a_planned_query_that_repeats_a_searched_one_but_for_its_tail_ends_the_hops() -> None:
    # The local model's second plan: the first query again with a bare "found" run on.
    assert clean_query(f"{HOP_QUERY} found") == HOP_QUERY


def test_the_bridge_fact_is_the_row_the_question_means() -> None:
    # The storage page lists every plan's allowance in one sentence; the question asks about 50 GB per user.
    storage = (
        "フリープランはチーム全体で1GB、スタンダードプランは1ユーザーあたり10GB、"
        "ビジネスプランは1ユーザーあたり50GBである。"
    )
    page = Passage(chunk_id="s", doc_id="s", title="ストレージ容量", text=storage, score=0.5)
    question = "1ユーザーあたり50GBのストレージが使えるプランでは、APIを1分間に何回まで呼び出せますか？"
    assert bridge_fact(question, page) == "ビジネスプランは1ユーザーあたり50GBである。"
    assert bridge_fact("Who painted the Sistine Chapel?", page) == ""


@pytest.mark.parametrize(
    ("answer_passages", "context"),
    [
        # Unbounded: what refinement kept of the evidence (the sheet is the bridge the hop was planned from).
        (0, ["k3-spec", "project-aurora"]),
        # Plain RAG's top one first, then the first round's confirmed bridge; the hop's round found nothing kept.
        (1, ["project-aurora", "k3-spec"]),
        # Plain RAG's top three, in search order, the sheet as a first-round passage the fast scorer dropped; the
        # parking page is under the grounding floor, for plain RAG too.
        (3, ["project-aurora", "k3-spec"]),
    ],
)
async def test_a_bounded_context_starts_with_plain_rags_top_k_whatever_the_fast_scorer_kept(
    aurora: KnowledgeBase, answer_passages: int, context: list[str]
) -> None:
    policy = corrective_policy(
        max_hops=2,
        trust_correct_grounded=True,
        grade_planned_rounds=False,
        answer_passages=answer_passages,
        hop_passages=1,
    )
    state, _ = await run_graph(
        aurora, aurora_script([NEXT, ENOUGH]), query=AURORA_QUESTION, tenant=AURORA, top_k=3, policy=policy
    )
    assert state.rounds == [["project-aurora#0", "k3-spec#0", "parking#0"], ["canteen#0", "vpn#0"]]
    assert next(e for e in state.events if isinstance(e, ev.Evaluate)) == ev.Evaluate(
        verdict="ambiguous", kept=1, total=3, graded=0
    )
    assert doc_ids(state.context) == context
    assert state.answer == AURORA_ANSWER
