"""Helpers for scripted models: tell structured calls apart and answer them per schema."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec

from gateway.query.schemas import QueryResponse, Usage
from gateway.query.steps import StepEvent


def events(payload: dict[str, Any]) -> list[StepEvent]:
    """The typed events of a JSON response (``/v1/query``'s body, or a chat completion's ``gateway`` object)."""
    return msgspec.convert(payload["events"], list[StepEvent])


def schema_name(kwargs: dict[str, Any]) -> str | None:
    """The JSON schema a structured call asked for (``Grade``, ``RouteChoice``, ...), else None."""
    response_format = kwargs.get("response_format")
    if not isinstance(response_format, dict):
        return None
    name = response_format.get("json_schema", {}).get("name")
    return str(name) if name else None


AGREEABLE: dict[str, dict[str, Any]] = {
    "Grade": {"fact": "none", "relevant": True},
    "GroundednessCheck": {"unsupported_claims": []},
    "UsefulnessCheck": {"useful": True, "missing": ""},
    "RouteChoice": {"route": "single_hop", "confidence": 0.8, "reason": "scripted"},
    "JudgeVerdict": {"score": 0.5, "reason": "scripted"},
    "NextHop": {"found": "", "next_query": ""},  # the evidence suffices: no further hop
}


def structured_reply(kwargs: dict[str, Any], overrides: dict[str, dict[str, Any]] | None = None) -> str | None:
    """JSON for a structured call (agreeable defaults, per-schema overrides), None for free text."""
    name = schema_name(kwargs)
    if name is None:
        return None
    return json.dumps({**AGREEABLE, **(overrides or {})}[name])


def answer_with_first_passage(messages: list[Any], _: dict[str, Any]) -> str:
    """A scripted generator that answers with the first context passage, so a test sees what retrieval handed over."""
    prompt = str(messages[-1].content)
    if "Context passages" not in prompt:
        return "hello"
    first = prompt.split("[1] ", 1)[1].split("\n\n", 1)[0]
    return first.split(") ", 1)[1] + " [1]"


def query_response(
    text: str = "a", route: str = "single_hop", *, abstained: bool = False, llm_calls: int = 1
) -> QueryResponse:
    """A complete ``QueryResponse`` for cache tests."""
    return QueryResponse(
        answer=text,
        route=route,
        route_confidence=0.9,
        route_reason="test",
        sources=[],
        cached=False,
        usage=Usage(llm_calls=llm_calls, input_tokens=10 * llm_calls, output_tokens=5 * llm_calls, cost_usd=0.0),
        latency_ms=12.5,
        steps=["retrieve", "generate"],
        classifier="logistic",
        classified_route=route,
        abstained=abstained,
        evidence=[],
        stop_reason=None,
        escalated_from=None,
    )


class CountedCompute:
    """A cache computation that counts its calls and can be slow (for stampede tests)."""

    def __init__(self, text: str = "computed", route: str = "single_hop", delay_s: float = 0.0) -> None:
        self.calls = 0
        self.text, self.route, self.delay_s = text, route, delay_s

    async def __call__(self) -> QueryResponse:
        self.calls += 1
        await asyncio.sleep(self.delay_s)
        return query_response(f"{self.text} #{self.calls}", self.route)
