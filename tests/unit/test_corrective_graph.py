"""The corrective graph, branch by branch, with a scripted model, the real USE embeddings and the in-memory store.

Verdicts come from the real fast scorer (:func:`pipelines.shared.relevance.relevance`) over the
documents below; each test that depends on a score probes it first, so a change of the scorer or
the embeddings fails loudly at the probe rather than somewhere down the graph.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, get_args

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from gateway.chunking import Chunker
from gateway.knowledge import KnowledgeBase, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.llm import LLMClient
from gateway.providers.scripted_chat import ScriptedChatModel
from gateway.providers.vectorstores.memory import InMemoryVectorStore
from gateway.providers.websearch import LocalStoreSearch
from gateway.settings import ModelPrice
from pipelines.corrective import graph as corrective_graph
from pipelines.corrective.critique import cautious_answer
from pipelines.corrective.evaluator import evaluate_passages
from pipelines.corrective.graph import CorrectiveDeps, build_graph, expanded_query
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.prompts import REGENERATE_NOTE, REWRITE_EXAMPLES, REWRITE_SYSTEM
from pipelines.corrective.state import StopReason
from pipelines.direct.graph import build_graph as build_direct
from pipelines.shared.deps import Passage, WebSearch
from pipelines.shared.generation import GroundingPolicy
from pipelines.shared.prompts import ABSTAIN_EN, NOT_IN_CONTEXT
from pipelines.shared.relevance import relevance
from pipelines.single_hop.graph import SingleHopDeps
from pipelines.single_hop.graph import build_graph as build_single_hop
from routes.table import RoutePolicy, RouteTable
from tests.scripted import schema_name

TENANT = "acme"
DOCS = [
    NewDocument(id="k2", title="Kumo Carrier K2", text="The Kumo Carrier K2 has a maximum payload of 150 kg."),
    NewDocument(id="vpn", title="VPN policy", text="The VPN policy was last updated on 1 February 2024."),
    NewDocument(
        id="canteen", title="Staff canteen", text="The staff canteen opens at 11:30 and closes at 14:00 on weekdays."
    ),
    NewDocument(id="osaka", title="Osaka office", text="The Osaka office moved to the Umeda Sky Building in 2019."),
    NewDocument(
        id="parking",
        title="Parking rules",
        text="Employees may park in the north garage after registering their car with facilities.",
    ),
]
K2_QUESTION = "What is the maximum payload of the Kumo Carrier K2?"  # k2 scores ~0.93, the rest ~0.03
K2_ANSWER = "The Kumo Carrier K2 has a maximum payload of 150 kg [1]."
K2_INVENTED = "The Kumo Carrier K2 has a maximum payload of 900 kg [1]."
OFF_TOPIC = "Who painted the ceiling of the Sistine Chapel?"  # every document below 0.2
CANTEEN_QUESTION = "What time does the canteen close?"  # canteen ~0.25 (the band), the rest below 0.2
CANTEEN_ANSWER = "The staff canteen closes at 14:00 on weekdays [1]."
CASCADE_QUESTION = "Kumo Carrier K2 maximum payload staff canteen Osaka office parking garage"
HEAVY_QUESTION = "How heavy a load can the carrier lift?"  # k2 ~0.18: just below the lower threshold

# The grader must copy a fact from the graded text: a document counts as relevant only with a fact it contains.
CANTEEN_FACT = "closes at 14:00 on weekdays"
OSAKA_FACT = "moved to the Umeda Sky Building in 2019"
K2_FACT = "a maximum payload of 150 kg"
NOT_RELEVANT = {"fact": "none", "relevant": False}
USEFUL = {"useful": True, "missing": ""}
SUPPORTED: dict[str, Any] = {"unsupported_claims": []}

# A two-step question: "Project Aurora" only names the robot (the bridge), the K3 sheet only gives its payload.
AURORA = "aurora"
AURORA_QUESTION = "What is the maximum payload of the robot developed under Project Aurora?"
AURORA_DOCS = [
    NewDocument(
        id="project-aurora",
        title="Project Aurora",
        text="Project Aurora is the internal codename for the Kumo Carrier K3, the third-generation warehouse robot. "
        "The project is led by Mei Suzuki and is scheduled to ship in 2026.",
    ),
    NewDocument(
        id="k3-spec",
        title="Kumo Carrier K3 specification",
        text="Kumo Carrier K3 specification sheet. Maximum payload: 300 kg. Battery: 14 hours of continuous "
        "operation. Top speed: 2.0 m/s.",
    ),
    NewDocument(
        id="canteen", title="Canteen", text="The Osaka canteen is open from 11:30 to 14:00; lunch costs 300 yen."
    ),
    NewDocument(id="parking", title="Parking", text="Employees park at the north lot; visitors register at reception."),
    NewDocument(id="vpn", title="VPN policy", text="The VPN must be used on public networks. Updated 1 February 2024."),
]
AURORA_REWRITE = "What is the maximum payload of the Project Aurora robot?"  # a poor rewrite: it does not name the K3
AURORA_ANSWER = "The Kumo Carrier K3 has a maximum payload of 300 kg [1]."
K3_FACT = "Maximum payload: 300 kg"

Reply = str | dict[str, Any]


def relevant(fact: str) -> dict[str, Any]:
    """A grader reply that finds the document relevant and quotes ``fact`` from it."""
    return {"fact": fact, "relevant": True}


def _next(queue: list[Reply]) -> str:
    """Pops replies in order and repeats the last one (like ``scripted_chat.replies``)."""
    reply = queue.pop(0) if len(queue) > 1 else queue[0]
    return reply if isinstance(reply, str) else json.dumps(reply)


@dataclass
class Script:
    """A scripted model that tells the graph's calls apart by schema or prompt and answers each kind."""

    answers: list[Reply] = field(default_factory=lambda: [K2_ANSWER])
    rewrites: list[Reply] = field(default_factory=lambda: ["Kumo Carrier K2 payload"])
    grades: dict[str, Reply] = field(default_factory=dict)  # by document title; default: not relevant
    grounded: list[Reply] = field(default_factory=lambda: [SUPPORTED])
    useful: list[Reply] = field(default_factory=lambda: [USEFUL])
    on_rewrite: Any = None  # called before a rewrite is answered (the fake clock advances here)

    def __call__(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> str:
        last = str(messages[-1].content)
        name = schema_name(kwargs)
        if name == "Grade":
            match = re.search(r"Document \((.*)\):", last)
            assert match, last
            reply = self.grades.get(match.group(1), NOT_RELEVANT)
            return reply if isinstance(reply, str) else json.dumps(reply)
        if name == "GroundednessCheck":
            return _next(self.grounded)
        if name == "UsefulnessCheck":
            return _next(self.useful)
        assert name is None, f"unexpected schema {name}"
        if last.endswith("Search query:"):
            if self.on_rewrite is not None:
                self.on_rewrite()
            return _next(self.rewrites)
        if "Context passages" in str(messages[1].content):
            return _next(self.answers)
        raise AssertionError(f"unexpected call: {last[:200]}")


def kind(call: tuple[list[BaseMessage], dict[str, Any]]) -> str:
    """What a recorded model call was: a schema name, ``rewrite`` or ``generate``."""
    messages, kwargs = call
    name = schema_name(kwargs)
    if name is not None:
        return name
    return "rewrite" if str(messages[-1].content).endswith("Search query:") else "generate"


def graded_titles(model: ScriptedChatModel) -> list[str]:
    """Titles of the documents sent to the LLM grader, in call order."""
    return [
        title
        for messages, kwargs in model.calls
        if schema_name(kwargs) == "Grade"
        for title in re.findall(r"Document \((.*)\):", str(messages[-1].content))
    ]


def nodes(state: dict[str, Any]) -> list[str]:
    return [c.node for c in state.get("llm_calls", [])]


def doc_ids(passages: list[Any]) -> list[str]:
    return [p.doc_id for p in passages]


def make_llm(script: Script) -> tuple[LLMClient, ScriptedChatModel]:
    model = ScriptedChatModel(responder=script)
    return LLMClient(model, model_name="scripted", price=ModelPrice(input=1.0, output=2.0)), model


@pytest.fixture
async def knowledge(embeddings: USEEmbeddings) -> KnowledgeBase:
    kb = KnowledgeBase(embeddings, InMemoryVectorStore(), Chunker(500, 50))
    await kb.ingest(TENANT, DOCS)
    return kb


@pytest.fixture
async def aurora(embeddings: USEEmbeddings) -> KnowledgeBase:
    kb = KnowledgeBase(embeddings, InMemoryVectorStore(), Chunker(500, 50))
    await kb.ingest(AURORA, AURORA_DOCS)
    return kb


async def run_graph(
    knowledge: KnowledgeBase,
    script: Script,
    *,
    query: str,
    policy: CorrectivePolicy | None = None,
    top_k: int = 5,
    tenant: str = TENANT,
    started_at: float | None = None,
    query_vector: list[float] | None = None,
    search: WebSearch | None = None,
) -> tuple[dict[str, Any], ScriptedChatModel]:
    policy = policy or CorrectivePolicy()
    llm, model = make_llm(script)
    search = search or LocalStoreSearch(knowledge)
    graph = build_graph(CorrectiveDeps(llm, knowledge, search, knowledge, policy))
    initial: dict[str, Any] = {
        "query": query,
        "tenant": tenant,
        "top_k": top_k,
        "started_at": time.monotonic() if started_at is None else started_at,
    }
    if query_vector is not None:
        initial["query_vector"] = query_vector
    state = await graph.ainvoke(initial, config={"recursion_limit": policy.recursion_limit})
    # Every model call is accounted for, failed structured calls included.
    assert len(state.get("llm_calls", [])) == len(model.calls)
    assert state["steps"][-1] == f"stop: {state['stop_reason']}"
    return state, model


class RecordingSearch:
    """The tenant's own store as search_more's search, recording every ``(query, k)`` it is asked."""

    name = "local"

    def __init__(self, knowledge: KnowledgeBase) -> None:
        self.inner = LocalStoreSearch(knowledge)
        self.calls: list[tuple[str, int]] = []

    async def search(self, tenant: str, query: str, k: int) -> list[Passage]:
        self.calls.append((query, k))
        return await self.inner.search(tenant, query, k)


async def scores(knowledge: KnowledgeBase, query: str, k: int = 5, search_query: str | None = None) -> dict[str, float]:
    """The fast scorer's probability per document found by ``search_query`` (default ``query``), scored
    against ``query``. The evaluator scores a search_more round with the better of the question and the
    rewritten query, so to probe such a round pass the rewrite as both ``query`` and ``search_query``."""
    model = CorrectivePolicy().relevance
    found = await knowledge.search(TENANT, search_query or query, k)
    return {p.doc_id: relevance(model, query, p.title, p.text, p.score) for p in found}


async def follow_up_score(
    knowledge: KnowledgeBase, question: str, rewrite: str, expansion: str, doc_id: str, tenant: str = TENANT
) -> float:
    """The fast score a search_more round gives ``doc_id``: the passage as found by the rewrite or the expansion
    (whichever scores it higher), scored against the better of the question and the rewrite."""
    model = CorrectivePolicy().relevance
    found = [p for q in (rewrite, expansion) for p in await knowledge.search(tenant, q, 5) if p.doc_id == doc_id]
    best = max(found, key=lambda p: p.score)
    return max(relevance(model, q, best.title, best.text, best.score) for q in (question, rewrite))


K2_EXPANSION = f"{K2_QUESTION} Kumo Carrier K2: {DOCS[0].text}"


# --- 1. Correct -------------------------------------------------------------------------------------------------


async def test_correct_retrieval_refines_answers_and_checks_without_extra_calls(knowledge: KnowledgeBase) -> None:
    probe = await scores(knowledge, K2_QUESTION)
    policy = CorrectivePolicy()
    assert probe["k2"] > policy.upper + 0.3
    assert all(s < policy.lower - 0.1 for doc, s in probe.items() if doc != "k2")

    state, model = await run_graph(knowledge, Script(), query=K2_QUESTION)

    assert state["steps"] == [
        "retrieve(k=5, found=5)",
        "evaluate: correct (kept 1/5, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    assert state["verdict"] == "correct"
    assert state["verdicts"] == ["correct"]
    assert state["rewrites"] == 0
    assert "search_query" not in state
    assert state["grounded"] is True
    assert state["useful"] is True
    assert state["regenerated"] is False
    assert state["abstained"] is False
    assert state["stop_reason"] == "answered"
    assert state["answer"] == K2_ANSWER
    assert doc_ids(state["evidence"]) == ["k2"]
    assert doc_ids(state["sources"]) == ["k2"]
    assert state["context"] == state["strips"]
    assert "150 kg" in state["context"][0].text
    # The grounding check settled it lexically: only the generation and the usefulness critic called the model.
    assert nodes(state) == ["generate", "check_useful"]
    assert [kind(c) for c in model.calls] == ["generate", "UsefulnessCheck"]
    assert "[1] (Kumo Carrier K2)" in str(model.calls[0][0][1].content)


async def test_upper_zero_forces_correct_even_for_an_off_topic_question(knowledge: KnowledgeBase) -> None:
    # Every fast score is a probability >= 0, so upper=0 makes every document "relevant" without any grading.
    script = Script(answers=[NOT_IN_CONTEXT])
    policy = CorrectivePolicy(upper=0.0, max_rewrites=0)
    state, model = await run_graph(knowledge, script, query=OFF_TOPIC, policy=policy)
    assert state["steps"][1] == "evaluate: correct (kept 5/5, llm graded 0)"
    assert "Grade" not in [kind(c) for c in model.calls]
    assert len(state["evidence"]) == 5


# --- 2. Incorrect -----------------------------------------------------------------------------------------------


async def test_incorrect_retrieval_rewrites_at_most_max_rewrites_times_then_abstains(knowledge: KnowledgeBase) -> None:
    policy = CorrectivePolicy()
    assert all(s < policy.lower for s in (await scores(knowledge, OFF_TOPIC)).values())
    script = Script(rewrites=["Sistine Chapel ceiling painter", "Michelangelo frescoes"])
    search = RecordingSearch(knowledge)

    state, model = await run_graph(knowledge, script, query=OFF_TOPIC, policy=policy, search=search)

    assert state["steps"] == [
        "retrieve(k=5, found=5)",
        "evaluate: incorrect (kept 0/5, llm graded 0)",
        "rewrite_query(1): Sistine Chapel ceiling painter",
        # the rewrite, and the question expanded by the best of round 1's (discarded) documents; every document
        # of the tenant was evaluated in the first round: none is evaluated again
        "search_more(local, queries=2, new=0)",
        "evaluate: incorrect (kept 0/0, llm graded 0)",
        "rewrite_query(2): Michelangelo frescoes",
        # no evidence and no candidate left to expand the question with: the rewrite alone
        "search_more(local, queries=1, new=0)",
        "evaluate: incorrect (kept 0/0, llm graded 0)",
        "refine(strips from 0/0 passages)",
        "cautious_answer",
        "stop: no_evidence",
    ]
    # Each search over-fetches by the five chunks already known.
    expansion = expanded_query(OFF_TOPIC, await knowledge.search(TENANT, OFF_TOPIC, 5))
    assert search.calls == [("Sistine Chapel ceiling painter", 10), (expansion, 10), ("Michelangelo frescoes", 10)]
    assert state["verdicts"] == ["incorrect", "incorrect", "incorrect"]
    assert state["rewrites"] == policy.max_rewrites == 2
    assert state["search_query"] == "Michelangelo frescoes"
    assert state["queries"] == ["Sistine Chapel ceiling painter", "Michelangelo frescoes"]
    assert sorted(state["seen"]) == sorted(f"{d.id}#0" for d in DOCS)  # each evaluated once
    assert state["evidence"] == []
    assert state["answer"] == ABSTAIN_EN
    assert state["abstained"] is True
    assert state["sources"] == []
    assert state["context"] == []
    assert state["stop_reason"] == "no_evidence"
    assert "grounded" not in state
    assert "useful" not in state
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
    policy = CorrectivePolicy(max_rewrites=max_rewrites)
    state, _ = await run_graph(knowledge, Script(rewrites=["still nothing"]), query=OFF_TOPIC, policy=policy)
    assert state["rewrites"] == max_rewrites
    assert nodes(state) == ["rewrite_query"] * max_rewrites
    assert sum(s.startswith("search_more(") for s in state["steps"]) == max_rewrites
    assert state["verdicts"] == ["incorrect"] * (max_rewrites + 1)
    assert state["steps"][-3:] == ["refine(strips from 0/0 passages)", "cautious_answer", "stop: no_evidence"]


async def test_incorrect_round_is_discarded_and_evidence_comes_from_the_rewritten_search(
    knowledge: KnowledgeBase, embeddings: USEEmbeddings
) -> None:
    # The caller's query vector points at the VPN document: retrieved, but it shares no word with the question.
    vpn_vector = embeddings.embed_query("VPN policy update date")
    first = await knowledge.search(TENANT, K2_QUESTION, 1, vector=vpn_vector)
    policy = CorrectivePolicy()
    assert doc_ids(first) == ["vpn"]
    assert relevance(policy.relevance, K2_QUESTION, first[0].title, first[0].text, first[0].score) < policy.lower
    assert (await scores(knowledge, "K2 payload", k=1))["k2"] > policy.upper  # the rewritten round's scoring

    script = Script(rewrites=["K2 payload"])
    state, model = await run_graph(knowledge, script, query=K2_QUESTION, top_k=1, query_vector=vpn_vector)

    assert state["steps"] == [
        "retrieve(k=1, found=1)",
        "evaluate: incorrect (kept 0/1, llm graded 0)",
        "rewrite_query(1): K2 payload",
        "search_more(local, queries=2, new=1)",  # the rewrite, and the question expanded by the VPN document
        "evaluate: correct (kept 1/1, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    assert state["verdicts"] == ["incorrect", "correct"]
    assert doc_ids(state["evidence"]) == ["k2"]  # the VPN document of the Incorrect round is gone
    assert doc_ids(state["context"]) == ["k2"]
    assert state["rewrites"] == 1
    assert state["stop_reason"] == "answered"
    assert nodes(state) == ["rewrite_query", "generate", "check_useful"]
    assert "VPN" not in str(model.calls[1][0][1].content)  # the generator never saw the discarded document


async def test_rewriter_is_told_the_queries_already_tried(knowledge: KnowledgeBase) -> None:
    rewrites = ["Sistine Chapel", "ceiling painter", "Renaissance frescoes", "Michelangelo"]
    policy = CorrectivePolicy(max_rewrites=4)
    state, model = await run_graph(knowledge, Script(rewrites=list(rewrites)), query=OFF_TOPIC, policy=policy)
    assert state["queries"] == rewrites
    assert state["search_query"] == "Michelangelo"
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
    state, model = await run_graph(knowledge, script, query=OFF_TOPIC, policy=CorrectivePolicy(max_rewrites=1))
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
    # The step shows the first 120 characters of the query; the search uses all of it.
    query = long_rewrite.strip()
    assert len(query) > 120
    assert state["steps"][2] == f"rewrite_query(1): {query[:120]}"
    assert state["search_query"] == query


async def test_later_round_is_scored_against_its_rewritten_query_and_graded_against_the_question(
    knowledge: KnowledgeBase, embeddings: USEEmbeddings
) -> None:
    # Round 1 retrieves the VPN document (the caller's vector) and finds it irrelevant. The rewrite finds the
    # K2 document: against the question the fast scorer would drop it, against the rewrite it is in the band.
    vpn_vector = embeddings.embed_query("VPN policy update date")
    rewrite = "carrier weight limit"
    policy = CorrectivePolicy()
    assert (await scores(knowledge, HEAVY_QUESTION, k=1, search_query=rewrite))["k2"] < policy.lower - 0.02
    assert policy.lower + 0.02 < (await scores(knowledge, rewrite, k=1))["k2"] < policy.upper - 0.2

    answer = "The carrier lifts at most 150 kg [1]."
    script = Script(rewrites=[rewrite], grades={"Kumo Carrier K2": relevant(K2_FACT)}, answers=[answer])
    state, model = await run_graph(
        knowledge, script, query=HEAVY_QUESTION, policy=policy, top_k=1, query_vector=vpn_vector
    )

    assert state["steps"] == [
        "retrieve(k=1, found=1)",
        "evaluate: incorrect (kept 0/1, llm graded 0)",
        f"rewrite_query(1): {rewrite}",
        "search_more(local, queries=2, new=1)",
        "evaluate: correct (kept 1/1, llm graded 1)",
        "refine(strips from 1/1 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    grade_prompt = next(str(m[-1].content) for m, kw in model.calls if schema_name(kw) == "Grade")
    assert grade_prompt == f"Question: {HEAVY_QUESTION}\n\nDocument (Kumo Carrier K2):\n{DOCS[0].text}"
    assert nodes(state) == ["rewrite_query", "grade_document", "generate", "check_useful"]
    assert doc_ids(state["evidence"]) == ["k2"]
    assert state["answer"] == answer


async def test_document_dropped_in_round_one_is_not_rescored_for_a_rewrite_it_matches(
    knowledge: KnowledgeBase,
) -> None:
    # The K2 document is found in round 1 but scored below lower against the question; the first round never
    # explores, so it is dropped ungraded (a follow-up round would have graded it). The rewrite finds it again and
    # would score it relevant, but a document is evaluated only once: it is filtered out.
    rewrite = "Kumo Carrier K2 maximum payload"
    policy = CorrectivePolicy(max_rewrites=1)
    assert policy.explore_floor < (await scores(knowledge, HEAVY_QUESTION))["k2"] < policy.lower
    assert (await scores(knowledge, rewrite, k=1))["k2"] > policy.upper + 0.3
    state, _ = await run_graph(knowledge, Script(rewrites=[rewrite]), query=HEAVY_QUESTION, policy=policy)
    assert state["steps"] == [
        "retrieve(k=5, found=5)",
        "evaluate: incorrect (kept 0/5, llm graded 0)",
        f"rewrite_query(1): {rewrite}",
        "search_more(local, queries=2, new=0)",
        "evaluate: incorrect (kept 0/0, llm graded 0)",
        "refine(strips from 0/0 passages)",
        "cautious_answer",
        "stop: no_evidence",
    ]
    assert "k2#0" in state["seen"]
    assert nodes(state) == ["rewrite_query"]


@pytest.mark.parametrize(
    ("round_query", "verdict", "graded"),
    [(None, "incorrect", 0), (HEAVY_QUESTION, "incorrect", 0), ("carrier weight limit", "correct", 1)],
    ids=["first-round", "query-is-the-question", "follow-up-round"],
)
async def test_follow_up_round_scores_each_document_with_the_better_of_question_and_round_query(
    knowledge: KnowledgeBase, round_query: str | None, verdict: str, graded: int
) -> None:
    policy = CorrectivePolicy()
    (k2,) = await knowledge.search(TENANT, "carrier weight limit", 1)
    against_question = relevance(policy.relevance, HEAVY_QUESTION, k2.title, k2.text, k2.score)
    against_rewrite = relevance(policy.relevance, "carrier weight limit", k2.title, k2.text, k2.score)
    # Below lower against the question (but high enough that a follow-up round would explore it), in the band
    # against the rewrite.
    assert 0.15 < against_question < policy.lower - 0.02
    assert policy.lower + 0.02 < against_rewrite < policy.upper - 0.2
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
    expansion = expanded_query(AURORA_QUESTION, await aurora.search(AURORA, AURORA_QUESTION, 1))
    return [p for p in await aurora.search(AURORA, expansion, 5) if p.doc_id != "project-aurora"]


@pytest.mark.parametrize(
    ("grade", "verdict", "kept"), [(relevant(K3_FACT), "correct", ["k3-spec"]), (NOT_RELEVANT, "incorrect", [])]
)
async def test_follow_up_round_with_nothing_in_the_band_grades_its_best_document(
    aurora: KnowledgeBase, grade: dict[str, Any], verdict: str, kept: list[str]
) -> None:
    # The missing hop scores low against the question (it does not name Project Aurora) and against the rewrite
    # (which does not name the K3): the fast scorer cannot see it, so the best one is graded anyway.
    policy = CorrectivePolicy()
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
    policy = CorrectivePolicy(max_graded=max_graded)
    candidates = await aurora_second_hop_candidates(aurora)
    llm, _ = make_llm(Script(grades={"Kumo Carrier K3 specification": grade}))
    result = await evaluate_passages(
        llm, policy, AURORA_QUESTION, candidates, calls_left=calls_left, scoring_query=AURORA_REWRITE
    )
    assert result.graded == 0
    assert (result.verdict, result.kept) == ("incorrect", [])


async def test_follow_up_round_does_not_explore_a_best_document_below_the_floor(knowledge: KnowledgeBase) -> None:
    # The grader says "yes" too easily: a document that is hopeless against both queries is not offered to it.
    policy = CorrectivePolicy()
    found = await knowledge.search(TENANT, "Sistine Chapel painter", 5)
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


async def test_first_retrieval_misses_and_the_follow_up_search_recovers_the_second_hop(aurora: KnowledgeBase) -> None:
    policy = CorrectivePolicy()
    # Round 1 (top_k=1) retrieves the bridge alone; it is in the band and the grader rejects it (it names the
    # robot, not its payload), so the round is Incorrect and its document discarded.
    (bridge,) = await aurora.search(AURORA, AURORA_QUESTION, 1)
    assert bridge.doc_id == "project-aurora"
    assert policy.lower < relevance(policy.relevance, AURORA_QUESTION, bridge.title, bridge.text, bridge.score) < 0.5
    # The follow-up searches with the rewrite and with the question expanded by the bridge, which names the K3.
    expansion = f"{AURORA_QUESTION} Project Aurora: {AURORA_DOCS[0].text}"
    assert expanded_query(AURORA_QUESTION, [bridge]) == expansion
    # Asked for one document, both searches return the known bridge again: only the over-fetch (k = top_k + the
    # one known chunk) lets the K3 sheet through.
    for query in (AURORA_REWRITE, expansion):
        assert doc_ids(await aurora.search(AURORA, query, 1)) == ["project-aurora"]
        assert doc_ids(await aurora.search(AURORA, query, 2)) == ["project-aurora", "k3-spec"]

    script = Script(
        rewrites=[AURORA_REWRITE],
        grades={"Project Aurora": NOT_RELEVANT, "Kumo Carrier K3 specification": relevant(K3_FACT)},
        answers=[AURORA_ANSWER],
    )
    search = RecordingSearch(aurora)
    state, model = await run_graph(
        aurora, script, query=AURORA_QUESTION, tenant=AURORA, top_k=1, policy=policy, search=search
    )

    assert state["steps"] == [
        "retrieve(k=1, found=1)",
        "evaluate: incorrect (kept 0/1, llm graded 1)",
        f"rewrite_query(1): {AURORA_REWRITE}",
        "search_more(local, queries=2, new=1)",
        "evaluate: correct (kept 1/1, llm graded 1)",  # below lower, explored, confirmed by the grader
        "refine(strips from 1/1 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    assert search.calls == [(AURORA_REWRITE, 2), (expansion, 2)]
    assert graded_titles(model) == ["Project Aurora", "Kumo Carrier K3 specification"]
    assert nodes(state) == ["grade_document", "rewrite_query", "grade_document", "generate", "check_useful"]
    # Found by both searches, the K3 sheet keeps the better score: the expansion's (it names the K3).
    spec_scores = [(await aurora.search(AURORA, q, 2))[1].score for q in (AURORA_REWRITE, expansion)]
    assert state["evidence"][0].score == max(spec_scores) > min(spec_scores)
    assert state["seen"] == ["project-aurora#0", "k3-spec#0"]
    assert doc_ids(state["evidence"]) == ["k3-spec"]
    assert doc_ids(state["sources"]) == ["k3-spec"]
    assert state["answer"] == AURORA_ANSWER
    assert "300 kg" in state["context"][0].text
    assert state["stop_reason"] == "answered"
    # Both grades judge against the original question.
    assert all(
        str(m[-1].content).startswith(f"Question: {AURORA_QUESTION}\n\nDocument (")
        for m, kw in model.calls
        if schema_name(kw) == "Grade"
    )


async def test_rewrite_echoing_the_question_is_replaced_by_the_expansion_carrying_the_bridge(
    aurora: KnowledgeBase,
) -> None:
    # The rewriter only echoes the question (in other case): the expansion query replaces it, the step shows its
    # first 120 characters, and search_more does not run the same query twice.
    expansion = expanded_query(AURORA_QUESTION, await aurora.search(AURORA, AURORA_QUESTION, 1))
    assert expansion == f"{AURORA_QUESTION} Project Aurora: {AURORA_DOCS[0].text}"
    assert len(expansion) > 200
    script = Script(
        rewrites=[AURORA_QUESTION.upper()],
        grades={"Kumo Carrier K3 specification": relevant(K3_FACT)},
        answers=[AURORA_ANSWER],
    )
    search = RecordingSearch(aurora)
    state, model = await run_graph(aurora, script, query=AURORA_QUESTION, tenant=AURORA, top_k=1, search=search)
    assert state["steps"][:5] == [
        "retrieve(k=1, found=1)",
        "evaluate: incorrect (kept 0/1, llm graded 1)",
        f"rewrite_query(1): {expansion[:120]}",
        "search_more(local, queries=1, new=1)",
        "evaluate: correct (kept 1/1, llm graded 1)",
    ]
    assert state["search_query"] == expansion
    assert state["queries"] == [expansion]
    assert search.calls == [(expansion, 2)]
    assert graded_titles(model) == ["Project Aurora", "Kumo Carrier K3 specification"]
    assert state["answer"] == AURORA_ANSWER
    assert state["stop_reason"] == "answered"


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

    async def search(self, tenant: str, query: str, k: int) -> list[Passage]:
        self.calls.append((query, k))
        return self.by_query.get(query, self.other)[:k]


def canned(name: str, score: float) -> Passage:
    return Passage(chunk_id=f"{name}#0", doc_id=name, title=name.title(), text=f"Notes on {name}.", score=score)


async def test_search_more_merges_both_searches_best_first_without_known_chunks(knowledge: KnowledgeBase) -> None:
    first = await knowledge.search(TENANT, OFF_TOPIC, 2)  # round 1: two documents, both Incorrect
    known = replace(first[0], score=0.95)  # found again by the rewrite, at the top
    rewrite_results = [known, canned("xenon", 0.5), canned("yttrium", 0.3)]
    expansion_results = [canned("xenon", 0.7), canned("zinc", 0.6), canned("wolfram", 0.1)]
    search = CannedSearch({"Sistine Chapel painter": rewrite_results}, expansion_results)
    script = Script(rewrites=["Sistine Chapel painter"])
    policy = CorrectivePolicy(max_rewrites=1)

    state, _ = await run_graph(knowledge, script, query=OFF_TOPIC, policy=policy, top_k=2, search=search)

    assert state["steps"][3] == "search_more(canned, queries=2, new=2)"
    # Each search asks for top_k + the two known chunks; then the known chunk is dropped, xenon keeps its better
    # score (from the expansion), and the best two remain.
    assert search.calls == [("Sistine Chapel painter", 4), (expanded_query(OFF_TOPIC, first), 4)]
    assert [(p.doc_id, p.score) for p in state["candidates"]] == [("xenon", 0.7), ("zinc", 0.6)]
    assert state["seen"] == [*(p.chunk_id for p in first), "xenon#0", "zinc#0"]


# --- 3. Ambiguous -----------------------------------------------------------------------------------------------


async def test_ambiguous_rounds_merge_old_and_new_evidence(knowledge: KnowledgeBase) -> None:
    # lower=0 puts every document below upper in the band, and max_graded=0 leaves it undecided.
    policy = CorrectivePolicy(lower=0.0, max_graded=0, max_rewrites=1)
    probe = await scores(knowledge, CANTEEN_QUESTION, k=1)
    assert list(probe) == ["canteen"]
    assert probe["canteen"] < policy.upper
    probe = await scores(knowledge, "parking garage registration", k=1)  # scored against the rewrite
    assert list(probe) == ["parking"]
    assert probe["parking"] < policy.upper

    script = Script(rewrites=["parking garage registration"], answers=[CANTEEN_ANSWER])
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=1)

    assert state["steps"] == [
        "retrieve(k=1, found=1)",
        "evaluate: ambiguous (kept 1/1, llm graded 0)",
        "rewrite_query(1): parking garage registration",
        "search_more(local, queries=2, new=1)",
        "evaluate: ambiguous (kept 1/1, llm graded 0)",
        "refine(strips from 2/2 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    assert state["verdicts"] == ["ambiguous", "ambiguous"]
    assert doc_ids(state["evidence"]) == ["canteen", "parking"]  # merged, old first
    assert sorted(doc_ids(state["context"])) == ["canteen", "parking"]
    assert "Grade" not in [kind(c) for c in model.calls]
    assert nodes(state) == ["rewrite_query", "generate", "check_useful"]
    # The rewriter was shown what the Ambiguous round had found.
    assert "- (Staff canteen) The staff canteen opens" in str(model.calls[0][0][-1].content)


async def test_rewritten_search_that_finds_nothing_new_is_evaluated_as_incorrect_and_keeps_evidence(
    knowledge: KnowledgeBase,
) -> None:
    # top_k=5 sees every document of the tenant in round 1 (all in the band, none graded: Ambiguous keeps them).
    policy = CorrectivePolicy(lower=0.0, max_graded=0, max_rewrites=2)
    script = Script(rewrites=["canteen closing time", "staff canteen hours"], answers=[CANTEEN_ANSWER])
    state, _ = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=5)
    assert state["steps"] == [
        "retrieve(k=5, found=5)",
        "evaluate: ambiguous (kept 5/5, llm graded 0)",
        "rewrite_query(1): canteen closing time",
        "search_more(local, queries=2, new=0)",
        "evaluate: incorrect (kept 0/0, llm graded 0)",
        "rewrite_query(2): staff canteen hours",
        "search_more(local, queries=2, new=0)",  # the evidence still expands the question
        "evaluate: incorrect (kept 0/0, llm graded 0)",
        "refine(strips from 2/5 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    assert state["verdicts"] == ["ambiguous", "incorrect", "incorrect"]
    # An Incorrect round does not drop earlier evidence.
    assert sorted(doc_ids(state["evidence"])) == sorted(d.id for d in DOCS)
    assert state["stop_reason"] == "answered"


async def test_rewrite_repeating_an_earlier_query_is_replaced_by_the_expansion_query(knowledge: KnowledgeBase) -> None:
    # The second rewrite repeats the first (in other case): the question expanded by the best passage found so
    # far is searched instead, and search_more does not search the same expansion twice.
    policy = CorrectivePolicy(lower=0.0, max_graded=0, max_rewrites=2)
    script = Script(rewrites=["canteen closing time", "Canteen Closing Time "], answers=[CANTEEN_ANSWER])
    search = RecordingSearch(knowledge)
    state, _ = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=1, search=search)
    expansion = f"{CANTEEN_QUESTION} Staff canteen: {DOCS[2].text}"
    assert state["steps"] == [
        "retrieve(k=1, found=1)",
        "evaluate: ambiguous (kept 1/1, llm graded 0)",
        "rewrite_query(1): canteen closing time",
        "search_more(local, queries=2, new=1)",
        "evaluate: ambiguous (kept 1/1, llm graded 0)",
        f"rewrite_query(2): {expansion}",
        "search_more(local, queries=1, new=1)",
        "evaluate: ambiguous (kept 1/1, llm graded 0)",
        "refine(strips from 2/3 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    assert state["queries"] == ["canteen closing time", expansion]
    assert state["search_query"] == expansion
    # The canteen (the evidence) scores above the parking document (the last candidate) and leads the expansion.
    assert search.calls == [("canteen closing time", 2), (expansion, 2), (expansion, 3)]
    assert doc_ids(state["evidence"]) == ["canteen", "parking", "osaka"]
    assert nodes(state) == ["rewrite_query", "rewrite_query", "generate", "check_useful"]


GRADED_CORRECT = "evaluate: correct (kept 1/5, llm graded 1)"
GRADED_INCORRECT = "evaluate: incorrect (kept 0/5, llm graded 1)"


@pytest.mark.parametrize(
    ("grade", "policy", "step", "kept"),
    [
        (relevant(CANTEEN_FACT), CorrectivePolicy(max_rewrites=0), GRADED_CORRECT, ["canteen"]),
        (NOT_RELEVANT, CorrectivePolicy(max_rewrites=0), GRADED_INCORRECT, []),
        ({"fact": CANTEEN_FACT, "relevant": False}, CorrectivePolicy(max_rewrites=0), GRADED_INCORRECT, []),
        ({"fact": "None", "relevant": True}, CorrectivePolicy(max_rewrites=0), GRADED_INCORRECT, []),
        ({"fact": "  ", "relevant": True}, CorrectivePolicy(max_rewrites=0), GRADED_INCORRECT, []),
        (
            relevant(CANTEEN_FACT),
            CorrectivePolicy(max_rewrites=0, max_graded=0),
            "evaluate: ambiguous (kept 1/5, llm graded 0)",
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
    knowledge: KnowledgeBase, grade: dict[str, Any], policy: CorrectivePolicy, step: str, kept: list[str]
) -> None:
    probe = await scores(knowledge, CANTEEN_QUESTION)
    assert policy.lower + 0.03 < probe["canteen"] < policy.upper - 0.2
    assert all(s < policy.lower - 0.1 for doc, s in probe.items() if doc != "canteen")

    script = Script(grades={"Staff canteen": grade}, answers=[CANTEEN_ANSWER])
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy)

    assert state["steps"][1] == step
    expected_grades = 1 if policy.max_graded else 0
    assert [kind(c) for c in model.calls].count("Grade") == expected_grades
    assert nodes(state).count("grade_document") == expected_grades
    if "ambiguous" in step:
        assert doc_ids(state["evidence"]) == ["canteen"]  # undecided documents are kept
    else:
        assert doc_ids(state["evidence"]) == kept
    if expected_grades:
        grade_prompt = next(str(m[-1].content) for m, kw in model.calls if schema_name(kw) == "Grade")
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
    policy = CorrectivePolicy(max_rewrites=0)
    assert invented not in DOCS[2].text
    script = Script(grades={"Staff canteen": relevant(invented)})
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy)
    assert state["steps"] == [
        "retrieve(k=5, found=5)",
        "evaluate: incorrect (kept 0/5, llm graded 1)",  # graded (the call is spent) but not kept
        "refine(strips from 0/0 passages)",
        "cautious_answer",
        "stop: no_evidence",
    ]
    assert graded_titles(model) == ["Staff canteen"]
    assert nodes(state) == ["grade_document"]
    assert state["evidence"] == []
    assert state["answer"] == ABSTAIN_EN


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
    policy = CorrectivePolicy(lower=0.0, upper=1.0)  # every document is in the band
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
    policy = CorrectivePolicy(lower=0.0, max_rewrites=0)  # both documents found are in the band and graded
    assert list(await scores(knowledge, CANTEEN_QUESTION, k=2)) == ["canteen", "parking"]
    assert "canteen" not in DOCS[4].text
    script = Script(grades={"Staff canteen": NOT_RELEVANT, "Parking rules": relevant(echo)})
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=2)
    assert graded_titles(model) == ["Staff canteen", "Parking rules"]
    assert state["steps"][1] == "evaluate: incorrect (kept 0/2, llm graded 2)"
    assert state["evidence"] == []


# --- 4. Cascade -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_graded", "graded_titles_expected"), [(2, ["Osaka office", "Staff canteen"]), (1, ["Osaka office"])]
)
async def test_only_band_documents_reach_the_llm_grader_and_at_most_max_graded(
    knowledge: KnowledgeBase, max_graded: int, graded_titles_expected: list[str]
) -> None:
    policy = CorrectivePolicy(upper=0.3, lower=0.05, max_graded=max_graded, max_rewrites=0)
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
    assert state["steps"][1] == f"evaluate: correct (kept {2 + len(undecided)}/5, llm graded {max_graded})"
    # relevant (fast scorer, then grader) first, then the ungraded band documents; canteen graded no is dropped
    assert doc_ids(state["evidence"]) == ["k2", "osaka", *undecided]


async def test_grading_leaves_one_call_of_the_budget_for_the_answer(knowledge: KnowledgeBase) -> None:
    policy = CorrectivePolicy(upper=0.3, lower=0.05, max_graded=3, max_llm_calls=2, max_rewrites=0)
    script = Script(grades={"Osaka office": relevant(OSAKA_FACT)})
    state, model = await run_graph(knowledge, script, query=CASCADE_QUESTION, policy=policy)
    assert state["steps"][1] == "evaluate: correct (kept 4/5, llm graded 1)"
    assert [kind(c) for c in model.calls] == ["Grade", "generate"]
    assert len(state["llm_calls"]) == policy.max_llm_calls


async def test_documents_evaluated_in_an_earlier_round_are_not_evaluated_again(knowledge: KnowledgeBase) -> None:
    # Round 1 (k=2): canteen (band, graded no) and parking (below lower). Asked for two documents, the rewrite
    # would find osaka and the canteen again; the search over-fetches by the two known chunks and drops them, so
    # round 2 evaluates osaka (band against the rewrite, graded) and the K2 document (below lower).
    rewrite = "when does the Osaka canteen close"
    first = await scores(knowledge, CANTEEN_QUESTION, k=2)
    assert list(first) == ["canteen", "parking"]
    second = await scores(knowledge, rewrite, k=2)
    assert list(second) == ["osaka", "canteen"]
    policy = CorrectivePolicy()
    assert policy.lower + 0.05 < second["osaka"] < policy.upper - 0.1  # the band, against the rewrite
    # The second rewrite repeats the first, so the question expanded by osaka (round 2's best) is searched: it
    # finds the VPN document, too far from both queries to be explored.
    expansion = f"{CANTEEN_QUESTION} Osaka office: {DOCS[3].text}"
    vpn = next(p for p in await knowledge.search(TENANT, expansion, 5) if p.doc_id == "vpn")
    for query in (CANTEEN_QUESTION, expansion):
        assert relevance(policy.relevance, query, vpn.title, vpn.text, vpn.score) < policy.explore_floor
    script = Script(rewrites=[rewrite], grades={d.title: NOT_RELEVANT for d in DOCS})
    search = RecordingSearch(knowledge)

    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=2, search=search)

    assert state["steps"] == [
        "retrieve(k=2, found=2)",
        "evaluate: incorrect (kept 0/2, llm graded 1)",
        f"rewrite_query(1): {rewrite}",
        "search_more(local, queries=2, new=2)",  # the canteen was seen in round 1
        "evaluate: incorrect (kept 0/2, llm graded 1)",
        f"rewrite_query(2): {expansion}",
        "search_more(local, queries=1, new=1)",  # four of the five documents were seen
        "evaluate: incorrect (kept 0/1, llm graded 0)",
        "refine(strips from 0/0 passages)",
        "cautious_answer",
        "stop: no_evidence",
    ]
    assert graded_titles(model) == ["Staff canteen", "Osaka office"]  # no document graded twice
    assert state["seen"] == ["canteen#0", "parking#0", "osaka#0", "k2#0", "vpn#0"]
    assert state["queries"] == [rewrite, expansion]
    assert [k for _, k in search.calls] == [4, 4, 6]  # top_k + the chunks known before each search
    # The grader judges a later round's document against the original question, not the rewrite.
    osaka_prompt = [str(m[-1].content) for m, kw in model.calls if schema_name(kw) == "Grade"][1]
    assert osaka_prompt.startswith(f"Question: {CANTEEN_QUESTION}\n\nDocument (Osaka office):")
    # The second rewrite was told about the first (the scripted model repeats it anyway).
    rewrite_prompts = [str(m[-1].content) for m, kw in model.calls if kind((m, kw)) == "rewrite"]
    assert rewrite_prompts[1].endswith(
        f"Already searched (write a different query): {CANTEEN_QUESTION}; {rewrite}\nSearch query:"
    )
    assert state["stop_reason"] == "no_evidence"


# --- 5. Ungrounded answers --------------------------------------------------------------------------------------


async def test_ungrounded_answer_is_regenerated_then_replaced_by_a_cautious_answer(knowledge: KnowledgeBase) -> None:
    claim = "maximum payload of 900 kg"
    script = Script(answers=[K2_INVENTED], grounded=[{"unsupported_claims": [claim]}])

    state, model = await run_graph(knowledge, script, query=K2_QUESTION)

    assert state["steps"] == [
        "retrieve(k=5, found=5)",
        "evaluate: correct (kept 1/5, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "generate_answer",
        f"check_grounded: unsupported ['{claim}']",
        "regenerate_answer",
        f"check_grounded: unsupported ['{claim}']",
        "cautious_answer",
        "stop: unsupported",
    ]
    assert nodes(state) == ["generate", "check_grounded", "generate", "check_grounded"]
    assert [kind(c) for c in model.calls] == ["generate", "GroundednessCheck", "generate", "GroundednessCheck"]
    regenerate_messages = model.calls[2][0]
    assert len(regenerate_messages) == 3
    assert str(regenerate_messages[-1].content) == REGENERATE_NOTE.format(claims=claim)
    assert "900 kg" in str(model.calls[1][0][-1].content)  # the critic saw the answer
    assert state["grounded"] is False
    assert state["regenerated"] is True
    assert state["unsupported_claims"] == [claim]
    assert "useful" not in state  # no usefulness check on an unsupported answer
    assert state["abstained"] is True  # the cautious answer quotes the documents: it counts as an abstention
    answer = state["answer"]
    assert answer.startswith("I could not confirm a complete answer from the knowledge base.")
    assert "“The Kumo Carrier K2 has a maximum payload of 150 kg.” [1]" in answer
    assert answer.endswith(f" They do not state: {claim}.")
    assert "900" not in answer.replace(claim, "")
    assert doc_ids(state["sources"]) == ["k2"]
    assert state["context"] == state["strips"]
    assert state["fallback"] is True
    assert state["stop_reason"] == "unsupported"


async def test_unsupported_answer_after_retrieval_rewrites_reports_unsupported(
    knowledge: KnowledgeBase, embeddings: USEEmbeddings
) -> None:
    # Round 1 Incorrect, as in test_incorrect_round_is_discarded_*: the retrieval rounds use up the rewrites.
    vpn_vector = embeddings.embed_query("VPN policy update date")
    script = Script(rewrites=["K2 payload"], answers=[K2_INVENTED], grounded=[{"unsupported_claims": ["900 kg"]}])
    policy = CorrectivePolicy(max_rewrites=1)
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy, top_k=1, query_vector=vpn_vector)
    assert state["verdicts"] == ["incorrect", "correct"]
    assert state["rewrites"] == policy.max_rewrites
    assert state["steps"][-3:-1] == ["check_grounded: unsupported ['900 kg']", "cautious_answer"]
    assert state["fallback"] is True
    assert state["stop_reason"] == "unsupported"


async def test_unsupported_answer_that_spends_the_last_call_reports_unsupported(knowledge: KnowledgeBase) -> None:
    script = Script(answers=[K2_INVENTED], grounded=[{"unsupported_claims": ["900 kg"]}])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=CorrectivePolicy(max_llm_calls=4))
    assert nodes(state) == ["generate", "check_grounded", "generate", "check_grounded"]
    assert state["steps"][-2] == "cautious_answer"
    assert state["stop_reason"] == "unsupported"


async def test_regenerated_answer_that_is_supported_goes_on_to_the_usefulness_check(
    knowledge: KnowledgeBase,
) -> None:
    script = Script(answers=[K2_INVENTED, K2_ANSWER], grounded=[{"unsupported_claims": ["payload of 900 kg"]}])
    state, model = await run_graph(knowledge, script, query=K2_QUESTION)
    assert state["steps"][3:] == [
        "generate_answer",
        "check_grounded: unsupported ['payload of 900 kg']",
        "regenerate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    assert nodes(state) == ["generate", "check_grounded", "generate", "check_useful"]
    assert state["answer"] == K2_ANSWER
    assert state["grounded"] is True
    assert state["regenerated"] is True
    assert state["useful"] is True
    assert state["unsupported_claims"] == []
    assert str(model.calls[2][0][-1].content) == REGENERATE_NOTE.format(claims="payload of 900 kg")


async def test_lexical_doubt_cleared_by_the_critic_needs_no_regeneration(knowledge: KnowledgeBase) -> None:
    paraphrase = "The K2 can carry at most 150 kilograms [1]."  # "carry", "kilograms" are not in the passage
    state, _ = await run_graph(knowledge, Script(answers=[paraphrase]), query=K2_QUESTION)
    assert state["steps"][3:] == ["generate_answer", "check_grounded: supported", "check_useful: yes", "stop: answered"]
    assert nodes(state) == ["generate", "check_grounded", "check_useful"]
    assert state["answer"] == paraphrase
    assert state["regenerated"] is False


async def test_model_that_finds_nothing_skips_the_grounding_check_and_is_not_useful(knowledge: KnowledgeBase) -> None:
    policy = CorrectivePolicy(max_rewrites=1)
    script = Script(answers=[NOT_IN_CONTEXT], rewrites=["Kumo Carrier K2 payload"])
    # The new round finds only the Osaka document, too far from the question and the rewrite to be explored.
    osaka = await follow_up_score(knowledge, K2_QUESTION, "Kumo Carrier K2 payload", K2_EXPANSION, "osaka")
    assert osaka < policy.explore_floor
    state, model = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy, top_k=1)
    missing = "the answer says the information was not found"
    assert state["steps"] == [
        "retrieve(k=1, found=1)",
        "evaluate: correct (kept 1/1, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "generate_answer",
        "check_grounded: skipped (no answer found)",
        f"check_useful: no ({missing})",
        "rewrite_query(1): Kumo Carrier K2 payload",
        "search_more(local, queries=2, new=1)",
        "evaluate: incorrect (kept 0/1, llm graded 0)",
        # the evidence did not grow: answering again from the same passages would only repeat the abstention
        "stop: max_rewrites",
    ]
    # Neither critic needed the model for an abstention.
    assert nodes(state) == ["generate", "rewrite_query"]
    assert f"Missing: {missing}" in str(model.calls[1][0][-1].content)
    assert state["answered_with"] == len(state["evidence"]) == 1
    assert state["abstained"] is True
    assert state["answer"] == ABSTAIN_EN
    assert state["sources"] == []
    assert state["useful"] is False
    assert state["stop_reason"] == "max_rewrites"


K2_PASSAGE = Passage(chunk_id="k2#0", doc_id="k2", title="Kumo Carrier K2", text=DOCS[0].text, score=0.9)
CAUTIOUS_K2 = (
    "I could not confirm a complete answer from the knowledge base. What the documents do say: "
    "“The Kumo Carrier K2 has a maximum payload of 150 kg.” [1]"
)


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


# --- 6. Useless answers -----------------------------------------------------------------------------------------


async def test_useless_answer_rewrites_for_the_missing_information_bounded_by_max_rewrites(
    knowledge: KnowledgeBase,
) -> None:
    missing = "the payload in pounds"
    policy = CorrectivePolicy(max_rewrites=2)
    script = Script(useful=[{"useful": False, "missing": missing}], rewrites=["K2 payload pounds", "K2 weight lb"])
    # Each new round finds one more document, too far from the question and its query to be explored.
    osaka = await follow_up_score(knowledge, K2_QUESTION, "K2 payload pounds", K2_EXPANSION, "osaka")
    parking = await follow_up_score(knowledge, K2_QUESTION, "K2 weight lb", K2_EXPANSION, "parking")
    assert max(osaka, parking) < policy.explore_floor

    state, model = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy, top_k=1)

    assert state["steps"] == [
        "retrieve(k=1, found=1)",
        "evaluate: correct (kept 1/1, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "generate_answer",
        "check_grounded: supported",
        f"check_useful: no ({missing})",
        "rewrite_query(1): K2 payload pounds",
        "search_more(local, queries=2, new=1)",
        "evaluate: incorrect (kept 0/1, llm graded 0)",
        "rewrite_query(2): K2 weight lb",
        "search_more(local, queries=2, new=1)",
        "evaluate: incorrect (kept 0/1, llm graded 0)",
        # nothing was added to the evidence: no second answer from the same passages
        "stop: max_rewrites",
    ]
    assert nodes(state) == ["generate", "check_useful", "rewrite_query", "rewrite_query"]
    rewrite_prompts = [str(m[-1].content) for m, kw in model.calls if kind((m, kw)) == "rewrite"]
    assert all(f"Missing: {missing}" in p for p in rewrite_prompts)
    assert all("- (Kumo Carrier K2) The Kumo Carrier K2 has a maximum payload" in p for p in rewrite_prompts)
    assert state["seen"] == ["k2#0", "osaka#0", "parking#0"]
    assert state["rewrites"] == policy.max_rewrites
    assert state["useful"] is False
    assert state["missing"] == missing
    assert state["grounded"] is True
    assert state["answer"] == K2_ANSWER  # the last grounded answer is returned, not an abstention
    assert doc_ids(state["evidence"]) == ["k2"]
    assert "fallback" not in state
    assert state["stop_reason"] == "max_rewrites"


@pytest.mark.parametrize(
    ("grade", "verdict", "tail"),
    [
        (NOT_RELEVANT, "incorrect (kept 0/1, llm graded 1)", ["stop: max_rewrites"]),
        (
            relevant(CANTEEN_FACT),
            "correct (kept 1/1, llm graded 1)",
            [
                "refine(strips from 2/2 passages)",
                "generate_answer",
                "check_grounded: supported",
                "check_useful: no (when the canteen closes)",
                "stop: max_rewrites",
            ],
        ),
    ],
    ids=["evidence-unchanged", "evidence-grew"],
)
async def test_a_new_round_answers_again_only_when_it_added_evidence(
    knowledge: KnowledgeBase, grade: dict[str, Any], verdict: str, tail: list[str]
) -> None:
    policy = CorrectivePolicy(max_rewrites=1)
    assert policy.lower < (await scores(knowledge, CANTEEN_QUESTION, k=1))["canteen"] < policy.upper
    script = Script(
        useful=[{"useful": False, "missing": "when the canteen closes"}],
        rewrites=[CANTEEN_QUESTION],
        grades={"Staff canteen": grade},
    )
    state, model = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy, top_k=1)
    assert state["steps"] == [
        "retrieve(k=1, found=1)",
        "evaluate: correct (kept 1/1, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: no (when the canteen closes)",
        f"rewrite_query(1): {CANTEEN_QUESTION}",
        "search_more(local, queries=2, new=1)",
        f"evaluate: {verdict}",
        *tail,
    ]
    generations = 2 if "generate_answer" in tail else 1
    assert [kind(c) for c in model.calls].count("generate") == generations
    assert state["answered_with"] == len(state["evidence"]) == generations
    assert state["answer"] == K2_ANSWER
    assert state["stop_reason"] == "max_rewrites"


async def test_useless_answer_new_round_merges_the_documents_found_for_the_missing_information(
    knowledge: KnowledgeBase,
) -> None:
    # upper=0 keeps every found document, so the second round's document joins the evidence.
    policy = CorrectivePolicy(upper=0.0, max_rewrites=1)
    script = Script(
        answers=[K2_ANSWER, "The K2 carries 150 kg [1]; the canteen closes at 14:00 [2]."],
        useful=[{"useful": False, "missing": "when the canteen closes"}, USEFUL],
        rewrites=["staff canteen closing time"],
    )
    state, model = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy, top_k=1)
    assert state["steps"][5:] == [
        "check_useful: no (when the canteen closes)",
        "rewrite_query(1): staff canteen closing time",
        "search_more(local, queries=2, new=1)",
        "evaluate: correct (kept 1/1, llm graded 0)",
        "refine(strips from 2/2 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    assert doc_ids(state["evidence"]) == ["k2", "canteen"]
    assert sorted(doc_ids(state["sources"])) == ["canteen", "k2"]
    assert state["useful"] is True
    assert "Missing: when the canteen closes" in str(model.calls[2][0][-1].content)


# --- 7. Budgets -------------------------------------------------------------------------------------------------


async def test_no_llm_budget_ends_in_a_cautious_answer_without_model_calls(knowledge: KnowledgeBase) -> None:
    state, model = await run_graph(knowledge, Script(), query=K2_QUESTION, policy=CorrectivePolicy(max_llm_calls=0))
    assert state["steps"] == [
        "retrieve(k=5, found=5)",
        "evaluate: correct (kept 1/5, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "cautious_answer",
        "stop: max_llm_calls",
    ]
    assert model.calls == []
    assert state["stop_reason"] == "max_llm_calls"
    assert state["answer"].startswith("I could not confirm a complete answer")
    assert "“The Kumo Carrier K2 has a maximum payload of 150 kg.” [1]" in state["answer"]
    assert "do not state" not in state["answer"]
    assert doc_ids(state["sources"]) == ["k2"]  # the quoted passages are still its sources
    assert state["abstained"] is True  # a statement of what the documents say, not an answer


async def test_one_call_budget_generates_then_cannot_check_and_falls_back(knowledge: KnowledgeBase) -> None:
    policy = CorrectivePolicy(max_llm_calls=1)
    state, _ = await run_graph(knowledge, Script(answers=[K2_INVENTED]), query=K2_QUESTION, policy=policy)
    assert state["steps"][3:] == [
        "generate_answer",
        f"check_grounded: unsupported [{K2_INVENTED!r}]",  # the lexical doubt, unconfirmed: no call left
        "cautious_answer",
        "stop: max_llm_calls",
    ]
    assert nodes(state) == ["generate"]
    assert state["grounded"] is False
    assert state["regenerated"] is False
    said, _, missing = state["answer"].partition(" They do not state: ")
    assert said == (
        "I could not confirm a complete answer from the knowledge base. What the documents do say: "
        "“The Kumo Carrier K2 has a maximum payload of 150 kg.” [1]"
    )
    # The quoted claim loses its [1] (the citation numbers belong to the evidence quoted above) and its own
    # full stop (the template adds one).
    assert missing == "The Kumo Carrier K2 has a maximum payload of 900 kg."
    assert state["stop_reason"] == "max_llm_calls"


@pytest.mark.parametrize("budget", [2, 3])
async def test_regeneration_needs_budget_and_the_last_check_falls_back_to_the_lexical_doubt(
    knowledge: KnowledgeBase, budget: int
) -> None:
    policy = CorrectivePolicy(max_llm_calls=budget)
    script = Script(answers=[K2_INVENTED], grounded=[{"unsupported_claims": ["900 kg"]}])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy)
    if budget == 2:  # generate + critic: nothing left to regenerate with
        assert state["steps"][3:] == [
            "generate_answer",
            "check_grounded: unsupported ['900 kg']",
            "cautious_answer",
            "stop: max_llm_calls",  # the budget prevented the regeneration
        ]
        assert nodes(state) == ["generate", "check_grounded"]
        assert state["regenerated"] is False
        assert state["stop_reason"] == "max_llm_calls"
    else:  # generate + critic + regenerate: the second check cannot ask the critic
        assert state["steps"][3:] == [
            "generate_answer",
            "check_grounded: unsupported ['900 kg']",
            "regenerate_answer",
            f"check_grounded: unsupported [{K2_INVENTED!r}]",
            "cautious_answer",
            "stop: unsupported",  # the one regeneration happened and is still unsupported: no loop was cut
        ]
        assert nodes(state) == ["generate", "check_grounded", "generate"]
        assert state["regenerated"] is True
        assert state["stop_reason"] == "unsupported"
    assert len(state["llm_calls"]) == budget
    assert state["fallback"] is True


async def test_usefulness_is_assumed_when_no_call_is_left_for_the_critic(knowledge: KnowledgeBase) -> None:
    state, _ = await run_graph(knowledge, Script(), query=K2_QUESTION, policy=CorrectivePolicy(max_llm_calls=1))
    assert state["steps"][3:] == [
        "generate_answer",
        "check_grounded: supported",
        "check_useful: skipped (no LLM calls left)",  # the steps say it was not checked
        "stop: answered",
    ]
    assert nodes(state) == ["generate"]
    assert state["useful"] is True
    assert state["missing"] == ""  # the skip reason is not passed on as missing information
    assert state["stop_reason"] == "answered"


async def test_incorrect_loop_stops_rewriting_when_a_rewrite_could_not_be_followed_by_an_answer(
    knowledge: KnowledgeBase,
) -> None:
    policy = CorrectivePolicy(max_llm_calls=2, max_rewrites=5)
    state, _ = await run_graph(knowledge, Script(rewrites=["nothing"]), query=OFF_TOPIC, policy=policy)
    assert state["steps"] == [
        "retrieve(k=5, found=5)",
        "evaluate: incorrect (kept 0/5, llm graded 0)",
        "rewrite_query(1): nothing",
        "search_more(local, queries=2, new=0)",  # all five documents were seen in round 1
        "evaluate: incorrect (kept 0/0, llm graded 0)",
        "refine(strips from 0/0 passages)",
        "cautious_answer",
        "stop: no_evidence",
    ]
    assert nodes(state) == ["rewrite_query"]
    assert state["rewrites"] == 1 < policy.max_rewrites


@pytest.mark.parametrize("budget", [3, 4])
async def test_useless_answer_is_not_retried_when_the_budget_cannot_pay_for_a_new_round(
    knowledge: KnowledgeBase, budget: int
) -> None:
    policy = CorrectivePolicy(max_llm_calls=budget)  # generate + useful = 2; a new round needs 3 more
    script = Script(useful=[{"useful": False, "missing": "the payload in pounds"}])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy)
    assert state["steps"][3:-1] == [
        "generate_answer",
        "check_grounded: supported",
        "check_useful: no (the payload in pounds)",
    ]
    assert nodes(state) == ["generate", "check_useful"]
    assert state["rewrites"] == 0
    assert state["answer"] == K2_ANSWER  # the grounded answer is returned, not replaced by a fallback


@pytest.mark.parametrize("budget", [3, 4])
async def test_useless_answer_cut_by_the_call_budget_reports_max_llm_calls(
    knowledge: KnowledgeBase, budget: int
) -> None:
    # 1-2 calls left: after_useful needs 3 for a new round, and the stop reason says the budget cut it.
    script = Script(useful=[{"useful": False, "missing": "the payload in pounds"}])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=CorrectivePolicy(max_llm_calls=budget))
    assert state["steps"][-2:] == ["check_useful: no (the payload in pounds)", "stop: max_llm_calls"]
    assert budget - len(state["llm_calls"]) in (1, 2)
    assert state["useful"] is False
    assert state["rewrites"] == 0
    assert state["stop_reason"] == "max_llm_calls"


async def test_useless_answer_with_the_budget_spent_exactly_reports_max_llm_calls(knowledge: KnowledgeBase) -> None:
    script = Script(useful=[{"useful": False, "missing": "the payload in pounds"}])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=CorrectivePolicy(max_llm_calls=2))
    assert state["steps"][-2:] == ["check_useful: no (the payload in pounds)", "stop: max_llm_calls"]
    assert state["stop_reason"] == "max_llm_calls"


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
        grounded=[{"unsupported_claims": ["900 kg"]}],
        useful=[{"useful": False, "missing": "everything"}],
    )


@pytest.mark.parametrize("top_k", [1, 5])
@pytest.mark.parametrize("budget", range(0, 9))
@pytest.mark.parametrize("question", [CANTEEN_QUESTION, K2_QUESTION, OFF_TOPIC])
async def test_llm_calls_never_exceed_the_budget(
    knowledge: KnowledgeBase, budget: int, question: str, top_k: int
) -> None:
    policy = CorrectivePolicy(max_llm_calls=budget)
    state, model = await run_graph(knowledge, adversarial_script(), query=question, policy=policy, top_k=top_k)
    assert len(state["llm_calls"]) <= budget
    assert len(model.calls) <= budget
    assert state["stop_reason"] in get_args(StopReason)
    assert state["rewrites"] <= policy.max_rewrites
    assert len(graded_titles(model)) == len(set(graded_titles(model)))  # no document graded twice


async def test_worst_case_loops_end_within_the_recursion_limit_when_calls_are_unlimited(
    knowledge: KnowledgeBase,
) -> None:
    # lower=0 puts every document in the band and the grader keeps each one: with top_k=1 every round adds a
    # document, so every round ends in a full generation round (a round that adds nothing would just stop).
    policy = CorrectivePolicy(max_llm_calls=1000, lower=0.0)
    script = adversarial_script()
    # Every round: an invented answer, its regeneration (supported), a useless verdict, a rewrite.
    script.answers = ["The staff canteen closes at 23:00 [1].", CANTEEN_ANSWER] * (policy.max_rewrites + 1)
    script.grounded = [{"unsupported_claims": ["closes at 23:00"]}]
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, top_k=1)
    generation_round = [
        "generate_answer",
        "check_grounded: unsupported ['closes at 23:00']",
        "regenerate_answer",
        "check_grounded: supported",
        "check_useful: no (everything)",
    ]
    expansion = f"{CANTEEN_QUESTION} Staff canteen: {DOCS[2].text}"
    assert state["steps"] == [
        "retrieve(k=1, found=1)",
        "evaluate: correct (kept 1/1, llm graded 1)",
        "refine(strips from 1/1 passages)",
        *generation_round,
        "rewrite_query(1): canteen hours",
        "search_more(local, queries=2, new=1)",
        "evaluate: correct (kept 1/1, llm graded 1)",
        "refine(strips from 2/2 passages)",
        *generation_round,
        f"rewrite_query(2): {expansion}",  # "canteen hours" again: replaced by the expansion
        "search_more(local, queries=1, new=1)",
        "evaluate: correct (kept 1/1, llm graded 1)",
        "refine(strips from 2/3 passages)",  # the third document has no strip that bears on the question
        *generation_round,
        "stop: max_rewrites",
    ]
    assert graded_titles(model) == ["Staff canteen", "Parking rules", "Osaka office"]  # each graded once
    assert len(state["evidence"]) == state["answered_with"] == 3
    assert [kind(c) for c in model.calls].count("generate") == 2 * (policy.max_rewrites + 1)
    assert state["rewrites"] == policy.max_rewrites
    assert len(state["steps"]) < policy.recursion_limit
    assert state["stop_reason"] == "max_rewrites"


async def test_time_budget_spent_skips_generation(knowledge: KnowledgeBase) -> None:
    policy = CorrectivePolicy(max_seconds=0.0001)
    started = time.monotonic() - 1.0
    state, model = await run_graph(knowledge, Script(), query=K2_QUESTION, policy=policy, started_at=started)
    assert state["steps"] == [
        "retrieve(k=5, found=5)",
        "evaluate: correct (kept 1/5, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "cautious_answer",
        "stop: max_seconds",
    ]
    assert model.calls == []
    assert state["stop_reason"] == "max_seconds"
    assert state["answer"].startswith("I could not confirm a complete answer")


async def test_time_budget_spent_skips_rewrites(knowledge: KnowledgeBase) -> None:
    policy = CorrectivePolicy(max_seconds=0.0001)
    started = time.monotonic() - 1.0
    state, model = await run_graph(knowledge, Script(), query=OFF_TOPIC, policy=policy, started_at=started)
    assert state["steps"] == [
        "retrieve(k=5, found=5)",
        "evaluate: incorrect (kept 0/5, llm graded 0)",
        "refine(strips from 0/0 passages)",
        "cautious_answer",
        "stop: no_evidence",
    ]
    assert model.calls == []
    assert state["rewrites"] == 0


async def test_time_budget_spent_skips_the_llm_grader(knowledge: KnowledgeBase) -> None:
    # The canteen is in the band and the call budget is untouched, but the time is up: no Grade call.
    policy = CorrectivePolicy(max_seconds=0.0001)
    started = time.monotonic() - 1.0
    script = Script(grades={"Staff canteen": relevant(CANTEEN_FACT)})
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy, started_at=started)
    assert model.calls == []
    assert state["steps"][1:] == [
        "evaluate: ambiguous (kept 1/5, llm graded 0)",  # left undecided, so kept
        "refine(strips from 1/1 passages)",
        "cautious_answer",
        "stop: max_seconds",
    ]
    assert doc_ids(state["evidence"]) == ["canteen"]
    assert state["rewrites"] == 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


async def test_time_budget_running_out_in_a_later_round_ends_in_a_cautious_answer(
    knowledge: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The clock jumps past max_seconds while the second round's query is being rewritten. That round finds the
    # canteen document in the band, cannot grade it (no time), keeps it undecided, and cannot answer again.
    clock = FakeClock()
    monkeypatch.setattr(corrective_graph, "time", clock)
    policy = CorrectivePolicy(max_seconds=10.0)
    assert policy.lower < (await scores(knowledge, CANTEEN_QUESTION, k=1))["canteen"] < policy.upper

    def expire() -> None:
        clock.now += 60.0

    script = Script(
        useful=[{"useful": False, "missing": "when the canteen closes"}],
        rewrites=[CANTEEN_QUESTION],
        grades={"Staff canteen": relevant(CANTEEN_FACT)},
        on_rewrite=expire,
    )
    state, model = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy, started_at=clock.now, top_k=1)
    assert state["steps"] == [
        "retrieve(k=1, found=1)",
        "evaluate: correct (kept 1/1, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: no (when the canteen closes)",
        f"rewrite_query(1): {CANTEEN_QUESTION}",
        "search_more(local, queries=2, new=1)",
        "evaluate: ambiguous (kept 1/1, llm graded 0)",
        "refine(strips from 2/2 passages)",
        "cautious_answer",
        "stop: max_seconds",
    ]
    assert graded_titles(model) == []
    assert doc_ids(state["evidence"]) == ["k2", "canteen"]
    assert state["stop_reason"] == "max_seconds"
    # The first round's grounded (but not useful) answer is replaced by the cautious fallback over the new evidence.
    assert state["answer"].startswith("I could not confirm a complete answer")
    assert "“The staff canteen opens at 11:30 and closes at 14:00 on weekdays.”" in state["answer"]
    assert state["fallback"] is True
    assert state["abstained"] is True
    assert state["useful"] is False


async def test_time_budget_running_out_in_a_later_round_that_finds_nothing_keeps_the_answer(
    knowledge: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As above, but the second round finds only an irrelevant document: the evidence did not grow, so the
    # first round's grounded answer is returned instead of a fallback.
    clock = FakeClock()
    monkeypatch.setattr(corrective_graph, "time", clock)
    policy = CorrectivePolicy(max_seconds=10.0)

    def expire() -> None:
        clock.now += 60.0

    osaka = await follow_up_score(knowledge, K2_QUESTION, "Kumo Carrier K2 payload", K2_EXPANSION, "osaka")
    assert osaka < policy.explore_floor  # not even explored
    script = Script(useful=[{"useful": False, "missing": "the payload in pounds"}], on_rewrite=expire)
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION, policy=policy, started_at=clock.now, top_k=1)
    assert state["steps"] == [
        "retrieve(k=1, found=1)",
        "evaluate: correct (kept 1/1, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: no (the payload in pounds)",
        "rewrite_query(1): Kumo Carrier K2 payload",
        "search_more(local, queries=2, new=1)",
        "evaluate: incorrect (kept 0/1, llm graded 0)",
        "stop: max_seconds",
    ]
    assert state["seen"] == ["k2#0", "osaka#0"]
    assert doc_ids(state["evidence"]) == ["k2"]
    assert nodes(state) == ["generate", "check_useful", "rewrite_query"]
    assert state["answer"] == K2_ANSWER
    assert "fallback" not in state
    assert state["useful"] is False
    assert state["stop_reason"] == "max_seconds"


# --- 8. Malformed structured output -----------------------------------------------------------------------------


async def test_malformed_grade_leaves_the_document_undecided_and_is_counted(knowledge: KnowledgeBase) -> None:
    policy = CorrectivePolicy(max_rewrites=0)
    script = Script(grades={"Staff canteen": "Yes, this document is relevant."}, answers=[CANTEEN_ANSWER])
    state, model = await run_graph(knowledge, script, query=CANTEEN_QUESTION, policy=policy)
    assert state["steps"] == [
        "retrieve(k=5, found=5)",
        "evaluate: ambiguous (kept 1/5, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    assert nodes(state) == ["grade_document", "generate", "check_useful"]
    assert [kind(c) for c in model.calls] == ["Grade", "generate", "UsefulnessCheck"]
    assert doc_ids(state["evidence"]) == ["canteen"]
    assert state["answer"] == CANTEEN_ANSWER


async def test_malformed_groundedness_check_keeps_the_lexical_doubt(knowledge: KnowledgeBase) -> None:
    script = Script(answers=[K2_INVENTED, K2_ANSWER], grounded=["The answer looks fine to me."])
    state, _ = await run_graph(knowledge, script, query=K2_QUESTION)
    assert state["steps"][3:] == [
        "generate_answer",
        f"check_grounded: unsupported [{K2_INVENTED!r}]",
        "regenerate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    assert nodes(state) == ["generate", "check_grounded", "generate", "check_useful"]
    assert state["answer"] == K2_ANSWER


async def test_malformed_usefulness_check_counts_as_useful(knowledge: KnowledgeBase) -> None:
    state, _ = await run_graph(knowledge, Script(useful=["```json\n{not json}\n```"]), query=K2_QUESTION)
    assert state["steps"][-2:] == ["check_useful: skipped (critic output malformed)", "stop: answered"]
    assert nodes(state) == ["generate", "check_useful"]  # the malformed call is counted
    assert state["useful"] is True
    assert state["missing"] == ""
    assert state["rewrites"] == 0
    assert state["stop_reason"] == "answered"


# --- 9. Escalation through the route table ----------------------------------------------------------------------


def make_table(
    knowledge: KnowledgeBase, script: Script, *, escalate: bool = True, recursion_limit: int = 40
) -> tuple[RouteTable, ScriptedChatModel]:
    llm, model = make_llm(script)
    policy = CorrectivePolicy()
    table = RouteTable(
        direct=build_direct(llm),
        single_hop=build_single_hop(
            SingleHopDeps(llm, knowledge, GroundingPolicy(), policy.relevance, policy.lower, policy.upper)
        ),
        corrective=build_graph(CorrectiveDeps(llm, knowledge, LocalStoreSearch(knowledge), knowledge, policy)),
        policy=RoutePolicy(
            default_top_k=4,
            max_top_k=6,
            multi_hop_top_k=5,
            escalate_on_incorrect=escalate,
            recursion_limit=recursion_limit,
        ),
    )
    return table, model


async def test_single_hop_with_incorrect_retrieval_escalates_to_the_corrective_pipeline(
    knowledge: KnowledgeBase, embeddings: USEEmbeddings
) -> None:
    # The caller's query vector points at the VPN document, so both single_hop and the corrective
    # pipeline's first round retrieve it (top_k=1) and find it irrelevant.
    vpn_vector = embeddings.embed_query("VPN policy update date")
    policy = CorrectivePolicy()
    (first,) = await knowledge.search(TENANT, HEAVY_QUESTION, 1, vector=vpn_vector)
    assert first.doc_id == "vpn"
    assert relevance(policy.relevance, HEAVY_QUESTION, first.title, first.text, first.score) < policy.lower
    # The rewritten query finds the K2 document. Scored against the rewrite (as the evaluator does) it is
    # relevant outright; against the question it would only have been in the band, for the grader.
    rewrite = "Kumo Carrier K2 maximum payload"
    assert (await scores(knowledge, rewrite, k=1))["k2"] > policy.upper + 0.3
    assert policy.lower < (await scores(knowledge, HEAVY_QUESTION, k=1, search_query=rewrite))["k2"] < policy.upper

    answer = "The carrier lifts at most 150 kg [1]."
    script = Script(rewrites=[rewrite], grades={"Kumo Carrier K2": relevant(K2_FACT)}, answers=[answer])
    table, model = make_table(knowledge, script)
    result = await table.run("single_hop", query=HEAVY_QUESTION, tenant=TENANT, top_k=1, query_vector=vpn_vector)

    assert result.route == "multi_hop"
    assert result.escalated_from == "single_hop"
    assert result.steps[:5] == [
        "retrieve(k=1, found=1)",
        "assess_retrieval: incorrect",
        "escalate: single_hop -> multi_hop (retrieval incorrect)",
        "retrieve(k=1, found=1)",
        "evaluate: incorrect (kept 0/1, llm graded 0)",
    ]
    assert result.steps[5:] == [
        f"rewrite_query(1): {rewrite}",
        "search_more(local, queries=2, new=1)",
        "evaluate: correct (kept 1/1, llm graded 0)",
        "refine(strips from 1/1 passages)",
        "generate_answer",
        "check_grounded: supported",
        "check_useful: yes",
        "stop: answered",
    ]
    # single_hop made no call before escalating; everything after is the corrective pipeline's
    assert [c.node for c in result.llm_calls] == ["rewrite_query", "generate", "check_useful"]
    assert len(model.calls) == 3
    assert result.answer == answer
    assert doc_ids(result.sources) == ["k2"]
    assert result.stop_reason == "answered"
    assert not result.abstained


async def test_escalated_request_with_nothing_to_find_ends_without_evidence(knowledge: KnowledgeBase) -> None:
    table, _ = make_table(knowledge, Script(rewrites=["Sistine Chapel painter"]))
    result = await table.run("single_hop", query=OFF_TOPIC, tenant=TENANT, top_k=2, query_vector=None)
    assert result.route == "multi_hop"
    assert result.escalated_from == "single_hop"
    assert result.steps[:4] == [
        "retrieve(k=2, found=2)",
        "assess_retrieval: incorrect",
        "escalate: single_hop -> multi_hop (retrieval incorrect)",
        "retrieve(k=2, found=2)",  # the caller's top_k is kept for the corrective run
    ]
    assert result.stop_reason == "no_evidence"
    assert result.abstained
    assert result.answer == ABSTAIN_EN


async def test_single_hop_does_not_escalate_when_escalation_is_not_allowed(knowledge: KnowledgeBase) -> None:
    table, model = make_table(knowledge, Script())
    result = await table.run(
        "single_hop", query=OFF_TOPIC, tenant=TENANT, top_k=None, query_vector=None, allow_escalation=False
    )
    assert result.route == "single_hop"
    assert result.escalated_from is None
    assert result.steps[:2] == ["retrieve(k=4, found=4)", "assess_retrieval: incorrect"]
    assert result.steps[2].startswith("generate_answer (abstained: no passage above relevance")
    assert not any(s.startswith("escalate") for s in result.steps)
    assert result.abstained
    assert result.stop_reason is None
    assert model.calls == []


async def test_single_hop_does_not_escalate_when_the_route_policy_forbids_it(knowledge: KnowledgeBase) -> None:
    table, _ = make_table(knowledge, Script(), escalate=False)
    result = await table.run("single_hop", query=OFF_TOPIC, tenant=TENANT, top_k=None, query_vector=None)
    assert result.route == "single_hop"
    assert result.escalated_from is None
    assert "escalate: single_hop -> multi_hop (retrieval incorrect)" not in result.steps


async def test_single_hop_in_an_empty_tenant_does_not_escalate(knowledge: KnowledgeBase) -> None:
    table, model = make_table(knowledge, Script())
    result = await table.run("single_hop", query=OFF_TOPIC, tenant="empty", top_k=None, query_vector=None)
    assert result.route == "single_hop"
    assert result.escalated_from is None
    assert result.steps[:2] == ["retrieve(k=4, found=0)", "assess_retrieval: incorrect"]
    assert len(result.steps) == 3
    assert result.abstained
    assert model.calls == []


async def test_single_hop_with_correct_retrieval_answers_without_escalating(knowledge: KnowledgeBase) -> None:
    table, _ = make_table(knowledge, Script())
    result = await table.run("single_hop", query=K2_QUESTION, tenant=TENANT, top_k=None, query_vector=None)
    assert result.route == "single_hop"
    assert result.escalated_from is None
    assert result.steps == ["retrieve(k=4, found=4)", "assess_retrieval: correct", "generate_answer"]
    assert result.answer == K2_ANSWER


async def test_corrective_run_hitting_the_recursion_limit_is_reported_not_raised(knowledge: KnowledgeBase) -> None:
    table, _ = make_table(knowledge, Script(), recursion_limit=3)
    result = await table.run("multi_hop", query=K2_QUESTION, tenant=TENANT, top_k=None, query_vector=None)
    assert result.route == "multi_hop"
    assert result.stop_reason == "recursion_limit"
    assert result.steps == ["stop: recursion_limit"]
    assert result.abstained
    assert result.sources == []
