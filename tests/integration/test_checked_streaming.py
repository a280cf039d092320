"""Checked streaming end to end: a real HTTP upstream streams an answer whose third sentence the evidence does not
support; the gateway's client gets the others, each whole, and never the third, streamed or not, live or replayed
from the Redis cache."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec
import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.query.steps import StepEvent
from gateway.settings import Settings
from pipelines.shared.events import Withhold
from tests.fakes.openai_server import Answer, FakeOpenAI
from tests.integration.test_llm_faults import against, gateway
from tests.served_app import served_app

REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
DOCUMENT = (
    "The Kumo Carrier K9 is a delivery robot built by Kumo Robotics in Osaka. It carries loads of up to 40 kg on its "
    "flat cargo deck. Its battery lasts eight hours and recharges in ninety minutes. The K9 climbs kerbs and ramps "
    "with six rubber wheels."
)
SENTENCES = [
    "The Kumo Carrier K9 is a delivery robot built by Kumo Robotics in Osaka [1].",
    "It carries loads of up to 40 kg on its flat cargo deck [1].",
    "The K9 also flies over rivers and was designed by a team of astronauts on the Moon [1].",
    "Its battery lasts eight hours and recharges in ninety minutes [1].",
    "The K9 climbs kerbs and ramps with six rubber wheels [1].",
]
INVENTED = SENTENCES[2]
CHECKED = " ".join(s for s in SENTENCES if s != INVENTED)
QUESTION = "What is the Kumo Carrier K9 and what can it do?"
AGREEABLE = {"NextHop": {"found": "The K9 is a delivery robot", "next_query": ""}}


@pytest.fixture
def upstream() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(Answer(" ".join(SENTENCES)), structured=AGREEABLE) as server:
        yield server


def chat(model: str, stream: bool) -> dict[str, Any]:
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": QUESTION}]}


async def streamed(client: AsyncTestClient[Any], model: str) -> tuple[list[str], dict[str, Any]]:
    """The content chunks of a streamed answer, and the ``gateway`` object of its last chunk."""
    response = await client.post("/v1/chat/completions", json=chat(model, stream=True))
    assert response.status_code == 200
    payloads = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    chunks = [p["choices"][0]["delta"].get("content") for p in payloads if p.get("choices")]
    final = next(p["gateway"] for p in payloads if p.get("choices") and p["choices"][0]["finish_reason"])
    return [c for c in chunks if c], final


def withheld(gateway_info: dict[str, Any]) -> list[Withhold]:
    events = msgspec.convert(gateway_info["events"], list[StepEvent])
    return [e for e in events if isinstance(e, Withhold)]


async def ingest(client: AsyncTestClient[Any]) -> None:
    documents = {"documents": [{"id": "k9", "title": "Kumo Carrier K9", "text": DOCUMENT}]}
    assert (await client.post("/v1/documents", json=documents)).status_code == 200


@pytest.mark.parametrize("model", ["gateway-single-hop", "gateway-multi-hop"])
async def test_the_unsupported_third_sentence_never_reaches_the_client_streamed_or_not(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI, model: str
) -> None:
    async with gateway(against(settings, upstream), embeddings) as client:
        await ingest(client)
        chunks, info = await streamed(client, model)
        whole = await client.post("/v1/chat/completions", json=chat(model, stream=False))
    # Sentence by sentence, each whole with its citation; the third never, the later ones still.
    assert [c.strip() for c in chunks] == [s for s in SENTENCES if s != INVENTED]
    assert "astronauts" not in "".join(chunks)
    (held,) = withheld(info)
    assert (held.index, held.sentence, held.reason) == (2, INVENTED, "unsupported")
    assert {"astronauts", "moon"} <= set(held.missing)  # what the evidence lacks, named
    # The answer without streaming is the same text, and says the same about the third sentence.
    body = whole.json()
    assert body["choices"][0]["message"]["content"] == "".join(chunks) == CHECKED
    assert withheld(body["gateway"]) == withheld(info)
    assert info["route"] == body["gateway"]["route"] == model.removeprefix("gateway-").replace("-", "_")


async def test_a_cached_answer_replays_as_the_same_stream_and_an_abstention_is_not_kept(
    settings: Settings, embeddings: USEEmbeddings, upstream: FakeOpenAI, prefix: str
) -> None:
    cached = against(settings, upstream).replace(
        redis={"url": REDIS_TEST_URL}, cache={"enabled": True, "prefix": prefix}
    )
    async with gateway(cached, embeddings) as client:
        await ingest(client)
        first, first_info = await streamed(client, "gateway-single-hop")
        calls = upstream.calls
        again, again_info = await streamed(client, "gateway-single-hop")
        assert upstream.calls == calls  # the replay cost no model call
        # Every sentence withheld: an abstention, answered but not kept.
        upstream.default = Answer(INVENTED)
        body = {"model": "gateway-single-hop", "messages": [{"role": "user", "content": "Can the K9 fly?"}]}
        gone = [(await client.post("/v1/chat/completions", json=body)).json() for _ in range(2)]
    assert (first_info["cached"], again_info["cached"]) == (False, True)
    assert again == first  # the same chunks: one per checked sentence
    assert [g["gateway"]["abstained"] for g in gone] == [True, True]
    assert [g["gateway"]["cached"] for g in gone] == [False, False]


@asynccontextmanager
async def served(settings: Settings, embeddings: USEEmbeddings) -> AsyncIterator[str]:
    """The app behind a real uvicorn server in this event loop: a client that hangs up is a real disconnect, which
    the in-memory test client cannot make."""
    app = create_app(settings, ProviderOverrides(embeddings=embeddings))
    async with served_app(app) as url:
        yield url


async def test_an_abandoned_stream_is_finished_checked_and_stored_whole(
    settings: Settings, embeddings: USEEmbeddings, prefix: str
) -> None:
    """The client hangs up after the first sentence. The answer is not cut there: the shared computation goes on, its
    checked whole is stored, and the next asker (streamed or not) gets all of it, at the cost of the one generation."""
    slow = Answer(" ".join(SENTENCES), token_delay_s=0.02)
    with FakeOpenAI(slow, structured=AGREEABLE) as upstream:
        cached = against(settings, upstream).replace(
            redis={"url": REDIS_TEST_URL}, cache={"enabled": True, "prefix": prefix}
        )
        async with served(cached, embeddings) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            documents = {"documents": [{"id": "k9", "title": "Kumo Carrier K9", "text": DOCUMENT}]}
            assert (await client.post("/v1/documents", json=documents)).status_code == 200
            body = chat("gateway-single-hop", stream=True)
            received: list[str] = []
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                async for line in response.aiter_lines():
                    delta = json.loads(line[6:])["choices"][0]["delta"] if line.startswith("data: {") else {}
                    if delta.get("content"):
                        received.append(delta["content"])
                        break  # hang up after the first sentence
            whole = (await client.post("/v1/chat/completions", json=chat("gateway-single-hop", stream=False))).json()
            replay = await client.post("/v1/chat/completions", json=body)
    assert [c.strip() for c in received] == SENTENCES[:1]
    assert whole["choices"][0]["message"]["content"] == CHECKED  # whole, not the abandoned stream's first sentence
    assert withheld(whole["gateway"])[0].sentence == INVENTED
    replayed = [json.loads(line[6:]) for line in replay.text.splitlines() if line.startswith("data: {")]
    assert "".join(p["choices"][0]["delta"].get("content") or "" for p in replayed if p.get("choices")) == CHECKED
    assert next(p["gateway"]["cached"] for p in replayed if p.get("choices") and p["choices"][0]["finish_reason"])
    assert upstream.calls == 1  # the abandoned stream's generation is the one every later answer came from
