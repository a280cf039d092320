"""What pipelines need from the outside world, as protocols.

Pipelines depend on these narrow interfaces rather than on ``gateway`` so the request flows one
way (gateway -> routes -> pipelines) and graphs can be unit-tested with scripted clients.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from langchain_core.messages import BaseMessage
from pydantic import BaseModel

from pipelines.shared.visibility import Visibility

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


class StructuredOutputError(Exception):
    """A ``ChatClient.structured`` call got an answer that does not fit the schema.

    Declared here so pipelines can degrade a single judgement (treat a document as undecided)
    without depending on the gateway's error types; the gateway's adapter raises a subclass.
    ``call`` is the usage of the failed call, so it is still accounted for.
    """

    call: LLMCall | None = None


TextSink = Callable[[str], None]


class ChatClient(Protocol):
    """The only way pipelines talk to a language model."""

    async def chat(
        self, messages: list[BaseMessage], *, node: str, max_tokens: int | None = None, on_text: TextSink | None = None
    ) -> ChatReply:
        """``on_text``: the model is asked to stream, and gets each text delta as it arrives; the reply is the
        whole text either way. A stream that breaks after a delta was handed over is never retried: what was
        handed over may have reached a client."""
        ...

    async def structured(
        self, messages: list[BaseMessage], schema: type[SchemaT], *, node: str
    ) -> tuple[SchemaT, LLMCall]: ...


class Retriever(Protocol):
    """Tenant-scoped search over the knowledge base, over what one reader may see."""

    async def search(
        self, tenant: str, query: str, k: int, *, visibility: Visibility, vector: list[float] | None = None
    ) -> list[Passage]:
        """``vector`` is the query's embedding when the caller already has it (the router does). ``visibility``:
        the reader's; the search ranks only chunks it allows (a filter inside the search, never after its top
        ``k``), so a reader gets ``k`` passages they may read whatever others' documents outrank them. Required
        so that no retrieval of a request can forget whose it is."""
        ...


class WebSearch(Protocol):
    """CRAG's search-more step: the web (Tavily) in production, the tenant's own store offline."""

    name: str

    async def search(self, tenant: str, query: str, k: int, *, visibility: Visibility) -> list[Passage]:
        """Passages whose ``score`` is the cosine similarity to ``query``, like the retriever's. ``visibility``:
        the reader's, which the tenant's own store honours (the web is open to all and ignores it)."""
        ...


class Embedder(Protocol):
    async def embed_texts(self, texts: list[str]) -> list[list[float]]: ...
