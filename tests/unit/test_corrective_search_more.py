"""search_more: the expansion query, the over-fetch past known chunks, and the recovery of a missed second hop."""

from __future__ import annotations

from dataclasses import replace

from gateway.knowledge.service import KnowledgeBase
from pipelines.corrective.rewrite import expanded_query
from pipelines.shared.deps import Passage
from pipelines.shared.events import Evaluate, Generate, Refine, Retrieve, Rewrite, SearchMore, Withhold
from pipelines.shared.relevance import relevance
from pipelines.shared.visibility import Visibility
from tests.calibration_support import corrective_policy
from tests.unit.corrective_support import (
    ANSWERED,
    AURORA,
    AURORA_ANSWER,
    AURORA_DOCS,
    AURORA_QUESTION,
    AURORA_REWRITE,
    K3_FACT,
    NOT_RELEVANT,
    OFF_TOPIC,
    TENANT,
    RecordingSearch,
    Script,
    doc_ids,
    doubted,
    graded_titles,
    nodes,
    prompts,
    relevant,
    run_graph,
)


async def test_first_retrieval_misses_and_the_follow_up_search_recovers_the_second_hop(aurora: KnowledgeBase) -> None:
    policy = corrective_policy()
    # Round 1 (top_k=1) retrieves the bridge alone; it is in the band and the grader rejects it (it names the
    # robot, not its payload), so the round is Incorrect and its document discarded.
    (bridge,) = await aurora.search(AURORA, AURORA_QUESTION, 1, visibility=Visibility.everything())
    assert bridge.doc_id == "project-aurora"
    assert policy.lower < relevance(policy.relevance, AURORA_QUESTION, bridge.title, bridge.text, bridge.score) < 0.5
    # The follow-up searches with the rewrite and with the question expanded by the bridge, which names the K3.
    expansion = f"{AURORA_QUESTION} Project Aurora: {AURORA_DOCS[0].text}"
    assert expanded_query(AURORA_QUESTION, [bridge]) == expansion
    # Asked for one document, both searches return the known bridge again: only the over-fetch (k = top_k + the
    # one known chunk) lets the K3 sheet through.
    for query in (AURORA_REWRITE, expansion):
        assert doc_ids(await aurora.search(AURORA, query, 1, visibility=Visibility.everything())) == ["project-aurora"]
        assert doc_ids(await aurora.search(AURORA, query, 2, visibility=Visibility.everything())) == [
            "project-aurora",
            "k3-spec",
        ]

    script = Script(
        rewrites=[AURORA_REWRITE],
        grades={"Project Aurora": NOT_RELEVANT, "Kumo Carrier K3 specification": relevant(K3_FACT)},
        answers=[AURORA_ANSWER],
    )
    search = RecordingSearch(aurora)
    state, model = await run_graph(
        aurora, script, query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=policy, search=search
    )

    assert state.events == [
        Retrieve(k=1, found=1),
        Evaluate(verdict="incorrect", kept=0, total=1, graded=1),
        Rewrite(round=1, query=AURORA_REWRITE),
        SearchMore(source="local", queries=2, new=1),
        Evaluate(verdict="correct", kept=1, total=1, graded=1),  # below lower, explored, confirmed by the grader
        Refine(strips=1, passages=1),
        *ANSWERED,
    ]
    assert search.calls == [(AURORA_REWRITE, 2), (expansion, 2)]
    assert graded_titles(model) == ["Project Aurora", "Kumo Carrier K3 specification"]
    assert nodes(state) == ["grade_document", "rewrite_query", "grade_document", "generate", "check_useful"]
    # Found by both searches, the K3 sheet keeps the better score: the expansion's (it names the K3).
    spec_scores = [
        (await aurora.search(AURORA, q, 2, visibility=Visibility.everything()))[1].score
        for q in (AURORA_REWRITE, expansion)
    ]
    assert state.evidence[0].score == max(spec_scores) > min(spec_scores)
    assert state.seen == ["project-aurora#0", "k3-spec#0"]
    assert doc_ids(state.evidence) == ["k3-spec"]
    assert doc_ids(state.sources) == ["k3-spec"]
    assert state.answer == AURORA_ANSWER
    assert "300 kg" in state.context[0].text
    assert state.stop_reason == "answered"
    # Both grades judge against the original question.
    assert all(p.startswith(f"Question: {AURORA_QUESTION}\n\nDocument (") for p in prompts(model, "Grade"))


async def test_rewrite_echoing_the_question_is_replaced_by_the_expansion_carrying_the_bridge(
    aurora: KnowledgeBase,
) -> None:
    # The rewriter only echoes the question (in other case): the expansion query replaces it, the step shows its
    # first 120 characters, and search_more does not run the same query twice.
    expansion = expanded_query(
        AURORA_QUESTION, await aurora.search(AURORA, AURORA_QUESTION, 1, visibility=Visibility.everything())
    )
    assert expansion == f"{AURORA_QUESTION} Project Aurora: {AURORA_DOCS[0].text}"
    assert len(expansion) > 200
    script = Script(
        rewrites=[AURORA_QUESTION.upper()],
        grades={"Kumo Carrier K3 specification": relevant(K3_FACT)},
        answers=[AURORA_ANSWER],
    )
    search = RecordingSearch(aurora)
    state, model = await run_graph(aurora, script, query=AURORA_QUESTION, tenant=AURORA, top_k=1, search=search)
    assert state.events[:5] == [
        Retrieve(k=1, found=1),
        Evaluate(verdict="incorrect", kept=0, total=1, graded=1),
        Rewrite(round=1, query=expansion),
        SearchMore(source="local", queries=1, new=1),
        Evaluate(verdict="correct", kept=1, total=1, graded=1),
    ]
    assert state.search_query == expansion
    assert state.queries == [expansion]
    assert search.calls == [(expansion, 2)]
    assert graded_titles(model) == ["Project Aurora", "Kumo Carrier K3 specification"]
    assert state.answer == AURORA_ANSWER
    assert state.stop_reason == "answered"


def test_expanded_query_adds_the_best_scoring_passage_title_and_first_300_characters() -> None:
    long_text = "Project Aurora names the Kumo Carrier K3. " + "x" * 400
    weak = Passage(chunk_id="a#0", doc_id="a", title="Weak", text="weak text", score=0.2)
    best = Passage(chunk_id="b#0", doc_id="b", title="Project Aurora", text=long_text, score=0.6)
    assert expanded_query(AURORA_QUESTION, [weak, best]) == f"{AURORA_QUESTION} Project Aurora: {long_text[:300]}"
    assert expanded_query(AURORA_QUESTION, [weak]) == f"{AURORA_QUESTION} Weak: weak text"
    assert expanded_query(AURORA_QUESTION, []) == ""


class CannedSearch:
    """search_more's search with fixed results: ``by_query`` for the rewrite, ``other`` for any other query."""

    name = "canned"

    def __init__(self, by_query: dict[str, list[Passage]], other: list[Passage]) -> None:
        self.by_query = by_query
        self.other = other
        self.calls: list[tuple[str, int]] = []

    async def search(self, tenant: str, query: str, k: int, *, visibility: Visibility) -> list[Passage]:
        self.calls.append((query, k))
        return self.by_query.get(query, self.other)[:k]


def canned(name: str, score: float) -> Passage:
    return Passage(chunk_id=f"{name}#0", doc_id=name, title=name.title(), text=f"Notes on {name}.", score=score)


async def test_search_more_merges_both_searches_best_first_without_known_chunks(knowledge: KnowledgeBase) -> None:
    first = await knowledge.search(
        TENANT, OFF_TOPIC, 2, visibility=Visibility.everything()
    )  # round 1: two documents, both Incorrect
    known = replace(first[0], score=0.95)  # found again by the rewrite, at the top
    rewrite_results = [known, canned("xenon", 0.5), canned("yttrium", 0.3)]
    expansion_results = [canned("xenon", 0.7), canned("zinc", 0.6), canned("wolfram", 0.1)]
    search = CannedSearch({"Sistine Chapel painter": rewrite_results}, expansion_results)
    script = Script(rewrites=["Sistine Chapel painter"])
    policy = corrective_policy(max_rewrites=1)

    state, _ = await run_graph(knowledge, script, query=OFF_TOPIC, policy=policy, top_k=2, search=search)

    assert state.events[3] == SearchMore(source="canned", queries=2, new=2)
    # Each search asks for top_k + the two known chunks; then the known chunk is dropped, xenon keeps its better
    # score (from the expansion), and the best two remain.
    assert search.calls == [("Sistine Chapel painter", 4), (expanded_query(OFF_TOPIC, first), 4)]
    assert [(p.doc_id, p.score) for p in state.candidates] == [("xenon", 0.7), ("zinc", 0.6)]
    assert state.seen == [*(p.chunk_id for p in first), "xenon#0", "zinc#0"]


async def test_bridge_judged_relevant_but_twice_unanswerable_sends_the_pipeline_after_the_second_hop(
    aurora: KnowledgeBase,
) -> None:
    """What the local model did end to end: the grader rightly calls the bridge relevant (it names the robot), so the
    round is Correct, but the generator can say nothing from it ("... is [1] [2] ... [42]"). After the one
    regeneration the pipeline treats the evidence as lacking the answer and searches for it, instead of falling
    back to a cautious answer."""
    broken_off = "The maximum payload of the robot developed under Project Aurora is [1] [2] [3] [4] [5] [6] [7]."
    script = Script(
        rewrites=["What is the maximum payload of the Kumo Carrier K3?"],
        grades={"Project Aurora": relevant("the Kumo Carrier K3"), "Kumo Carrier K3 specification": relevant(K3_FACT)},
        answers=[broken_off, "[1]", AURORA_ANSWER],
    )
    state, model = await run_graph(aurora, script, query=AURORA_QUESTION, tenant=AURORA, top_k=1)

    empty = doubted("the answer states nothing (citation numbers or an unfinished sentence)")
    assert state.events[:11] == [
        Retrieve(k=1, found=1),
        Evaluate(verdict="correct", kept=1, total=1, graded=1),
        Refine(strips=1, passages=1),
        Generate(),
        Withhold(
            index=0,
            sentence="The maximum payload of the robot developed under Project Aurora is [1].",
            reason="states_nothing",
        ),
        empty,
        Generate(mode="regenerate"),
        Withhold(index=0, sentence="[1]", reason="states_nothing"),
        empty,
        Rewrite(round=1, query="What is the maximum payload of the Kumo Carrier K3?"),
        SearchMore(source="local", queries=2, new=1),
    ]
    # The new round gets a first answer of its own (not a "regenerate" carrying the old round's complaint).
    assert state.events[11:] == [
        Evaluate(
            verdict="correct", kept=1, total=1, graded=0
        ),  # the rewrite names the K3: its sheet scores above upper
        Refine(strips=2, passages=2),  # the K3 sheet's strips answer the follow-up query
        *ANSWERED,
    ]
    assert prompts(model, "generate")[-1].endswith("Answer (with [n] citations):")
    # The generator sees the second hop's sheet and the bridge that names the robot, whole, best first.
    assert [c.doc_id for c in state.context] == ["k3-spec", "project-aurora"]
    assert [c.text for c in state.context] == [d.text for d in reversed(AURORA_DOCS[:2])]
    # Phantom citations are dropped from what the model wrote: there is one passage, so only [1] remains.
    assert state.answer == AURORA_ANSWER
    assert "k3-spec" in doc_ids(state.evidence)
    assert state.stop_reason == "answered"
    assert nodes(state) == [
        "grade_document",
        "generate",
        "generate",
        "rewrite_query",
        "generate",
        "check_useful",
    ]
