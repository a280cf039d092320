"""The resilience layer on its own: breaker transitions on a fake clock, fault classification, Retry-After
parsing, retries bounded by attempts and by the deadline, and the request deadline reaching LLM calls.
(End to end against a real HTTP upstream: tests/integration/test_llm_faults.py.)"""

from __future__ import annotations

import asyncio
import email.utils
import time
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.errors import (
    CircuitOpenError,
    MalformedOutputError,
    ProviderError,
    ProviderRateLimitedError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    StreamInterruptedError,
)
from gateway.overrides import ProviderOverrides
from gateway.providers.deadline import deadline_after, within
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.llm import LLMClient
from gateway.providers.resilience import (
    CircuitBreaker,
    ResilientUpstream,
    RetryPolicy,
    fault_of,
    parse_retry_after,
)
from gateway.settings import ModelPrice, Settings
from tests.fakes.scripted_chat import ScriptedChatModel


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Events:
    def __init__(self) -> None:
        self.log: list[tuple[str, ...]] = []

    def upstream_retried(self, upstream: str, reason: str) -> None:
        self.log.append(("retry", upstream, reason))

    def breaker_changed(self, upstream: str, state: str) -> None:
        self.log.append(("breaker", upstream, state))

    def fell_back(self, from_upstream: str, to_upstream: str, reason: str) -> None:
        self.log.append(("fallback", from_upstream, to_upstream, reason))


def unavailable() -> ProviderUnavailableError:
    return ProviderUnavailableError("down", provider="llm")


# --- breaker --------------------------------------------------------------------------------------


def test_breaker_opens_after_consecutive_failures_and_refuses_with_the_cooldown_left() -> None:
    clock, events = Clock(), Events()
    breaker = CircuitBreaker("primary", failure_threshold=3, cooldown_s=10, events=events, clock=clock)
    for _ in range(2):
        assert breaker.admit() is False
        breaker.failed(probe=False)
    assert breaker.state == "closed"
    breaker.admit()
    breaker.failed(probe=False)
    assert breaker.state == "open"
    clock.now += 4
    with pytest.raises(CircuitOpenError) as info:
        breaker.admit()
    assert info.value.status_code == 503
    assert info.value.headers == {"Retry-After": "6"}
    assert info.value.extra["upstream"] == "primary"
    assert events.log == [("breaker", "primary", "open")]


def test_a_success_resets_the_count_of_consecutive_failures() -> None:
    breaker = CircuitBreaker("primary", failure_threshold=2, cooldown_s=10, clock=Clock())
    breaker.failed(probe=False)
    breaker.succeeded(probe=False)
    breaker.failed(probe=False)
    assert breaker.state == "closed"


def test_half_open_lets_one_probe_through_and_its_success_closes() -> None:
    clock, events = Clock(), Events()
    breaker = CircuitBreaker("primary", failure_threshold=1, cooldown_s=5, events=events, clock=clock)
    breaker.failed(probe=False)
    clock.now += 5
    assert breaker.admit() is True  # the probe
    with pytest.raises(CircuitOpenError) as info:
        breaker.admit()  # a second caller while the probe is out
    assert info.value.headers == {"Retry-After": "1"}
    breaker.succeeded(probe=True)
    assert breaker.state == "closed"
    assert breaker.admit() is False
    assert [state for *_, state in events.log] == ["open", "half_open", "closed"]


def probing() -> CircuitBreaker:
    """A breaker that opened (one failure), waited out its 5 s cool-down and let its probe through."""
    clock = Clock()
    breaker = CircuitBreaker("primary", failure_threshold=1, cooldown_s=5, clock=clock)
    breaker.failed(probe=False)
    clock.now += 5
    assert breaker.admit() is True
    return breaker


def test_a_failed_probe_opens_again_for_a_full_cooldown() -> None:
    breaker = probing()
    breaker.failed(probe=True)
    assert breaker.state == "open"
    assert breaker.retry_after_s() == pytest.approx(5)


def test_a_probe_without_a_verdict_frees_the_slot() -> None:
    breaker = probing()
    breaker.released(probe=True)  # e.g. the caller went away
    assert breaker.admit() is True


def test_an_upstreams_retry_after_lengthens_the_cooldown() -> None:
    breaker = CircuitBreaker("primary", failure_threshold=1, cooldown_s=5, clock=Clock())
    breaker.failed(probe=False, retry_after_s=42)
    assert breaker.retry_after_s() == pytest.approx(42)


# --- faults and Retry-After -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ProviderTimeoutError("t", provider="llm"), ("timeout", True, True, True)),
        (unavailable(), ("unavailable", True, True, True)),
        (ProviderRateLimitedError("r", provider="llm", retry_after_s=3), ("rate_limited", True, True, True)),
        (ProviderError("5xx", provider="llm", upstream_status=502), ("http_5xx", True, True, True)),
        (ProviderError("408", provider="llm", upstream_status=408), ("http_408", True, True, True)),
        (CircuitOpenError("open", provider="llm", retry_after_s=3), ("circuit_open", False, False, True)),
        (StreamInterruptedError("cut", provider="llm"), ("stream_cut", False, True, False)),
    ],
)
def test_faults_are_classified(error: Exception, expected: tuple[str, bool, bool, bool]) -> None:
    fault = fault_of(error)
    assert fault is not None
    assert (fault.reason, fault.retryable, fault.counts, fault.fallback) == expected


@pytest.mark.parametrize(
    "error",
    [
        ProviderError("bad request", provider="llm", upstream_status=400),
        ProviderError("bad key", provider="llm", upstream_status=401),
        MalformedOutputError("not json", provider="llm"),
        ValueError("a bug"),
    ],
)
def test_a_healthy_upstreams_answers_are_no_fault(error: Exception) -> None:
    assert fault_of(error) is None


def test_retry_after_in_seconds_milliseconds_and_http_dates() -> None:
    now = time.time()
    assert parse_retry_after({"retry-after": "7"}) == 7
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=now) == pytest.approx(30, abs=1)
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 60, usegmt=True)}, now=now) == 0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


# --- retries --------------------------------------------------------------------------------------


def upstream(max_retries: int = 2, threshold: int = 10, events: Events | None = None) -> ResilientUpstream:
    recorder = events or Events()
    breaker = CircuitBreaker("primary", failure_threshold=threshold, cooldown_s=30, events=recorder)
    return ResilientUpstream(breaker, RetryPolicy(max_retries, 0.01, 0.02), events=recorder)


class Attempts:
    """Fails with the given errors in turn, then answers; records the seconds each attempt was given."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.given: list[float] = []

    async def __call__(self, seconds_left: float) -> str:
        self.given.append(seconds_left)
        if self.errors:
            raise self.errors.pop(0)
        return "answer"


async def test_retryable_faults_are_retried_and_reported_by_reason() -> None:
    events = Events()
    attempts = Attempts(unavailable(), ProviderError("5xx", provider="llm", upstream_status=503))
    assert await upstream(events=events).call(attempts, deadline=deadline_after(5)) == "answer"
    assert len(attempts.given) == 3
    assert attempts.given[0] > attempts.given[1] > attempts.given[2]  # each attempt gets only the time left
    assert events.log == [("retry", "primary", "unavailable"), ("retry", "primary", "http_5xx")]


async def test_retries_stop_after_max_retries_with_the_last_error() -> None:
    last = unavailable()
    attempts = Attempts(unavailable(), unavailable(), last)
    with pytest.raises(ProviderUnavailableError) as info:
        await upstream(max_retries=2).call(attempts, deadline=deadline_after(5))
    assert info.value is last


async def test_without_retries_a_retryable_failure_is_raised_as_it_was_and_not_reported() -> None:
    events = Events()
    first = unavailable()
    attempts = Attempts(first)
    with pytest.raises(ProviderUnavailableError) as info:
        await upstream(max_retries=0, events=events).call(attempts, deadline=deadline_after(5))
    assert info.value is first
    assert len(attempts.given) == 1
    assert events.log == []


async def test_a_client_error_is_not_retried_and_does_not_count_against_the_breaker() -> None:
    resilient = upstream(threshold=1)
    with pytest.raises(ProviderError):
        await resilient.call(
            Attempts(ProviderError("400", provider="llm", upstream_status=400)), deadline=deadline_after(5)
        )
    assert resilient.breaker.state == "closed"


async def test_a_retry_after_past_the_deadline_is_not_waited_for() -> None:
    limited = ProviderRateLimitedError("429", provider="llm", retry_after_s=30)
    attempts = Attempts(limited)
    started = time.monotonic()
    with pytest.raises(ProviderRateLimitedError) as info:
        await upstream().call(attempts, deadline=deadline_after(2))
    assert time.monotonic() - started < 0.5
    assert info.value is limited
    assert info.value.headers == {"Retry-After": "30"}
    assert len(attempts.given) == 1


async def test_a_retry_after_within_the_deadline_is_waited_for() -> None:
    attempts = Attempts(ProviderRateLimitedError("429", provider="llm", retry_after_s=0.3))
    started = time.monotonic()
    assert await upstream().call(attempts, deadline=deadline_after(2)) == "answer"
    assert time.monotonic() - started >= 0.3


async def test_a_spent_budget_makes_no_attempt() -> None:
    attempts = Attempts()
    with pytest.raises(ProviderTimeoutError):
        await upstream().call(attempts, deadline=time.monotonic() - 1)
    assert attempts.given == []


async def test_an_open_breaker_stops_the_retries() -> None:
    resilient = upstream(max_retries=5, threshold=2)
    attempts = Attempts(unavailable(), unavailable(), unavailable())
    with pytest.raises(CircuitOpenError):
        await resilient.call(attempts, deadline=deadline_after(5))
    assert len(attempts.given) == 2


# --- the request deadline -------------------------------------------------------------------------


def test_nested_deadlines_only_shorten() -> None:
    with within(10) as outer:
        with within(100) as inner:
            assert inner == outer
            assert deadline_after(50) == outer
        with within(1) as shorter:
            assert shorter < outer
    assert deadline_after(5) == pytest.approx(time.monotonic() + 5, abs=0.1)


class SlowModel(ScriptedChatModel):
    """Answers after ``delay`` seconds (asyncio), like an upstream that hangs."""

    delay: float = 5.0

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(self.delay)
        return await super()._agenerate(messages, *args, **kwargs)


async def test_the_request_deadline_bounds_an_llm_call_without_its_own_timeout() -> None:
    client = LLMClient(SlowModel(responder=lambda _m, _k: "late"), model_name="slow", price=ModelPrice())
    started = time.monotonic()
    with within(0.3), pytest.raises(ProviderTimeoutError):
        await client.chat([HumanMessage("hi")], node="generate")
    assert time.monotonic() - started < 1.0


async def test_a_multi_hop_requests_llm_calls_end_by_the_corrective_budget(
    settings: Settings, embeddings: USEEmbeddings
) -> None:
    """GATEWAY_BUDGET_MAX_SECONDS is the request's deadline on the multi_hop route: a hanging model costs
    the budget, not the (much longer) per-call timeout."""
    model = SlowModel(responder=lambda _m, _k: "late", delay=30.0)
    budget = settings.replace(corrective={"max_seconds": 0.5}, llm_endpoint={"timeout_s": 60.0})
    app = create_app(budget, ProviderOverrides(chat_model=model, embeddings=embeddings))
    async with AsyncTestClient(app) as client:
        started = time.monotonic()
        response = await client.post("/v1/query", json={"query": "Who founded the company?", "route": "multi_hop"})
        took = time.monotonic() - started
    assert response.status_code == 504
    assert response.json()["title"] == "Upstream provider timed out"
    assert took < 3.0
