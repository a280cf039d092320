"""What pipelines need from the outside world, as protocols.

Pipelines depend on these narrow interfaces rather than on ``gateway`` so the request flows one
way (gateway -> routes -> pipelines) and graphs can be unit-tested with scripted clients.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from langchain_core.messages import BaseMessage
from pydantic import BaseModel

SchemaT = TypeVar("SchemaT", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrieved chunk; ``doc_id`` ties it back to the document a user uploaded."""

    chunk_id: str
    doc_id: str
    title: str
    text: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LLMCall:
    """Usage of one model call, kept per node so cost can be attributed per route and node."""

    node: str
    model: str
    input_tokens: int
    output_tokens: int
    duration_s: float
    cost_usd: float


@dataclass(frozen=True, slots=True)
class ChatReply:
    text: str
    call: LLMCall


class ChatClient(Protocol):
    """The only way pipelines talk to a language model."""

    async def chat(self, messages: list[BaseMessage], *, node: str, max_tokens: int | None = None) -> ChatReply: ...

    async def structured(
        self, messages: list[BaseMessage], schema: type[SchemaT], *, node: str
    ) -> tuple[SchemaT, LLMCall]: ...


class Retriever(Protocol):
    """Tenant-scoped search over the knowledge base."""

    async def search(self, tenant: str, query: str, k: int, *, vector: list[float] | None = None) -> list[Passage]:
        """``vector`` is the query's embedding when the caller already has it (the router does)."""
        ...
