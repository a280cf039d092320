"""The corrective graph's Incorrect and Ambiguous loops: rewrites, what the rewriter is told, evidence across rounds.

Scores are probed before they are relied on (see :mod:`tests.unit.corrective_support`).
"""

from __future__ import annotations

import re

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from gateway.knowledge.service import KnowledgeBase
from pipelines.corrective.prompts import REWRITE_EXAMPLES, REWRITE_SYSTEM
from pipelines.corrective.rewrite import expanded_query
from pipelines.shared.events import Evaluate, Refine, Retrieve, Rewrite, SearchMore
from pipelines.shared.prompts import ABSTAIN_EN
from pipelines.shared.relevance import relevance
from pipelines.shared.visibility import Visibility
from tests.calibration_support import corrective_policy
from tests.unit.corrective_support import (
    ANSWERED,
    CANTEEN_ANSWER,
    CANTEEN_QUESTION,
    DOCS,
    HEAVY_QUESTION,
    K2_FACT,
    K2_QUESTION,
    NO_EVIDENCE,
    NOT_RELEVANT,
    OFF_TOPIC,
    TENANT,
    RecordingSearch,
    Script,
    critics,
    doc_ids,
    graded_titles,
    kind,
    nodes,
    prompts,
    relevant,
    run_graph,
    scores,
)

# --- Incorrect --------------------------------------------------------------------------------------------------


async def test_incorrect_retrieval_rewrites_at_most_max_rewrites_times_then_abstains(knowledge: KnowledgeBase) -> None:
    policy = corrective_policy()
    assert all(s < policy.lower for s in (await scores(knowledge, OFF_TOPIC)).values())
    script = Script(rewrites=["Sistine Chapel ceiling painter", "Michelangelo frescoes"])
    search = RecordingSearch(knowledge)

    state, model = await run_graph(knowledge, script, query=OFF_TOPIC, policy=policy, search=search)

    assert state.events == [
        Retrieve(k=5, found=5),
        Evaluate(verdict="incorrect", kept=0, total=5, graded=0),
        Rewrite(round=1, query="Sistine Chapel ceiling painter"),
        # the rewrite, and the question expanded by the best of round 1's (discarded) documents; every document
        # of the tenant was evaluated in the first round: none is evaluated again
        SearchMore(source="local", queries=2, new=0),
        Evaluate(verdict="incorrect", kept=0, total=0, graded=0),
        Rewrite(round=2, query="Michelangelo frescoes"),
        # no evidence and no candidate left to expand the question with: the rewrite alone
        SearchMore(source="local", queries=1, new=0),
        Evaluate(verdict="incorrect", kept=0, total=0, graded=0),
        *NO_EVIDENCE,
    ]
    # Each search over-fetches by the five chunks already known.
    expansion = expanded_query(
        OFF_TOPIC, await knowledge.search(TENANT, OFF_TOPIC, 5, visibility=Visibility.everything())
    )
    assert search.calls == [("Sistine Chapel ceiling painter", 10), (expansion, 10), ("Michelangelo frescoes", 10)]
    assert state.verdicts == ["incorrect", "incorrect", "incorrect"]
    assert state.rewrites == policy.max_rewrites == 2
    assert state.search_query == "Michelangelo frescoes"
    assert state.queries == ["Sistine Chapel ceiling painter", "Michelangelo frescoes"]
    assert sorted(state.seen) == sorted(f"{d.id}#0" for d in DOCS)  # each evaluated once
    assert state.evidence == []
    assert state.answer == ABSTAIN_EN
    assert state.abstained is True
    assert state.sources == []
    assert state.context == []
    assert state.stop_reason == "no_evidence"
    assert critics(state) == []
    assert nodes(state) == ["rewrite_query", "rewrite_query"]
    first_prompt, second_prompt = (str(m[-1].content) for m, _ in model.calls)
    assert f"Question: {OFF_TOPIC}" in first_prompt
    assert "- nothing yet" in first_prompt
    assert "Missing: unknown" in first_prompt
    # The rewriter is told what was already searched: the question, then its own earlier rewrites.
    assert f"Already searched (write a different query): {OFF_TOPIC}\nSearch query:" in first_prompt
    assert (
        f"Already searched (write a different query): {OFF_TOPIC}; Sistine Chapel ceiling painter\nSearch query:"
        in second_prompt
    )


@pytest.mark.parametrize("max_rewrites", [0, 1, 3])
async def test_incorrect_loop_is_bounded_by_max_rewrites(knowledge: KnowledgeBase, max_rewrites: int) -> None:
    policy = corrective_policy(max_rewrites=max_rewrites)
    state, _ = await run_graph(knowledge, Script(rewrites=["still nothing"]), query=OFF_TOPIC, policy=policy)
    assert state.rewrites == max_rewrites
    assert nodes(state) == ["rewrite_query"] * max_rewrites
    assert sum(isinstance(e, SearchMore) for e in state.events) == max_rewrites
    assert state.verdicts == ["incorrect"] * (max_rewrites + 1)
    assert state.events[-3:] == NO_EVIDENCE


async def test_incorrect_round_is_discarded_and_evidence_comes_from_the_rewritten_search(
    knowledge: KnowledgeBase, vpn_vector: list[float]
) -> None:
    # The caller's query vector points at the VPN document: retrieved, but it shares no word with the question.
    first = await knowledge.search(TENANT, K2_QUESTION, 1, vector=vpn_vector, visibility=Visibility.everything())
    policy = corrective_policy()
    assert doc_ids(first) == ["vpn"]
    assert relevance(policy.relevance, K2_QUESTION, first[0].title, first[0].text, first[0].score) < policy.lower
    assert (await scores(knowledge, "K2 payload", k=1))["k2"] > policy.upper  # the rewritten round's scoring

    script = Script(rewrites=["K2 payload"])
    state, model = await run_graph(knowledge, script, query=K2_QUESTION, top_k=1, query_vector=vpn_vector)

    assert state.events == [
        Retrieve(k=1, found=1),
        Evaluate(verdict="incorrect", kept=0, total=1, graded=0),
        Rewrite(round=1, query="K2 payload"),
        SearchMore(source="local", queries=2, new=1),  # the rewrite, and the question expanded by the VPN document
        Evaluate(verdict="correct", kept=1, total=1, graded=0),
        Refine(strips=1, passages=1),
        *ANSWERED,
    ]
    assert state.verdicts == ["incorrect", "correct"]
    assert doc_ids(state.evidence) == ["k2"]  # the VPN document of the Incorrect round is gone
    assert doc_ids(state.context) == ["k2"]
    assert state.rewrites == 1
    assert state.stop_reason == "answered"
    assert nodes(state) == ["rewrite_query", "generate", "check_useful"]
    assert "VPN" not in str(model.calls[1][0][1].content)  # the generator never saw the discarded document


async def test_rewriter_is_told_the_queries_already_tried(knowledge: KnowledgeBase) -> None:
    rewrites = ["Sistine Chapel", "ceiling painter", "Renaissance frescoes", "Michelangelo"]
    policy = corrective_policy(max_rewrites=4)
    state, model = await run_graph(knowledge, Script(rewrites=list(rewrites)), query=OFF_TOPIC, policy=policy)
    assert state.queries == rewrites
    assert state.search_query == "Michelangelo"
    tried = [
        re.search(r"\nAlready searched \(write a different query\): (.*)\nSearch query:$", str(m[-1].content))
        for m, _ in model.calls
    ]
    assert [t.group(1) if t else None for t in tried] == [
        OFF_TOPIC,
        f"{OFF_TOPIC}; Sistine Chapel",
        f"{OFF_TOPIC}; Sistine Chapel; ceiling painter",
        # at most the last three: the question drops out of the list (it still heads the prompt)
        "Sistine Chapel; ceiling painter; Renaissance frescoes",
    ]
    assert all(str(m[-1].content).startswith(f"Question: {OFF_TOPIC}\n") for m, _ in model.calls)


async def test_rewriter_sees_its_few_shot_examples_before_the_prompt(knowledge: KnowledgeBase) -> None:
    long_rewrite = "Who painted the ceiling of the Sistine Chapel in the Vatican, " * 4
    script = Script(rewrites=[long_rewrite])
    state, model = await run_graph(knowledge, script, query=OFF_TOPIC, policy=corrective_policy(max_rewrites=1))
    (messages,) = [m for m, kw in model.calls if kind((m, kw)) == "rewrite"]
    assert [type(m) for m in messages] == [
        SystemMessage,
        *[HumanMessage, AIMessage] * len(REWRITE_EXAMPLES),
        HumanMessage,
    ]
    assert messages[0].content == REWRITE_SYSTEM
    examples = [(str(h.content), str(a.content)) for h, a in zip(messages[1:-1:2], messages[2:-1:2], strict=True)]
    assert examples == REWRITE_EXAMPLES
    assert str(messages[-1].content).startswith(f"Question: {OFF_TOPIC}\nFound so far:\n- nothing yet\n")
    # The event carries the whole query (its text form shows the first 120 characters); the search uses all of it.
    query = long_rewrite.strip()
    assert len(query) > 120
    assert state.events[2] == Rewrite(round=1, query=query)
    assert state.search_query == query


async def test_later_round_is_scored_against_its_rewritten_query_and_graded_against_the_question(
    knowledge: KnowledgeBase, vpn_vector: list[float]
) -> None:
    # Round 1 retrieves the VPN document (the caller's vector) and finds it irrelevant. The rewrite finds the
    # K2 document: against the question the fast scorer would drop it, against the rewrite it is in the band.
    rewrite = "carrier weight limit"
    policy = corrective_policy()
    assert (await scores(knowledge, HEAVY_QUESTION, k=1, search_query=rewrite))["k2"] < policy.lower - 0.02
    assert policy.lower + 0.01 < (await scores(knowledge, rewrite, k=1))["k2"] < policy.upper - 0.2

    answer = "The carrier lifts at most 150 kg [1]."
    script = Script(rewrites=[rewrite], grades={"Kumo Carrier K2": relevant(K2_FACT)}, answers=[answer])
    state, model = await run_graph(
        knowledge, script, query=HEAVY_QUESTION, policy=policy, top_k=1, query_vector=vpn_vector
    )

    assert state.events == [
        Retrieve(k=1, found=1),
        Evaluate(verdict="incorrect", kept=0, total=1, graded=0),
        Rewrite(round=1, query=rewrite),
        SearchMore(source="local", queries=2, new=1),
        Evaluate(verdict="correct", kept=1, total=1, graded=1),
        Refine(strips=1, passages=1),
        *ANSWERED,
    ]
    grade_prompt = prompts(model, "Grade")[0]
    assert grade_prompt == f"Question: {HEAVY_QUESTION}\n\nDocument (Kumo Carrier K2):\n{DOCS[0].text}"
    assert nodes(state) == ["rewrite_query", "grade_document", "generate", "check_useful"]
    assert doc_ids(state.evidence) == ["k2"]
    assert state.answer == answer


async def test_document_dropped_in_round_one_is_not_rescored_for_a_rewrite_it_matches(
    knowledge: KnowledgeBase,
) -> None:
    # The K2 document is found in round 1 but scored below lower against the question; the first round never
    # explores, so it is dropped ungraded (a follow-up round would have graded it). The rewrite finds it again and
    # would score it relevant, but a document is evaluated only once: it is filtered out.
    rewrite = "Kumo Carrier K2 maximum payload"
    policy = corrective_policy(max_rewrites=1)
    assert policy.explore_floor < (await scores(knowledge, HEAVY_QUESTION))["k2"] < policy.lower
    assert (await scores(knowledge, rewrite, k=1))["k2"] > policy.upper + 0.3
    state, _ = await run_graph(knowledge, Script(rewrites=[rewrite]), query=HEAVY_QUESTION, policy=policy)
    assert state.events == [
        Retrieve(k=5, found=5),
        Evaluate(verdict="incorrect", kept=0, total=5, graded=0),
        Rewrite(round=1, query=rewrite),
        SearchMore(source="local", queries=2, new=0),
        Evaluate(verdict="incorrect", kept=0, total=0, graded=0),
        *NO_EVIDENCE,
    ]
    assert "k2#0" in state.seen
    assert nodes(state) == ["rewrite_query"]


# --- Ambiguous --------------------------------------------------------------------------------------------------


async def test_ambiguous_rounds_merge_old_and_new_evidence(knowledge: KnowledgeBase) -> None:
    # lower=0 puts every document below upper in the band, and max_graded=0 leaves it undecided.
    policy = corrective_policy(lower=0.0, max_graded=0, max_rewrites=1)
    probe = await scores(knowledge, CANTEEN_QUESTION, k=1)
    assert list(probe) == ["canteen"]
    assert probe["canteen"] < policy.upper
    probe = await scores(knowledge, "parking garage registration", k=1)  # scored against the rewrite
    assert list(probe) == ["parking"]
    assert probe["parking"] < policy.upper

    script = Script(rewrites=["parking garage registration"], answers=[CANTEEN_ANSWER])
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=1)

    assert state.events == [
        Retrieve(k=1, found=1),
        Evaluate(verdict="ambiguous", kept=1, total=1, graded=0),
        Rewrite(round=1, query="parking garage registration"),
        SearchMore(source="local", queries=2, new=1),
        Evaluate(verdict="ambiguous", kept=1, total=1, graded=0),
        Refine(strips=2, passages=2),
        *ANSWERED,
    ]
    assert state.verdicts == ["ambiguous", "ambiguous"]
    assert doc_ids(state.evidence) == ["canteen", "parking"]  # merged, old first
    assert sorted(doc_ids(state.context)) == ["canteen", "parking"]
    assert "Grade" not in [kind(c) for c in model.calls]
    assert nodes(state) == ["rewrite_query", "generate", "check_useful"]
    # The rewriter was shown what the Ambiguous round had found.
    assert "- (Staff canteen) The staff canteen opens" in str(model.calls[0][0][-1].content)


async def test_rewritten_search_that_finds_nothing_new_is_evaluated_as_incorrect_and_keeps_evidence(
    knowledge: KnowledgeBase,
) -> None:
    # top_k=5 sees every document of the tenant in round 1 (all in the band, none graded: Ambiguous keeps them).
    policy = corrective_policy(lower=0.0, max_graded=0, max_rewrites=2)
    script = Script(rewrites=["canteen closing time", "staff canteen hours"], answers=[CANTEEN_ANSWER])
    state, _ = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=5)
    assert state.events == [
        Retrieve(k=5, found=5),
        Evaluate(verdict="ambiguous", kept=5, total=5, graded=0),
        Rewrite(round=1, query="canteen closing time"),
        SearchMore(source="local", queries=2, new=0),
        Evaluate(verdict="incorrect", kept=0, total=0, graded=0),
        Rewrite(round=2, query="staff canteen hours"),
        SearchMore(source="local", queries=2, new=0),  # the evidence still expands the question
        Evaluate(verdict="incorrect", kept=0, total=0, graded=0),
        Refine(strips=2, passages=5),
        *ANSWERED,
    ]
    assert state.verdicts == ["ambiguous", "incorrect", "incorrect"]
    # An Incorrect round does not drop earlier evidence.
    assert sorted(doc_ids(state.evidence)) == sorted(d.id for d in DOCS)
    assert state.stop_reason == "answered"


async def test_rewrite_repeating_an_earlier_query_is_replaced_by_the_expansion_query(knowledge: KnowledgeBase) -> None:
    # The second rewrite repeats the first (in other case): the question expanded by the best passage found so
    # far is searched instead, and search_more does not search the same expansion twice.
    policy = corrective_policy(lower=0.0, max_graded=0, max_rewrites=2)
    script = Script(rewrites=["canteen closing time", "Canteen Closing Time "], answers=[CANTEEN_ANSWER])
    search = RecordingSearch(knowledge)
    state, _ = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=1, search=search)
    expansion = f"{CANTEEN_QUESTION} Staff canteen: {DOCS[2].text}"
    assert state.events == [
        Retrieve(k=1, found=1),
        Evaluate(verdict="ambiguous", kept=1, total=1, graded=0),
        Rewrite(round=1, query="canteen closing time"),
        SearchMore(source="local", queries=2, new=1),
        Evaluate(verdict="ambiguous", kept=1, total=1, graded=0),
        Rewrite(round=2, query=expansion),
        SearchMore(source="local", queries=1, new=1),
        Evaluate(verdict="ambiguous", kept=1, total=1, graded=0),
        Refine(strips=2, passages=3),
        *ANSWERED,
    ]
    assert state.queries == ["canteen closing time", expansion]
    assert state.search_query == expansion
    # The canteen (the evidence) scores above the parking document (the last candidate) and leads the expansion.
    assert search.calls == [("canteen closing time", 2), (expansion, 2), (expansion, 3)]
    assert doc_ids(state.evidence) == ["canteen", "parking", "osaka"]
    assert nodes(state) == ["rewrite_query", "rewrite_query", "generate", "check_useful"]


# --- Every document is evaluated once ---------------------------------------------------------------------------


async def test_documents_evaluated_in_an_earlier_round_are_not_evaluated_again(knowledge: KnowledgeBase) -> None:
    # Round 1 (k=2): canteen (band, graded no) and parking (below lower). Asked for two documents, the rewrite
    # would find osaka and the canteen again; the search over-fetches by the two known chunks and drops them, so
    # round 2 evaluates osaka (band against the rewrite, graded) and the K2 document (below lower).
    rewrite = "when does the Osaka canteen close"
    first = await scores(knowledge, CANTEEN_QUESTION, k=2)
    assert list(first) == ["canteen", "parking"]
    second = await scores(knowledge, rewrite, k=2)
    assert list(second) == ["osaka", "canteen"]
    policy = corrective_policy()
    assert policy.lower + 0.05 < second["osaka"] < policy.upper - 0.1  # the band, against the rewrite
    # The second rewrite repeats the first, so the question expanded by osaka (round 2's best) is searched: it
    # finds the VPN document, too far from both queries to be explored.
    expansion = f"{CANTEEN_QUESTION} Osaka office: {DOCS[3].text}"
    vpn = next(
        p for p in await knowledge.search(TENANT, expansion, 5, visibility=Visibility.everything()) if p.doc_id == "vpn"
    )
    for query in (CANTEEN_QUESTION, expansion):
        assert relevance(policy.relevance, query, vpn.title, vpn.text, vpn.score) < policy.explore_floor
    script = Script(rewrites=[rewrite], grades={d.title: NOT_RELEVANT for d in DOCS})
    search = RecordingSearch(knowledge)

    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=2, search=search)

    assert state.events == [
        Retrieve(k=2, found=2),
        Evaluate(verdict="incorrect", kept=0, total=2, graded=1),
        Rewrite(round=1, query=rewrite),
        SearchMore(source="local", queries=2, new=2),  # the canteen was seen in round 1
        Evaluate(verdict="incorrect", kept=0, total=2, graded=1),
        Rewrite(round=2, query=expansion),
        SearchMore(source="local", queries=1, new=1),  # four of the five documents were seen
        Evaluate(verdict="incorrect", kept=0, total=1, graded=0),
        *NO_EVIDENCE,
    ]
    assert graded_titles(model) == ["Staff canteen", "Osaka office"]  # no document graded twice
    assert state.seen == ["canteen#0", "parking#0", "osaka#0", "k2#0", "vpn#0"]
    assert state.queries == [rewrite, expansion]
    assert [k for _, k in search.calls] == [4, 4, 6]  # top_k + the chunks known before each search
    # The grader judges a later round's document against the original question, not the rewrite.
    osaka_prompt = prompts(model, "Grade")[1]
    assert osaka_prompt.startswith(f"Question: {CANTEEN_QUESTION}\n\nDocument (Osaka office):")
    # The second rewrite was told about the first (the scripted model repeats it anyway).
    rewrite_prompts = prompts(model, "rewrite")
    assert rewrite_prompts[1].endswith(
        f"Already searched (write a different query): {CANTEEN_QUESTION}; {rewrite}\nSearch query:"
    )
    assert state.stop_reason == "no_evidence"
