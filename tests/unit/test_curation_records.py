"""Which answers are recorded (from the typed events), and that recording never costs the answer path."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from pydantic import SecretStr

from gateway.curation.records import AnswerRecorder, assess
from gateway.curation.store import CurationStore
from gateway.query.schemas import QueryRequest, Source
from gateway.query.steps import StepEvent
from gateway.settings import Settings
from pipelines.shared.events import Assess, Check, Evaluate, Generate, Retrieve
from tests.scripted import query_response


def _response(events: list[StepEvent], *, abstained: bool = False, response_id: str = "resp_1"):  # type: ignore[no-untyped-def]
    base = query_response("answer", abstained=abstained)
    return msgspec.structs.replace(
        base,
        events=events,
        response_id=response_id,
        evidence=[Source("d1", "Doc", 0.5)],
        sources=[Source("d1", "Doc", 0.5)],
    )


@pytest.mark.parametrize(
    ("events", "abstained", "reasons"),
    [
        ([Retrieve(k=4, found=4), Assess(verdict="correct"), Generate()], False, []),
        ([Retrieve(k=4, found=0), Generate(abstention="no passages")], True, ["abstained"]),
        ([Retrieve(k=4, found=4), Assess(verdict="ambiguous"), Generate()], False, ["ambiguous_evidence"]),
        (
            [
                Evaluate(verdict="incorrect", kept=0, total=8, graded=2),
                Evaluate(verdict="correct", kept=2, total=8, graded=0),
            ],
            False,
            [],
        ),
        (
            [
                Evaluate(verdict="correct", kept=2, total=8, graded=0),
                Check(critic="grounded", outcome="failed", claims=("x",)),
            ],
            False,
            ["draft_rejected"],
        ),
        ([Check(critic="useful", outcome="failed", note="misses the date")], False, []),
    ],
)
def test_answers_that_need_a_human_are_told_by_their_events(
    events: list[StepEvent], abstained: bool, reasons: list[str]
) -> None:
    assert assess(_response(events, abstained=abstained)).reasons == reasons


def _down_store() -> CurationStore:
    """A store whose database is down: nothing listens on port 1, so every write fails as a real one would."""
    return CurationStore.open("postgresql+asyncpg://postgres@127.0.0.1:1/curation")


async def _embed(text: str) -> list[float]:
    return [1.0, 0.0]


async def test_a_database_outage_counts_drops_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    store = _down_store()
    counts: list[str] = []
    recorder = AnswerRecorder(store, _embed, queue_size=10, recent=10, count=counts.append)
    writer = asyncio.create_task(recorder.run())
    request = QueryRequest(query="where is the office?", tenant="acme")
    with caplog.at_level(logging.WARNING, logger="gateway.curation.records"):
        for n in range(3):
            recorder.observe(request, _response([Generate(abstention="none")], abstained=True, response_id=f"r{n}"))
        recorder.observe(request, _response([Assess(verdict="correct")], response_id="ok"))
        await recorder.drain()
    writer.cancel()
    await store.close()
    assert sorted(counts) == ["counted", "dropped", "dropped", "dropped"]
    assert len([r for r in caplog.records if "curation store write failed" in r.message]) == 1


async def test_a_full_queue_drops_instead_of_waiting() -> None:
    counts: list[str] = []
    recorder = AnswerRecorder(_down_store(), _embed, queue_size=1, recent=0, count=counts.append)  # no writer running
    request = QueryRequest(query="q", tenant="acme")
    for n in range(3):
        recorder.observe(request, _response([], abstained=True, response_id=f"r{n}"))
    assert counts == ["dropped", "dropped"]


def test_recent_answers_are_bounded_and_found_by_either_id() -> None:
    recorder = AnswerRecorder(_down_store(), _embed, queue_size=10, recent=2, count=None)
    request = QueryRequest(query="q", tenant="acme")
    for n in range(3):
        response = msgspec.structs.replace(_response([], response_id=f"r{n}"), trace_id=f"{n:032x}")
        recorder.observe(request, response)
    assert recorder.recent(response_id="r0", trace_id=None) is None
    found = recorder.recent(response_id=None, trace_id=f"{2:032x}")
    assert found is not None
    assert found.response.response_id == "r2"


async def test_a_database_down_at_start_up_does_not_stop_answers(
    make_client: Callable[..., Any], settings: Settings
) -> None:
    down = settings.replace(curation={"database_url": SecretStr("postgresql+asyncpg://postgres@127.0.0.1:1/curation")})
    async with make_client(settings_override=down) as (client, _):
        answered = await client.post("/v1/query", json={"query": "hello there", "route": "direct"})
        assert answered.status_code == 200
        rated = await client.post("/v1/feedback", json={"response_id": answered.json()["response_id"], "rating": "up"})
        assert rated.status_code == 503
        assert rated.json()["provider"] == "curation_store"
