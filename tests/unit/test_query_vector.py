"""A request's query vector begun as the question arrives: used only for the very text routing reads,
let go when nothing reads it, and begun only where the text never leaves the process."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.chat.service import ChatService, PreparedChat
from gateway.guardrails.service import Guardrails
from gateway.guardrails.vault import Vault
from gateway.knowledge.query_vector import QueryVector, StartedEmbedding
from gateway.query.schemas import QueryRequest
from gateway.query.service import QueryService
from gateway.settings import GuardrailSettings
from pipelines.shared.followup import Turn


class Embedder:
    """Records what it was asked to embed; ``gate`` holds every embedding until it is set."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.finished: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, text: str) -> list[float]:
        self.asked.append(text)
        await self.gate.wait()
        self.finished.append(text)
        return [float(len(text)), 1.0]


async def test_a_vector_begun_for_the_text_routing_reads_is_the_one_it_gets() -> None:
    embed = Embedder()
    vector = await QueryVector.begin(embed, "Where is the Osaka office?")
    assert embed.asked == ["Where is the Osaka office?"]  # under way before the caller's next step
    assert vector.early
    assert await vector.of("Where is the Osaka office?") == [26.0, 1.0]
    assert embed.asked == ["Where is the Osaka office?"]  # not embedded twice
    assert not vector.early
    vector.release()  # a read vector belongs to its reader: nothing to let go


async def test_a_question_screening_changed_is_embedded_again_as_it_now_reads() -> None:
    embed = Embedder()
    embed.gate.clear()
    vector = await QueryVector.begin(embed, "Mail bob@example.com the report")
    reading = asyncio.ensure_future(vector.of("Mail [EMAIL_1] the report"))
    await asyncio.sleep(0)
    embed.gate.set()
    assert await reading == [float(len("Mail [EMAIL_1] the report")), 1.0]
    assert embed.asked == ["Mail bob@example.com the report", "Mail [EMAIL_1] the report"]
    assert embed.finished == ["Mail [EMAIL_1] the report"]  # the unmasked text's embedding was let go


async def test_a_vector_nobody_read_is_let_go_and_a_late_reader_embeds_again() -> None:
    embed = Embedder()
    embed.gate.clear()
    vector = await QueryVector.begin(embed, "q")
    vector.release()  # an answer-cache hit: nothing read it
    embed.gate.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert embed.finished == []  # cancelled: it never finished, though nothing held it back any more
    assert await vector.of("q") == [1.0, 1.0]  # e.g. the cache's shielded computation, after its caller left
    assert embed.asked == ["q", "q"]
    assert embed.finished == ["q"]


async def test_an_embedding_error_nobody_reads_is_not_left_unretrieved(caplog: pytest.LogCaptureFixture) -> None:
    async def failing(text: str) -> list[float]:
        raise RuntimeError("encoder failed")

    vector = await QueryVector.begin(failing, "q")
    await asyncio.sleep(0)
    vector.release()
    await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text
    with pytest.raises(RuntimeError, match="encoder failed"):  # a reader embeds again and sees the error itself
        await vector.of("q")


class Knowledge:
    """A knowledge base whose embeddings start only through a task (``begin_query`` None: a remote model)."""

    def __init__(self, embed: Embedder) -> None:
        self.embed_query = embed

    def begin_query(self, text: str) -> StartedEmbedding | None:
        return None


class Router:
    @staticmethod
    def reads_vector(requested: str) -> bool:
        return requested != "direct"


def service(embed: Embedder, *, early: bool, semantic: Any = None) -> QueryService:
    return QueryService(Knowledge(embed), Router(), None, semantic=semantic, early_vectors=early)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("early", "route", "semantic", "begun"),
    [
        (True, "auto", None, True),
        (True, "multi_hop", None, True),
        (True, "direct", None, False),  # a forced direct reads no vector
        (True, "direct", object(), True),  # unless the semantic cache reads it
        (False, "auto", None, False),  # a remote provider: the unscreened text must not leave the process
    ],
)
async def test_a_vector_is_begun_early_only_when_something_reads_it_and_it_stays_in_the_process(
    early: bool, route: str, semantic: Any, begun: bool
) -> None:
    embed = Embedder()
    vector = await service(embed, early=early, semantic=semantic).begin_vector("q", route)  # type: ignore[arg-type]
    assert vector.early is begun
    assert embed.asked == (["q"] if begun else [])
    vector.release()


async def test_the_screening_masks_before_routing_reads_even_when_the_raw_text_was_begun() -> None:
    """End to end through QueryService.screen: the vector routing reads is the masked text's."""
    embed = Embedder()
    queries = QueryService(
        Knowledge(embed),  # type: ignore[arg-type]
        Router(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        guard=Guardrails(GuardrailSettings()),
        early_vectors=True,
    )
    raw = "Please email alice@example.com about the offsite"
    vector = await queries.begin_vector(raw, "auto")
    screened = queries.screen("default", [raw], Vault())[0]
    assert screened != raw
    assert await vector.of(screened) == [float(len(screened)), 1.0]
    assert embed.asked == [raw, screened]


def chat_turn(question: str, history: list[Turn]) -> PreparedChat:
    return PreparedChat(
        id="chatcmpl-1", created=0, model="gateway-auto", query=QueryRequest(query=question), history=history,
        include_usage=False,
    )  # fmt: skip


async def test_a_chats_first_question_is_begun_as_it_arrives_and_a_follow_up_once_rewritten() -> None:
    """The chat handler begins a first question's vector before it reads the tenant's profile; a follow-up is routed
    as rewritten, so nothing is begun for its raw text."""
    embed = Embedder()
    chat = ChatService(service(embed, early=True), llm=None)  # type: ignore[arg-type]
    vector = await chat.begin_vector(chat_turn("Where is the Osaka office?", []))
    assert vector is not None
    assert vector.early
    assert embed.asked == ["Where is the Osaka office?"]
    vector.release()
    follow_up = chat_turn("And its phone number?", [Turn("user", "Where is the Osaka office?"), Turn("assistant", "B")])
    assert await chat.begin_vector(follow_up) is None
    assert embed.asked == ["Where is the Osaka office?"]
