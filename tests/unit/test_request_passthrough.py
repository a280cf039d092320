"""A request travels whole from the edge to the service: a new request field can never be dropped on the way.

The samples below give every ``QueryRequest`` field a non-default value, and the tests check they are
complete: adding a field fails here until it is sampled, and then fails if any layer drops it.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec
import pytest
from langgraph.types import StreamWriter

from gateway.access.identity import Reader
from gateway.chat.service import ChatService, PreparedChat
from gateway.guardrails.vault import Vault
from gateway.providers.llm import LLMClient
from gateway.query.schemas import QueryRequest, QueryResponse
from gateway.query.service import Admit, QueryService
from gateway.settings import ModelPrice
from pipelines.shared.followup import Turn
from pipelines.shared.visibility import Visibility
from tests.fakes.scripted_chat import ScriptedChatModel
from tests.scripted import query_response

# What a client sends: every field, none at its default (the query with whitespace the edge strips).
SAMPLE: dict[str, Any] = {
    "query": "  What does the VPN policy say?  ",
    "tenant": "acme",
    "route": "direct",
    "top_k": 7,
    "allow_escalation": False,
    "include_passages": True,
}


class Recorder:
    """Stands in for ``QueryService.answer``: keeps what reached the service."""

    def __init__(self) -> None:
        self.requests: list[QueryRequest] = []
        self.instructions: list[str] = []
        self.readers: list[Reader] = []

    async def answer(
        self,
        request: QueryRequest,
        admit: Admit | None = None,
        *,
        reader: Reader,
        vault: Vault | None = None,
        instructions: str = "",
        writer: StreamWriter | None = None,
    ) -> QueryResponse:
        self.requests.append(admit(request) if admit is not None else request)
        self.instructions.append(instructions)
        self.readers.append(reader)
        return query_response(route="direct")

    def screen(self, tenant: str, texts: list[str], vault: Vault) -> list[str]:
        """As ``QueryService.screen`` with no personal data found: the texts unchanged."""
        return texts


def test_the_sample_sets_every_field_to_a_non_default_value() -> None:
    fields = {field.name: field for field in msgspec.structs.fields(QueryRequest)}
    assert set(SAMPLE) == set(fields), "sample every QueryRequest field in SAMPLE"
    for name, field in fields.items():
        assert SAMPLE[name] != field.default, f"{name} is sampled at its default: a drop would go unnoticed"


async def test_query_endpoint_passes_every_field_to_the_service(
    make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    async with make_client() as (client, _):
        monkeypatch.setattr(client.app.state.query_service, "answer", recorder.answer)
        response = await client.post("/v1/query", json=SAMPLE)
    assert response.status_code == 200, response.text
    assert recorder.requests == [QueryRequest(**{**SAMPLE, "query": SAMPLE["query"].strip()})]
    # Who asks travels beside it: here nobody named, so what is open to the tenant.
    assert recorder.readers == [Reader(None, frozenset(), Visibility.tenant_only(unset_open=True), "none")]


async def test_a_rewritten_follow_up_keeps_every_other_field() -> None:
    recorder = Recorder()
    llm = LLMClient(
        ScriptedChatModel(responder=lambda *_: "What does the acme VPN policy say?"),
        model_name="scripted",
        price=ModelPrice(),
    )
    service = ChatService(cast(QueryService, recorder), llm)
    request = QueryRequest(**{**SAMPLE, "query": "And the policy?"})
    prepared = PreparedChat(
        id="chatcmpl-1",
        created=0,
        model="gateway-direct",
        query=request,
        history=[Turn(role="user", text="Tell me about the acme VPN."), Turn(role="assistant", text="It exists.")],
        include_usage=False,
        instructions="Answer in one sentence.",
    )
    reader = Reader("alice", frozenset({"staff"}), Visibility.of({"staff"}, unset_open=True), "token")
    answer = await service.answer(prepared, reader=reader)
    assert answer.rewrite is not None
    assert recorder.readers == [reader]
    assert recorder.requests == [msgspec.structs.replace(request, query="What does the acme VPN policy say?")]
    assert recorder.instructions == ["Answer in one sentence."]  # the client's system message travels too
