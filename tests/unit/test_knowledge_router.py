"""The knowledge-aware router and the front router's probe: one search, signals in, decision out."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.messages import BaseMessage

from gateway.providers.llm import LLMClient
from gateway.settings import ModelPrice
from pipelines.shared.deps import Passage
from pipelines.shared.visibility import Visibility
from routes.corpus import Case
from routes.features import active_cues
from routes.knowledge_router import (
    DIRECT_CUES,
    KnowledgeModel,
    KnowledgeRouter,
    TenantRouting,
    fit_knowledge,
    retrieve_row,
)
from routes.llm_router import LLMRouter, describe
from routes.logistic_router import LogisticModel
from routes.probe import EMPTY_SIGNALS, PROBE_DEPTH, Probe, ProbeSignals, probe_of
from routes.router import FrontRouter
from routes.types import RouteDecision
from tests.fakes.scripted_chat import ScriptedChatModel

NOTHING = ProbeSignals(8, 8, 0.12, 0.03, 0.1, 0.05, 0.1, 0.05, 0.0, 0.0, 0.0, 0, 4, 0, 0.0)
ONE_DOC = ProbeSignals(8, 6, 0.58, 0.2, 0.35, 0.9, 0.9, 0.0, 0.0, 1.0, 1.0, 1, 5, 0, 0.0)
TWO_DOCS = ProbeSignals(8, 7, 0.5, 0.09, 0.46, 0.55, 0.95, 0.4, 0.4, 0.5, 1.0, 2, 9, 0, 0.4)


def _jitter(signals: ProbeSignals, i: int) -> ProbeSignals:
    step = (i % 5 - 2) * 0.02
    return replace(
        signals,
        top_score=signals.top_score + step,
        best_coverage=max(0.0, signals.best_coverage + step),
        second_document_share=max(0.0, signals.second_document_share + step),
        distinct_second_share=max(0.0, signals.distinct_second_share + step),
    )


def model_by_hand() -> KnowledgeModel:
    """Trained on signals written by hand: the tests pin the decision logic, not the training data."""
    cases, signals = [], []
    for i in range(20):
        for text, route, shown in (
            ("Thanks a lot!", "direct", NOTHING),
            ("Who won the 1998 World Cup?", "direct", NOTHING),
            ("When did the Lisbon office open?", "single_hop", ONE_DOC),
            ("Where is the team that builds Beacon based, and how many work there?", "multi_hop", TWO_DOCS),
        ):
            cases.append(Case(text, route, "en", "t", frozenset({"t"})))  # type: ignore[arg-type]
            signals.append(_jitter(shown, i))
    return fit_knowledge(cases, signals)


@pytest.fixture(scope="module")
def router() -> KnowledgeRouter:
    return KnowledgeRouter(model_by_hand())


def probe(signals: ProbeSignals, passages: int = 3) -> Probe:
    found = tuple(Passage(f"d{i}:0", f"d{i}", f"Doc {i}", "text", 0.5 - i / 10) for i in range(passages))
    return Probe("acme", "a question", PROBE_DEPTH, found, signals, ("d0",))


@pytest.mark.parametrize(
    ("query", "signals", "expected"),
    [
        ("Is the VPN mandatory abroad?", NOTHING, "direct"),
        ("When did the Lisbon office open?", ONE_DOC, "single_hop"),
        ("How many people work where the Beacon team sits?", TWO_DOCS, "multi_hop"),
        ("リスボンオフィスはいつ開設されましたか", ONE_DOC, "single_hop"),
        ("Beaconの開発チームがいるオフィスには何人いますか", TWO_DOCS, "multi_hop"),
    ],
)
def test_routes_on_what_the_knowledge_base_holds(
    router: KnowledgeRouter, query: str, signals: ProbeSignals, expected: str
) -> None:
    found = probe(signals)
    decision = router.classify(query, found)
    assert decision.route == expected, decision
    assert decision.classifier == "logistic"
    assert decision.probe is found  # handed on whole, for retrieval to reuse
    assert 0.5 <= decision.confidence <= 1.0


def test_a_question_naming_two_documents_routes_multi_hop_whatever_the_coverage(router: KnowledgeRouter) -> None:
    # Each page mentions the other, so the best one holds every word and no second part is read.
    question = "Which is longer, the Pendrell Line or the Esker Line?"
    assert router.classify(question, probe(ONE_DOC)).route == "single_hop"
    decision = router.classify(question, probe(replace(ONE_DOC, titled_documents=2)))
    assert decision.route == "multi_hop"
    assert "asks about 2 of them by title" in decision.reason
    # the rule chose it, not the threshold: marked so, with the probability a recalibration weighs the rule against
    assert decision.named_documents
    assert decision.p_multi_hop is not None
    assert decision.p_multi_hop < 0.5
    assert decision.router_version == router.version
    assert decision.confidence >= 0.5


def test_a_tenant_whose_calibration_turned_the_rule_off_routes_those_questions_by_the_threshold(
    router: KnowledgeRouter,
) -> None:
    question = "Is Beacon supported on Tidewater?"
    named = probe(replace(ONE_DOC, titled_documents=2))
    off = router.classify(question, named, TenantRouting(named_documents=False))
    assert off.route == "single_hop"
    assert off.named_documents  # still recorded: a later recalibration may turn the rule on again
    assert "turned that rule off" in off.reason
    # the threshold still decides the rest: with the rule off, a low enough one sends the same question multi_hop
    assert off.p_multi_hop is not None
    low = TenantRouting(multi_hop_threshold=off.p_multi_hop / 2, named_documents=False)
    assert router.classify(question, named, low).route == "multi_hop"
    # and a tenant with the rule on (the default) is routed as before
    assert router.classify(question, named, TenantRouting()).route == "multi_hop"


def test_stage_one_decides_before_the_named_documents_rule(router: KnowledgeRouter) -> None:
    weak = replace(NOTHING, titled_documents=2)
    assert router.classify("Hello! Thanks for the Pricing and Support pages", probe(weak)).route == "direct"


def test_one_named_document_leaves_the_decision_to_the_model(router: KnowledgeRouter) -> None:
    one = replace(ONE_DOC, titled_documents=1)
    decision = router.classify("When did the Lisbon office open?", probe(one))
    assert decision.route == "single_hop"
    assert decision.p_multi_hop is not None


def test_a_greeting_routes_direct_even_over_a_knowledge_base_that_matches_its_words(router: KnowledgeRouter) -> None:
    weak_match = replace(NOTHING, top_score=0.3, best_coverage=0.3, union_coverage=0.3)
    assert router.classify("Hello!", probe(weak_match)).route == "direct"


def test_an_empty_tenant_routes_direct_without_the_model(router: KnowledgeRouter) -> None:
    empty = probe_of("acme", "When did the Lisbon office open?", [], PROBE_DEPTH)
    decision = router.classify("When did the Lisbon office open?", empty)
    assert decision == RouteDecision(
        "direct", 1.0, "the tenant's knowledge base returned nothing for this question", "logistic", empty
    )


def test_the_reason_names_the_signals_it_used(router: KnowledgeRouter) -> None:
    decision = router.classify("How many people work where the Beacon team sits?", probe(TWO_DOCS))
    assert "p(retrieve)=" in decision.reason
    assert "p(multi_hop)=" in decision.reason
    assert "top score 0.50" in decision.reason
    assert "best document 0.55" in decision.reason
    assert "2 documents cover" in decision.reason
    p_retrieve = float(re.findall(r"p\(retrieve\)=(\d\.\d\d)", decision.reason)[0])
    p_multi = float(re.findall(r"p\(multi_hop\)=(\d\.\d\d)", decision.reason)[0])
    assert decision.confidence == pytest.approx(p_retrieve * p_multi, abs=0.01)


# --- the front router: one probe, reused ------------------------------------------------------------


class FakeRetriever:
    def __init__(self, passages: list[Passage]) -> None:
        self.passages = passages
        self.calls: list[tuple[str, str, int, list[float] | None]] = []

    async def search(
        self, tenant: str, query: str, k: int, *, visibility: Visibility, vector: list[float] | None = None
    ) -> list[Passage]:
        self.calls.append((tenant, query, k, vector))
        return self.passages[:k]


LISBON = Passage("lisbon:0", "lisbon", "Lisbon office", "The Lisbon office opened in 2016.", 0.6)
TRAVEL = Passage("travel:0", "travel", "Travel policy", "Economy class for short flights.", 0.2)


def scripted_llm(answer: str) -> tuple[LLMClient, ScriptedChatModel]:
    chat_model = ScriptedChatModel(responder=lambda _messages, _kwargs: answer)
    return LLMClient(chat_model, model_name="scripted-router", price=ModelPrice()), chat_model


async def test_auto_searches_the_tenant_once_with_the_query_vector(router: KnowledgeRouter) -> None:
    retriever = FakeRetriever([LISBON, TRAVEL])
    client, chat_model = scripted_llm("{}")
    front = FrontRouter(router, LLMRouter(client), "logistic", retriever)
    decision, calls = await front.decide(
        "When did the Lisbon office open?", "auto", [0.5, 0.5], "acme", visibility=Visibility.everything()
    )
    assert retriever.calls == [("acme", "When did the Lisbon office open?", PROBE_DEPTH, [0.5, 0.5])]
    assert decision.probe is not None
    assert decision.probe.tenant == "acme"
    assert decision.probe.passages == (LISBON, TRAVEL)
    assert decision.probe.top(4) == [LISBON, TRAVEL]
    assert calls == []
    assert chat_model.calls == []


async def test_the_probe_is_deep_enough_for_every_retrieving_route() -> None:
    from gateway.settings import RetrievalSettings

    retrieval = RetrievalSettings()
    assert max(retrieval.default_top_k, retrieval.multi_hop_top_k) <= PROBE_DEPTH


@pytest.mark.parametrize("mode", ["logistic", "llm"])
async def test_explicit_routes_override_without_any_model_call(router: KnowledgeRouter, mode: str) -> None:
    retriever = FakeRetriever([LISBON])
    client, chat_model = scripted_llm('{"route": "direct", "confidence": 0.9, "reason": "x"}')
    front = FrontRouter(router, LLMRouter(client), mode, retriever)
    direct, _ = await front.decide("Hello!", "direct", [0.0], "acme", visibility=Visibility.everything())
    assert direct == RouteDecision("direct", 1.0, "route requested by the caller", "override")
    assert retriever.calls == []  # nothing to retrieve: no search
    for requested in ("single_hop", "multi_hop"):
        decision, calls = await front.decide("Hello!", requested, [0.0], "acme", visibility=Visibility.everything())
        assert (decision.route, decision.reason, decision.classifier) == (
            requested,
            "route requested by the caller",
            "override",
        )
        assert decision.probe is not None
        assert decision.probe.passages == (LISBON,)  # for retrieval to reuse
        assert calls == []
    assert chat_model.calls == []


async def test_llm_mode_is_shown_the_same_signals(router: KnowledgeRouter) -> None:
    retriever = FakeRetriever([LISBON, TRAVEL])
    client, chat_model = scripted_llm('{"route":"single_hop","confidence":0.8,"reason":"one document"}')
    front = FrontRouter(router, LLMRouter(client), "llm", retriever)
    assert front.classifier_name == "llm"
    decision, calls = await front.decide(
        "When did the Lisbon office open?", "auto", [0.1], "acme", visibility=Visibility.everything()
    )
    assert (decision.route, decision.confidence, decision.reason, decision.classifier) == (
        "single_hop",
        0.8,
        "one document",
        "llm",
    )
    assert decision.probe is not None
    assert len(calls) == 1
    assert calls[0].node == "route_query"
    messages: list[BaseMessage] = chat_model.calls[0][0]
    last = str(messages[-1].content)
    assert "When did the Lisbon office open?" in last
    assert describe(decision.probe.signals) in last
    assert "best similarity 0.60" in last
    kwargs: dict[str, Any] = chat_model.calls[0][1]
    assert set(kwargs["response_format"]["json_schema"]["schema"]["properties"]) == {"route", "confidence", "reason"}


def test_the_llm_is_told_when_the_knowledge_base_is_empty() -> None:
    assert "nothing found" in describe(EMPTY_SIGNALS)


def test_the_llm_reads_the_titled_documents_the_default_router_reads() -> None:
    """The two routers are compared on the same evidence, the named-documents rule's count included."""
    assert "names 0 of them together by title" in describe(TWO_DOCS)
    assert "names 2 of them together by title" in describe(replace(TWO_DOCS, titled_documents=2))


@pytest.mark.parametrize("query", ["Thanks a lot!", "Translate 'good night' into French", "What is 17 + 4?"])
def test_a_retrieve_row_from_cues_already_found_is_the_row_found_from_the_question(query: str) -> None:
    cues = active_cues(query)
    assert set(cues) & set(DIRECT_CUES)  # the row has a cue column set
    np.testing.assert_array_equal(retrieve_row(query, ONE_DOC, cues), retrieve_row(query, ONE_DOC))
    assert not np.array_equal(retrieve_row(query, ONE_DOC, []), retrieve_row(query, ONE_DOC))  # the cues are read


def test_plain_cue_probabilities_are_numpys() -> None:
    """The request path scores a decision's few cue features in plain Python; numpy's design and softmax, which
    training and the artefacts use, must give the same probabilities on any row."""
    model = model_by_hand()
    rng = np.random.default_rng(3)
    for stage, width in ((model.retrieve, len(retrieve_row("q", ONE_DOC))), (model.spread, 1)):
        for row in rng.uniform(-0.5, 1.5, size=(200, width)).astype(np.float32):
            numpy_probs = stage.probabilities(stage.design(np.zeros((1, 0)), row[None, :])[0])
            np.testing.assert_allclose(stage.cue_probabilities(row.tolist()), numpy_probs, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="cue columns"):
        model.retrieve.cue_probabilities([0.5])


# --- the router version: what a tenant's threshold and route outcomes are tied to -----------------------------------


def test_the_router_version_names_the_spread_model_alike_whether_trained_here_or_loaded(tmp_path: Path) -> None:
    model = model_by_hand()
    assert re.fullmatch(r"[0-9a-f]{12}", model.version)
    model.spread.save(tmp_path / "spread.npz")
    model.retrieve.save(tmp_path / "retrieve.npz")
    loaded = KnowledgeModel(LogisticModel.load(tmp_path / "retrieve.npz"), LogisticModel.load(tmp_path / "spread.npz"))
    assert loaded.version == model.version  # every replica loading the release's artefact names it alike
    assert model_by_hand().version == model.version  # the same training, the same version


def test_a_retrained_spread_model_is_another_version_and_the_retrieve_model_is_not_part_of_it() -> None:
    model = model_by_hand()
    spread = model.spread
    nudged = replace(spread, intercept=spread.intercept + np.array([0.0, 1e-9]))
    assert KnowledgeModel(model.retrieve, nudged).version != model.version
    retrieve = model.retrieve
    other_retrieve = replace(retrieve, intercept=retrieve.intercept + 1.0)
    assert KnowledgeModel(other_retrieve, spread).version == model.version  # p(multi_hop) is the spread model's


async def test_decisions_with_a_probability_carry_the_router_version_and_the_llm_router_has_none(
    router: KnowledgeRouter,
) -> None:
    assert router.version == model_by_hand().version
    multi = router.classify("How many people work where the Beacon team sits?", probe(TWO_DOCS))
    assert (multi.p_multi_hop is not None, multi.router_version) == (True, router.version)
    direct = router.classify("Is the VPN mandatory abroad?", probe(NOTHING))
    assert (direct.p_multi_hop, direct.router_version) == (None, None)  # stage 1 decided: no p(multi_hop)
    client, _ = scripted_llm('{"route":"single_hop","confidence":0.8,"reason":"one document"}')
    assert FrontRouter(router, LLMRouter(client), "logistic", FakeRetriever([LISBON])).version == router.version
    llm = FrontRouter(router, LLMRouter(client), "llm", FakeRetriever([LISBON]))
    assert llm.version is None  # no threshold applies, no probability is recorded
    decision, _ = await llm.decide(
        "When did the Lisbon office open?", "auto", [0.1], "acme", visibility=Visibility.everything()
    )
    assert (decision.p_multi_hop, decision.router_version) == (None, None)
