"""The route table escalating an Incorrect single_hop retrieval to the corrective pipeline."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from gateway.knowledge.service import KnowledgeBase
from pipelines.shared import events as ev
from pipelines.shared.deps import Passage
from pipelines.shared.prompts import ABSTAIN_EN
from pipelines.shared.relevance import relevance
from pipelines.shared.visibility import Visibility
from routes.probe import probe_of
from routes.table import RouteTable
from tests.calibration_support import corrective_policy
from tests.fakes.scripted_chat import ScriptedChatModel
from tests.unit.corrective_support import (
    ANSWERED,
    HEAVY_QUESTION,
    K2_ANSWER,
    K2_FACT,
    K2_QUESTION,
    OFF_TOPIC,
    ROUTE_POLICY,
    TENANT,
    Script,
    build_route_table,
    doc_ids,
    make_llm,
    relevant,
    scores,
)


def make_table(
    knowledge: KnowledgeBase, script: Script, *, escalate: bool = True, recursion_limit: int = 40
) -> tuple[RouteTable, ScriptedChatModel]:
    llm, model = make_llm(script)
    route_policy = replace(ROUTE_POLICY, escalate_on_incorrect=escalate, recursion_limit=recursion_limit)
    return build_route_table(llm, knowledge, route_policy), model


ESCALATE = ev.Escalate(from_route="single_hop", to_route="multi_hop", reason="retrieval_incorrect")


def escalated(top_k: int) -> list[ev.PipelineEvent]:
    """The first events of an escalated request: single_hop's Incorrect retrieval, then the corrective pipeline's
    first retrieval, which keeps the caller's top_k."""
    retrieve = ev.Retrieve(k=top_k, found=top_k)
    return [retrieve, ev.Assess(verdict="incorrect"), ESCALATE, retrieve]


async def test_single_hop_with_incorrect_retrieval_escalates_to_the_corrective_pipeline(
    knowledge: KnowledgeBase, vpn_vector: list[float]
) -> None:
    # The caller's query vector points at the VPN document, so both single_hop and the corrective
    # pipeline's first round retrieve it (top_k=1) and find it irrelevant.
    policy = corrective_policy()
    (first,) = await knowledge.search(TENANT, HEAVY_QUESTION, 1, vector=vpn_vector, visibility=Visibility.everything())
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
    result = await table.run(
        "single_hop",
        query=HEAVY_QUESTION,
        tenant=TENANT,
        top_k=1,
        query_vector=vpn_vector,
        visibility=Visibility.everything(),
    )

    assert result.route == "multi_hop"
    assert result.escalated_from == "single_hop"
    assert result.events[:5] == [*escalated(1), ev.Evaluate(verdict="incorrect", kept=0, total=1, graded=0)]
    assert result.events[5:] == [
        ev.Rewrite(round=1, query=rewrite),
        ev.SearchMore(source="local", queries=2, new=1),
        ev.Evaluate(verdict="correct", kept=1, total=1, graded=0),
        ev.Refine(strips=1, passages=1),
        *ANSWERED,
    ]
    # single_hop made no call before escalating; everything after is the corrective pipeline's
    assert [c.node for c in result.llm_calls] == ["rewrite_query", "generate", "check_useful"]
    assert len(model.calls) == 3
    assert result.answer == answer
    assert doc_ids(result.sources) == ["k2"]
    assert result.stop_reason == "answered"
    assert not result.abstained
    # The waterfall: every event belongs to the step that added it, in order, and steps follow each other in time.
    owners = [step.name for step in result.steps for _ in range(step.events)]
    assert len(owners) == len(result.events)
    assert owners[:4] == ["retrieve", "assess_retrieval", "escalate", "retrieve"]
    assert owners[owners.index("escalate") + 1 :].count("generate") == 1
    assert all(a.ended <= b.started for a, b in zip(result.steps, result.steps[1:], strict=False))
    assert all(step.ended >= step.started for step in result.steps)


async def test_escalated_request_with_nothing_to_find_ends_without_evidence(knowledge: KnowledgeBase) -> None:
    table, _ = make_table(knowledge, Script(rewrites=["Sistine Chapel painter"]))
    result = await table.run(
        "single_hop", query=OFF_TOPIC, tenant=TENANT, top_k=2, query_vector=None, visibility=Visibility.everything()
    )
    assert result.route == "multi_hop"
    assert result.escalated_from == "single_hop"
    assert result.events[:4] == escalated(2)  # the caller's top_k is kept for the corrective run
    assert result.stop_reason == "no_evidence"
    assert result.abstained
    assert result.answer == ABSTAIN_EN


async def test_single_hop_does_not_escalate_when_escalation_is_not_allowed(knowledge: KnowledgeBase) -> None:
    table, model = make_table(knowledge, Script())
    result = await table.run(
        "single_hop",
        query=OFF_TOPIC,
        tenant=TENANT,
        top_k=None,
        query_vector=None,
        allow_escalation=False,
        visibility=Visibility.everything(),
    )
    assert result.route == "single_hop"
    assert result.escalated_from is None
    assert result.events[:2] == [ev.Retrieve(k=4, found=4), ev.Assess(verdict="incorrect")]
    (generated,) = result.events[2:]
    assert isinstance(generated, ev.Generate)
    assert (generated.abstention or "").startswith("no passage above relevance")
    assert not any(isinstance(e, ev.Escalate) for e in result.events)
    assert result.abstained
    assert result.stop_reason is None
    assert model.calls == []


async def test_single_hop_does_not_escalate_when_the_route_policy_forbids_it(knowledge: KnowledgeBase) -> None:
    table, _ = make_table(knowledge, Script(), escalate=False)
    result = await table.run(
        "single_hop", query=OFF_TOPIC, tenant=TENANT, top_k=None, query_vector=None, visibility=Visibility.everything()
    )
    assert result.route == "single_hop"
    assert result.escalated_from is None
    assert ESCALATE not in result.events


async def test_single_hop_in_an_empty_tenant_does_not_escalate(knowledge: KnowledgeBase) -> None:
    table, model = make_table(knowledge, Script())
    result = await table.run(
        "single_hop", query=OFF_TOPIC, tenant="empty", top_k=None, query_vector=None, visibility=Visibility.everything()
    )
    assert result.route == "single_hop"
    assert result.escalated_from is None
    assert result.events[:2] == [ev.Retrieve(k=4, found=0), ev.Assess(verdict="incorrect")]
    assert len(result.events) == 3
    assert result.abstained
    assert model.calls == []


async def test_single_hop_with_correct_retrieval_answers_without_escalating(knowledge: KnowledgeBase) -> None:
    table, _ = make_table(knowledge, Script())
    result = await table.run(
        "single_hop",
        query=K2_QUESTION,
        tenant=TENANT,
        top_k=None,
        query_vector=None,
        visibility=Visibility.everything(),
    )
    assert result.route == "single_hop"
    assert result.escalated_from is None
    assert result.events == [ev.Retrieve(k=4, found=4), ev.Assess(verdict="correct"), ev.Generate()]
    assert result.answer == K2_ANSWER


async def test_corrective_run_hitting_the_recursion_limit_is_reported_not_raised(knowledge: KnowledgeBase) -> None:
    table, _ = make_table(knowledge, Script(), recursion_limit=3)
    result = await table.run(
        "multi_hop", query=K2_QUESTION, tenant=TENANT, top_k=None, query_vector=None, visibility=Visibility.everything()
    )
    assert result.route == "multi_hop"
    assert result.stop_reason == "recursion_limit"
    assert result.events == [ev.Stop(reason="recursion_limit")]
    assert result.abstained
    assert result.sources == []


async def test_an_escalated_request_runs_the_corrective_pipeline_inside_its_budget_scope(
    knowledge: KnowledgeBase,
) -> None:
    """The gateway hands the table a scope that makes the corrective budget a deadline for every LLM call; an
    escalated request reaches the corrective pipeline by the table, so it must be inside that scope too."""
    entered: list[str] = []

    @contextmanager
    def scope() -> Iterator[None]:
        entered.append("corrective")
        yield

    llm, _ = make_llm(Script(rewrites=["Sistine Chapel painter"]))
    table = build_route_table(llm, knowledge, corrective_scope=scope)
    plain = await table.run(
        "single_hop", query=K2_QUESTION, tenant=TENANT, top_k=2, query_vector=None, visibility=Visibility.everything()
    )
    assert plain.escalated_from is None
    assert entered == []
    escalated_result = await table.run(
        "single_hop", query=OFF_TOPIC, tenant=TENANT, top_k=2, query_vector=None, visibility=Visibility.everything()
    )
    assert escalated_result.escalated_from == "single_hop"
    assert entered == ["corrective"]


async def test_the_routers_probe_serves_the_first_retrieval_so_the_store_is_searched_once(
    knowledge: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The router already searched the tenant's store (top 8) for its signals: single_hop's retrieval of the same
    query reuses those passages instead of searching again; without a probe it searches the store."""
    depth = knowledge.ranking_depth(8)  # the gateway's probe: a dense ranking deep enough for hybrid retrieval
    probe = probe_of(
        TENANT,
        K2_QUESTION,
        await knowledge.dense_search(TENANT, K2_QUESTION, depth, visibility=Visibility.everything()),
        depth,
        Visibility.everything(),
    )
    expected = await knowledge.search(TENANT, K2_QUESTION, 2, visibility=Visibility.everything())
    searched: list[tuple[str, int]] = []
    search = knowledge.search

    async def counting(
        tenant: str, query: str, k: int, *, visibility: Visibility, vector: list[float] | None = None
    ) -> list[Passage]:
        searched.append((query, k))
        return await search(tenant, query, k, visibility=visibility, vector=vector)

    monkeypatch.setattr(knowledge, "search", counting)
    table, _ = make_table(knowledge, Script())
    reused = await table.run(
        "single_hop",
        query=K2_QUESTION,
        tenant=TENANT,
        top_k=2,
        query_vector=None,
        probe=probe,
        visibility=Visibility.everything(),
    )
    assert searched == []
    assert reused.events[0] == ev.Retrieve(k=2, found=2)
    assert {p.chunk_id for p in reused.context} <= {p.chunk_id for p in expected}
    await table.run(
        "single_hop", query=K2_QUESTION, tenant=TENANT, top_k=2, query_vector=None, visibility=Visibility.everything()
    )
    assert searched == [(K2_QUESTION, 2)]
