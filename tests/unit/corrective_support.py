"""Shared pieces of the corrective graph tests: the corpora, the scripted model, the graph runner and the probes.

Verdicts come from the real fast scorer (:func:`pipelines.shared.relevance.relevance`) over the
documents below; each test that depends on a score probes it first (:func:`scores`, :func:`follow_up_score`),
so a change of the scorer or the embeddings fails loudly at the probe rather than somewhere down the graph.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage

from gateway.knowledge.chunking import Chunker
from gateway.knowledge.service import KnowledgeBase, LocalStoreSearch, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.llm import LLMClient
from gateway.settings import ModelPrice
from pipelines.corrective.graph import build_graph
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.state import CorrectiveContext, CorrectiveState
from pipelines.direct.state import DirectContext
from pipelines.shared import events as ev
from pipelines.shared.deps import Passage, WebSearch
from pipelines.shared.relevance import relevance
from pipelines.shared.visibility import Visibility
from pipelines.single_hop.state import SingleHopContext
from routes.table import PipelineContexts, RoutePolicy, RouteTable
from tests.calibration_support import corrective_policy, grounding_policy
from tests.fakes.memory_store import InMemoryVectorStore
from tests.fakes.scripted_chat import ScriptedChatModel
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
K2_WITHHELD = ev.Withhold(index=0, sentence=K2_INVENTED, reason="unsupported", missing=("900",))
K2_EXPANSION = f"{K2_QUESTION} Kumo Carrier K2: {DOCS[0].text}"
OFF_TOPIC = "Who painted the ceiling of the Sistine Chapel?"  # every document below 0.2
CANTEEN_QUESTION = "What time does the canteen close?"  # canteen ~0.25 (the band), the rest below 0.2
CANTEEN_ANSWER = "The staff canteen closes at 14:00 on weekdays [1]."
CASCADE_QUESTION = "Kumo Carrier K2 maximum payload staff canteen Osaka office parking garage"
HEAVY_QUESTION = "How heavy a load can the carrier lift?"  # k2 ~0.18: just below the lower threshold
VPN_QUERY = "VPN policy update date"  # the ``vpn_vector`` fixture embeds it: a vector that retrieves the VPN document
CAUTIOUS_K2 = (
    "I could not confirm a complete answer from the knowledge base. What the documents do say: "
    "“The Kumo Carrier K2 has a maximum payload of 150 kg.” [1]"
)

# The grader must copy a fact from the graded text: a document counts as relevant only with a fact it contains.
CANTEEN_FACT = "closes at 14:00 on weekdays"
OSAKA_FACT = "moved to the Umeda Sky Building in 2019"
K2_FACT = "a maximum payload of 150 kg"
NOT_RELEVANT = {"fact": "none", "relevant": False}
USEFUL = {"useful": True, "missing": ""}
ENOUGH = {"found": "", "next_query": ""}  # the hop planner finds the evidence sufficient
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

# The critics' judgements as events: supported, useful, and their failures.
SUPPORTED_CHECK = ev.Check(critic="grounded", outcome="passed")
USEFUL_CHECK = ev.Check(critic="useful", outcome="passed")


def withheld(sentence: str, *missing: str, reason: ev.WithholdReason = "unsupported", index: int = 0) -> ev.Withhold:
    """The sentence gate's event for a generated sentence it held back (``missing``: the terms the evidence lacks)."""
    return ev.Withhold(index=index, sentence=sentence, reason=reason, missing=missing)


def doubted(*claims: str) -> ev.Check:
    """The groundedness check's event for an answer whose ``claims`` it found unsupported."""
    return ev.Check(critic="grounded", outcome="failed", claims=claims)


def useless(missing: str) -> ev.Check:
    """The usefulness check's event for an answer that misses ``missing``."""
    return ev.Check(critic="useful", outcome="failed", note=missing)


# Recurring runs of events. The first round for K2_QUESTION with the default top_k (the K2 document, relevant without
# grading); a supported and useful answer that ends the run; the end of a run that kept nothing and abstains.
K2_ROUND = [
    ev.Retrieve(k=5, found=5),
    ev.Evaluate(verdict="correct", kept=1, total=5, graded=0),
    ev.Refine(strips=1, passages=1),
]
ANSWERED = [ev.Generate(), SUPPORTED_CHECK, USEFUL_CHECK, ev.Stop(reason="answered")]
NO_EVIDENCE = [ev.Refine(strips=0, passages=0), ev.Generate(mode="cautious"), ev.Stop(reason="no_evidence")]

Reply = str | dict[str, Any]


def relevant(fact: str) -> dict[str, Any]:
    """A grader reply that finds the document relevant and quotes ``fact`` from it."""
    return {"fact": fact, "relevant": True}


def unsupported(*claims: str) -> dict[str, Any]:
    """A groundedness critic reply that finds ``claims`` unsupported."""
    return {"unsupported_claims": list(claims)}


def not_useful(missing: str) -> dict[str, Any]:
    """A usefulness critic reply that finds the answer useless for lack of ``missing``."""
    return {"useful": False, "missing": missing}


def k2_useless_then_rewritten(missing: str, rewrite: str) -> list[ev.PipelineEvent]:
    """The events of a first round for K2_QUESTION with top_k=1, answered and supported but not useful for lack of
    ``missing``, then rewritten to ``rewrite`` and searched again (with the expansion), finding one new document."""
    return [
        ev.Retrieve(k=1, found=1),
        ev.Evaluate(verdict="correct", kept=1, total=1, graded=0),
        ev.Refine(strips=1, passages=1),
        ev.Generate(),
        SUPPORTED_CHECK,
        useless(missing),
        ev.Rewrite(round=1, query=rewrite),
        ev.SearchMore(source="local", queries=2, new=1),
    ]


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
    hops: list[Reply] = field(default_factory=lambda: [ENOUGH])  # the hop planner's replies (max_hops > 0)
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
        if name == "NextHop":
            return _next(self.hops)
        assert name is None, f"unexpected schema {name}"
        if last.endswith("Search query:"):
            if self.on_rewrite is not None:
                self.on_rewrite()
            return _next(self.rewrites)
        if "Context passages" in str(messages[1].content):
            return _next(self.answers)
        raise AssertionError(f"unexpected call: {last[:200]}")


def canteen_follow_up(grade: Reply, on_rewrite: Any = None) -> Script:
    """For K2_QUESTION with top_k=1: the answer is not useful ("when the canteen closes" is missing) and the rewrite
    is CANTEEN_QUESTION, whose round finds the canteen document in the band; the grader answers it ``grade``.
    The events up to that round's evaluation are ``k2_useless_then_rewritten("when the canteen closes",
    CANTEEN_QUESTION)``."""
    return Script(
        useful=[not_useful("when the canteen closes")],
        rewrites=[CANTEEN_QUESTION],
        grades={"Staff canteen": grade},
        on_rewrite=on_rewrite,
    )


def kind(call: tuple[list[BaseMessage], dict[str, Any]]) -> str:
    """What a recorded model call was: a schema name, ``rewrite`` or ``generate``."""
    messages, kwargs = call
    name = schema_name(kwargs)
    if name is not None:
        return name
    return "rewrite" if str(messages[-1].content).endswith("Search query:") else "generate"


def prompts(model: ScriptedChatModel, call_kind: str) -> list[str]:
    """The last message of each recorded call of ``call_kind`` (see :func:`kind`), in call order."""
    return [str(messages[-1].content) for messages, kwargs in model.calls if kind((messages, kwargs)) == call_kind]


def graded_titles(model: ScriptedChatModel) -> list[str]:
    """Titles of the documents sent to the LLM grader, in call order."""
    return [title for prompt in prompts(model, "Grade") for title in re.findall(r"Document \((.*)\):", prompt)]


def nodes(state: CorrectiveState) -> list[str]:
    return [c.node for c in state.llm_calls]


def critics(state: CorrectiveState) -> list[str]:
    """The critics that judged an answer, in order."""
    return [e.critic for e in state.events if isinstance(e, ev.Check)]


def doc_ids(passages: list[Any]) -> list[str]:
    return [p.doc_id for p in passages]


def make_llm(script: Script) -> tuple[LLMClient, ScriptedChatModel]:
    model = ScriptedChatModel(responder=script)
    return LLMClient(model, model_name="scripted", price=ModelPrice(input=1.0, output=2.0)), model


async def make_knowledge(embeddings: USEEmbeddings, tenant: str, docs: list[NewDocument]) -> KnowledgeBase:
    """An in-memory knowledge base holding ``docs`` for ``tenant``."""
    kb = KnowledgeBase(embeddings, InMemoryVectorStore(), Chunker(500, 50))
    await kb.ingest(tenant, docs)
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
    clock: Callable[[], float] = time.monotonic,
    visibility: Visibility | None = None,
) -> tuple[CorrectiveState, ScriptedChatModel]:
    """One run of the corrective graph; ``clock`` is its time budget's (a :class:`FakeClock`'s ``monotonic``);
    ``visibility`` the reader's (everything by default)."""
    policy = policy or corrective_policy()
    llm, model = make_llm(script)
    search = search or LocalStoreSearch(knowledge)
    context = CorrectiveContext(
        llm=llm, retriever=knowledge, search=search, embedder=knowledge, policy=policy, clock=clock
    )
    initial = {
        "query": query,
        "tenant": tenant,
        "top_k": top_k,
        "started_at": clock() if started_at is None else started_at,
        "query_vector": query_vector,
        "visibility": Visibility.everything() if visibility is None else visibility,
    }
    output = await build_graph().ainvoke(initial, context=context, config={"recursion_limit": policy.recursion_limit})
    state = CorrectiveState(**output)
    # Every model call is accounted for, failed structured calls included.
    assert len(state.llm_calls) == len(model.calls)
    assert state.stop_reason is not None
    assert state.events[-1] == ev.Stop(reason=state.stop_reason)
    return state, model


ROUTE_POLICY = RoutePolicy(default_top_k=4, max_top_k=6, multi_hop_top_k=5)


def build_route_table(
    llm: LLMClient,
    knowledge: KnowledgeBase,
    route_policy: RoutePolicy = ROUTE_POLICY,
    corrective_scope: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> RouteTable:
    """The three routes over ``knowledge`` with the default corrective policy; search_more searches the store."""
    policy = corrective_policy()
    contexts = PipelineContexts(
        direct=DirectContext(llm=llm),
        single_hop=SingleHopContext(
            llm=llm,
            retriever=knowledge,
            grounding=grounding_policy(),
            relevance=policy.relevance,
            lower=policy.lower,
            upper=policy.upper,
        ),
        corrective=CorrectiveContext(
            llm=llm, retriever=knowledge, search=LocalStoreSearch(knowledge), embedder=knowledge, policy=policy
        ),
    )
    return RouteTable(contexts, route_policy, corrective_scope=corrective_scope)


class RecordingSearch:
    """The tenant's own store as search_more's search, recording every ``(query, k)`` it is asked."""

    name = "local"

    def __init__(self, knowledge: KnowledgeBase) -> None:
        self.inner = LocalStoreSearch(knowledge)
        self.calls: list[tuple[str, int]] = []

    async def search(self, tenant: str, query: str, k: int, *, visibility: Visibility) -> list[Passage]:
        self.calls.append((query, k))
        return await self.inner.search(tenant, query, k, visibility=visibility)


class FakeClock:
    """A clock the test moves: ``run_graph(..., clock=clock.monotonic)`` gives it to the graph's context."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def expire(self) -> None:
        """Jumps a minute ahead: past any time budget the tests set."""
        self.now += 60.0


async def scores(knowledge: KnowledgeBase, query: str, k: int = 5, search_query: str | None = None) -> dict[str, float]:
    """The fast scorer's probability per document found by ``search_query`` (default ``query``), scored
    against ``query``. The evaluator scores a search_more round with the better of the question and the
    rewritten query, so to probe such a round pass the rewrite as both ``query`` and ``search_query``."""
    model = corrective_policy().relevance
    found = await knowledge.search(TENANT, search_query or query, k, visibility=Visibility.everything())
    return {p.doc_id: relevance(model, query, p.title, p.text, p.score) for p in found}


async def follow_up_score(
    knowledge: KnowledgeBase, question: str, rewrite: str, expansion: str, doc_id: str, tenant: str = TENANT
) -> float:
    """The fast score a search_more round gives ``doc_id``: the passage as found by the rewrite or the expansion
    (whichever scores it higher), scored against the better of the question and the rewrite."""
    model = corrective_policy().relevance
    found = [
        p
        for q in (rewrite, expansion)
        for p in await knowledge.search(tenant, q, 5, visibility=Visibility.everything())
        if p.doc_id == doc_id
    ]
    best = max(found, key=lambda p: p.score)
    return max(relevance(model, q, best.title, best.text, best.score) for q in (question, rewrite))
