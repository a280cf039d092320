"""Graphs and the route table with a scripted model and the in-memory store."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from gateway.knowledge.chunking import Chunker
from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.llm import LLMClient
from gateway.settings import ModelPrice
from pipelines.direct.graph import build_graph as build_direct_graph
from pipelines.direct.graph import run as run_direct
from pipelines.direct.state import DirectContext, DirectState
from pipelines.shared.events import AnswerText, Assess, Evaluate, Generate, Retrieve, Stop, Withhold
from pipelines.shared.visibility import Visibility
from routes.table import RouteTable
from tests.fakes.memory_store import InMemoryVectorStore
from tests.fakes.scripted_chat import ScriptedChatModel
from tests.scripted import structured_reply
from tests.unit.corrective_support import build_route_table

DOCS = [
    NewDocument(id="k2", title="Kumo Carrier K2", text="The Kumo Carrier K2 has a maximum payload of 150 kg."),
    NewDocument(id="vpn", title="VPN policy", text="The VPN policy was last updated on 1 February 2024."),
]


def cite_first(messages: list[BaseMessage], kwargs: dict[str, Any]) -> str:
    structured = structured_reply(kwargs)
    if structured is not None:
        return structured
    if "Context passages" in str(messages[1].content if len(messages) > 1 else messages[-1].content):
        return "The maximum payload is 150 kg [1]."
    return "Hi! I am the assistant."


async def make_table(
    embeddings: USEEmbeddings, responder: Any = cite_first
) -> tuple[RouteTable, ScriptedChatModel, KnowledgeBase]:
    model = ScriptedChatModel(responder=responder)
    llm = LLMClient(model, model_name="scripted", price=ModelPrice(input=1.0, output=2.0))
    knowledge = KnowledgeBase(embeddings, InMemoryVectorStore(), Chunker(500, 50))
    await knowledge.ingest("acme", DOCS)
    return build_route_table(llm, knowledge), model, knowledge


async def test_direct_route_runs_one_node_and_no_retrieval(embeddings: USEEmbeddings) -> None:
    table, model, _ = await make_table(embeddings)
    result = await table.run(
        "direct", query="hello", tenant="acme", top_k=None, query_vector=None, visibility=Visibility.everything()
    )
    assert result.events == [Generate(mode="direct")]
    assert result.sources == []
    assert result.answer == "Hi! I am the assistant."
    assert len(model.calls) == 1
    assert "Context passages" not in str(model.calls[0][0][-1].content)
    assert [c.node for c in result.llm_calls] == ["answer_directly"]
    assert result.llm_calls[0].cost_usd > 0
    # The run's one timed step owns its one event, as a graph node's task does on the other routes.
    assert [(step.name, step.events) for step in result.steps] == [("direct", 1)]
    assert result.steps[0].started <= result.steps[0].ended


async def test_the_direct_node_run_alone_ends_in_the_state_the_one_node_graph_ends_in() -> None:
    """The route table runs ``answer_directly`` without LangGraph's loop: same final state, same model call."""
    states, prompts = [], []
    for through_graph in (True, False):
        model = ScriptedChatModel(responder=cite_first)
        context = DirectContext(llm=LLMClient(model, model_name="scripted", price=ModelPrice(input=1.0, output=2.0)))
        if through_graph:
            state = DirectState(
                **await build_direct_graph().ainvoke({"query": "hello", "tenant": "acme"}, context=context)
            )
        else:
            state = await run_direct("hello", "acme", context)
        states.append(state)
        prompts.append([m.content for m in model.calls[0][0]])
    graph, alone = states
    assert alone.answer == graph.answer == "Hi! I am the assistant."
    assert alone.events == graph.events == [Generate(mode="direct")]
    assert (alone.sources, alone.abstained, alone.query, alone.tenant) == (
        graph.sources,
        graph.abstained,
        "hello",
        "acme",
    )
    assert [(c.node, c.input_tokens, c.output_tokens) for c in alone.llm_calls] == [
        (c.node, c.input_tokens, c.output_tokens) for c in graph.llm_calls
    ]
    assert prompts[0] == prompts[1]


async def test_a_live_direct_run_writes_what_the_one_node_graphs_custom_stream_carries() -> None:
    """A streamed request gets the answer's text from the bypass as it would from the graph's ``custom`` stream."""
    chunks = []
    for through_graph in (True, False):
        model = ScriptedChatModel(responder=cite_first)
        llm = LLMClient(model, model_name="scripted", price=ModelPrice(input=1.0, output=2.0))
        context = DirectContext(llm=llm, live=True)
        written: list[object] = []
        if through_graph:
            initial = {"query": "hello", "tenant": "acme"}
            async for chunk in build_direct_graph().astream(initial, context=context, stream_mode="custom"):
                written.append(chunk)
        else:
            await run_direct("hello", "acme", context, written.append)
        chunks.append(written)
    graph, alone = chunks
    assert len(alone) > 1  # token by token, not the whole answer at the end
    assert alone == graph
    assert "".join(chunk.text for chunk in alone if isinstance(chunk, AnswerText)) == "Hi! I am the assistant."


async def test_single_hop_retrieves_then_answers_with_the_cited_document(embeddings: USEEmbeddings) -> None:
    table, model, _ = await make_table(embeddings)
    result = await table.run(
        "single_hop",
        query="What is the maximum payload of the K2?",
        tenant="acme",
        top_k=None,
        query_vector=None,
        visibility=Visibility.everything(),
    )
    assert result.events == [Retrieve(k=4, found=2), Assess(verdict="correct"), Generate()]
    assert not result.abstained
    assert [p.doc_id for p in result.sources] == ["k2"]
    prompt = str(model.calls[0][0][-1].content)
    assert "[1] (Kumo Carrier K2)" in prompt  # best passage first, numbered for citation


async def test_single_hop_in_an_empty_tenant_abstains_without_a_model_call(embeddings: USEEmbeddings) -> None:
    table, model, _ = await make_table(embeddings)
    result = await table.run(
        "single_hop",
        query="What is the payload?",
        tenant="empty",
        top_k=None,
        query_vector=None,
        visibility=Visibility.everything(),
    )
    assert result.abstained
    assert result.llm_calls == []
    assert model.calls == []
    assert result.events == [
        Retrieve(k=4, found=0),
        Assess(verdict="incorrect"),
        Generate(abstention="no passage above relevance 0.18 (best 0.00)"),
    ]


async def test_unsupported_answer_is_replaced_by_an_abstention(embeddings: USEEmbeddings) -> None:
    def invent(messages: list[BaseMessage], _: dict[str, Any]) -> str:
        return "The payload is 900 kg [1]."

    table, _, _ = await make_table(embeddings, invent)
    result = await table.run(
        "single_hop",
        query="What is the K2 payload?",
        tenant="acme",
        top_k=2,
        query_vector=None,
        visibility=Visibility.everything(),
    )
    assert result.abstained
    assert result.sources == []
    generated, held = result.events[-2:]
    assert isinstance(generated, Generate)
    assert generated.abstention == "unsupported by passages: 900"
    assert held == Withhold(index=0, sentence="The payload is 900 kg [1].", reason="unsupported", missing=("900",))
    assert len(result.llm_calls) == 1  # the call was made and is still accounted for


@pytest.mark.parametrize(("requested", "expected"), [(None, 4), (2, 2), (50, 6)])
async def test_top_k_is_requested_or_default_and_capped(
    embeddings: USEEmbeddings, requested: int | None, expected: int
) -> None:
    table, _, _ = await make_table(embeddings)
    result = await table.run(
        "single_hop",
        query="payload",
        tenant="acme",
        top_k=requested,
        query_vector=None,
        visibility=Visibility.everything(),
    )
    retrieved = result.events[0]
    assert isinstance(retrieved, Retrieve)
    assert retrieved.k == expected


async def test_multi_hop_runs_the_corrective_pipeline(embeddings: USEEmbeddings) -> None:
    table, _, _ = await make_table(embeddings)
    result = await table.run(
        "multi_hop",
        query="Which came first, the K2 or the VPN policy?",
        tenant="acme",
        top_k=None,
        query_vector=None,
        visibility=Visibility.everything(),
    )
    assert result.route == "multi_hop"
    retrieved, evaluated = result.events[:2]
    assert isinstance(retrieved, Retrieve)
    assert retrieved.k == 5
    assert isinstance(evaluated, Evaluate)
    assert result.stop_reason is not None
    assert result.events[-1] == Stop(reason=result.stop_reason)


async def test_precomputed_query_vector_is_used_for_retrieval(embeddings: USEEmbeddings) -> None:
    table, model, _ = await make_table(embeddings)
    vpn_vector = embeddings.embed_query("VPN policy update date")
    # "lifting capacity" shares no word with any document, so the keyword half of hybrid search finds nothing
    # and the dense half decides; embedded, the text would find the K2 document.
    result = await table.run(
        "single_hop",
        query="lifting capacity",
        tenant="acme",
        top_k=1,
        query_vector=vpn_vector,
        allow_escalation=False,
        visibility=Visibility.everything(),
    )
    assert result.events[0] == Retrieve(k=1, found=1)
    # the vector, not the text, chose the passage: the VPN document was the one given to the model
    assert [p.doc_id for p in result.context] == ["vpn"]
    (prompt,) = [str(messages[-1].content) for messages, _ in model.calls]
    assert "[1] (VPN policy)" in prompt
    assert "Kumo Carrier K2" not in prompt


async def test_reingesting_a_document_replaces_its_chunks(embeddings: USEEmbeddings) -> None:
    _, _, knowledge = await make_table(embeddings)
    changed = NewDocument(id="k2", title="Kumo Carrier K2", text="The K2 now carries up to 180 kg. " * 40)
    result = await knowledge.ingest("acme", [changed])
    assert result.upserted == 1
    assert result.chunks > 1
    passages = await knowledge.search("acme", "K2 payload", 10, visibility=Visibility.everything())
    k2_texts = [p.text for p in passages if p.doc_id == "k2"]
    assert k2_texts
    assert all("150" not in text for text in k2_texts)
