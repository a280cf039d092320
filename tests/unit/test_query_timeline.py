"""What ``/v1/query`` says about where its time went (``timeline``), what the router read (``probe``) and, when
asked, what each citation points to (``passages``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

DOCS = [
    {"id": "k2", "title": "Kumo Carrier K2", "text": "The Kumo Carrier K2 lifts at most 150 kg of payload."},
    {"id": "vpn", "title": "VPN", "text": "Staff connect to the office VPN with the Kumo Connect app."},
]


@pytest.mark.parametrize("route", ["direct", "single_hop", "multi_hop"])
async def test_every_event_belongs_to_one_timed_step_in_order(make_client: Callable[..., Any], route: str) -> None:
    async with make_client() as (client, _):
        assert (await client.post("/v1/documents", json={"documents": DOCS})).status_code == 200
        body = (await client.post("/v1/query", json={"query": "How much can the K2 lift?", "route": route})).json()
        owned = [i for step in body["timeline"] for i in step["events"]]
        assert owned == list(range(len(body["events"])))
        starts = [step["start_ms"] for step in body["timeline"]]
        assert starts == sorted(starts)
        assert all(step["ms"] >= 0 for step in body["timeline"])
        last = body["timeline"][-1]
        assert last["start_ms"] + last["ms"] <= body["latency_ms"]
        assert body["passages"] is None  # only when asked


async def test_passages_are_numbered_as_the_answer_cites_them_and_the_probe_is_reported(
    make_client: Callable[..., Any],
) -> None:
    async with make_client() as (client, _):
        await client.post("/v1/documents", json={"documents": DOCS})
        asked = {"query": "How much can the K2 lift?", "route": "single_hop", "include_passages": True}
        body = (await client.post("/v1/query", json=asked)).json()
        assert "[1]" in body["answer"]
        assert [p["n"] for p in body["passages"]] == list(range(1, len(body["passages"]) + 1))
        assert body["passages"][0]["doc_id"] == "k2"
        assert "150 kg" in body["passages"][0]["text"]
        assert body["probe"]["signals"]["top_score"] > 0
        # the same question without passages is another cache entry: never served a body with them
        plain = (await client.post("/v1/query", json={**asked, "include_passages": False})).json()
        assert plain["passages"] is None
        again = (await client.post("/v1/query", json=asked)).json()
        assert again["cached"] is True
        assert again["passages"] == body["passages"]
