"""Resilience of one upstream, written once and layered around its calls: bounded retries and a circuit breaker.

The adapter (:mod:`gateway.providers.llm`) makes one *attempt* and translates whatever went wrong into
:mod:`gateway.errors`; :class:`ResilientUpstream` decides what to do about it. It never looks at the
upstream's own exception types, so any adapter can sit under it, the way httpx stacks transports.

- **Retries** (tenacity's loop, stop and wait policies): only faults a second attempt may fix
  (timeouts, refused connections, 408/409/429/5xx), full-jitter exponential backoff, or exactly the
  upstream's ``Retry-After`` when it sent one. Never past the call's deadline: an attempt gets only
  the time left, and a wait that would end after the deadline is not waited; the last error is
  raised at once instead (an upstream asking for 30 s when 5 s are left is a fast 503, not a 5 s hang).
- **Circuit breaker** per upstream: ``failure_threshold`` consecutive failed attempts open it; while
  open, calls fail at once with :class:`CircuitOpenError` (503 + ``Retry-After``) instead of queueing
  behind a dead upstream; after the cool-down one probe is let through (half-open) and its outcome
  closes or reopens the breaker. An upstream's 429 ``Retry-After`` lengthens the cool-down.

Why not a breaker library: pybreaker's async calls go through Tornado; its asyncio fork aiobreaker has
had no release since 1.1.0 (October 2020); asyncbreaker, the fork's rewrite, is a months-old
single-maintainer project. None knows a 429's Retry-After or a deadline, which is what this breaker
needs beyond the textbook. It is some sixty lines, asyncio's single thread making its state changes
atomic. Retries do use a library: tenacity (Apache-2.0, already installed as langchain-core's
dependency). Breaker state is per process, like the Redis backoff: each replica learns of an outage
from its own calls, within ``failure_threshold`` of them.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_random_exponential
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from gateway.errors import (
    CircuitOpenError,
    MalformedOutputError,
    ProviderError,
    ProviderRateLimitedError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    StreamInterruptedError,
)
from gateway.observability import BreakerState

T = TypeVar("T")
Clock = Callable[[], float]

logger = logging.getLogger(__name__)

# What the breaker tells a caller while its one half-open probe is still out: try again shortly.
PROBE_RETRY_AFTER_S = 1.0


@dataclass(frozen=True, slots=True)
class Fault:
    """What a failed attempt says about the upstream: ``reason`` labels metrics; ``retryable``: a second
    attempt may succeed; ``counts``: a failure for the breaker; ``fallback``: another upstream may answer."""

    reason: str
    retryable: bool
    counts: bool
    fallback: bool


def fault_of(exc: BaseException) -> Fault | None:
    """The fault of a translated upstream error; None when the upstream is healthy (it answered, if badly:
    malformed output, or a 4xx the caller or the configuration caused)."""
    if isinstance(exc, CircuitOpenError):
        return Fault("circuit_open", retryable=False, counts=False, fallback=True)
    if isinstance(exc, StreamInterruptedError):
        return Fault("stream_cut", retryable=False, counts=True, fallback=False)
    if isinstance(exc, ProviderRateLimitedError):
        return Fault("rate_limited", retryable=True, counts=True, fallback=True)
    if isinstance(exc, ProviderTimeoutError):
        return Fault("timeout", retryable=True, counts=True, fallback=True)
    if isinstance(exc, ProviderUnavailableError):
        return Fault("unavailable", retryable=True, counts=True, fallback=True)
    if isinstance(exc, ProviderError) and not isinstance(exc, MalformedOutputError):
        status = exc.extra.get("upstream_status")
        if isinstance(status, int) and (status >= 500 or status in (408, 409)):
            return Fault("http_5xx" if status >= 500 else f"http_{status}", retryable=True, counts=True, fallback=True)
    return None


class UpstreamEvents(Protocol):
    """Where retries, breaker transitions and fallbacks are reported (the app's ``Telemetry``)."""

    def upstream_retried(self, upstream: str, reason: str) -> None: ...

    def breaker_changed(self, upstream: str, state: BreakerState) -> None: ...

    def fell_back(self, from_upstream: str, to_upstream: str, reason: str) -> None: ...


class _NoUpstreamEvents:
    def upstream_retried(self, upstream: str, reason: str) -> None:
        return None

    def breaker_changed(self, upstream: str, state: BreakerState) -> None:
        return None

    def fell_back(self, from_upstream: str, to_upstream: str, reason: str) -> None:
        return None


NO_UPSTREAM_EVENTS: UpstreamEvents = _NoUpstreamEvents()


class CircuitBreaker:
    """Closed -> open after ``failure_threshold`` consecutive failures -> half-open after ``cooldown_s`` (one
    probe) -> closed on its success, open again on its failure. Any success closes it."""

    def __init__(
        self,
        upstream: str,
        *,
        failure_threshold: int = 5,
        cooldown_s: float = 30.0,
        provider: str = "llm",
        events: UpstreamEvents = NO_UPSTREAM_EVENTS,
        clock: Clock = time.monotonic,
    ) -> None:
        if failure_threshold < 1 or cooldown_s <= 0:
            raise ValueError("a breaker needs a failure threshold >= 1 and a positive cool-down")
        self.upstream = upstream
        self._threshold = failure_threshold
        self._cooldown_s = cooldown_s
        self.provider = provider
        self._events = events
        self._clock = clock
        self._state: BreakerState = "closed"
        self._failures = 0
        self._open_until = 0.0
        self._probing = False

    @property
    def state(self) -> BreakerState:
        """The state as of the last call (an open breaker turns half-open when a call arrives after the cool-down)."""
        return self._state

    def retry_after_s(self) -> float:
        """How long a caller refused now should wait."""
        if self._state == "open":
            return max(self._open_until - self._clock(), PROBE_RETRY_AFTER_S)
        return PROBE_RETRY_AFTER_S

    def admit(self) -> bool:
        """Let a call through (True if it is the half-open probe) or raise :class:`CircuitOpenError`."""
        if self._state == "open" and self._clock() >= self._open_until:
            self._transition("half_open")
        if self._state == "open" or (self._state == "half_open" and self._probing):
            raise CircuitOpenError(
                f"{self.provider} upstream {self.upstream!r} failed {self._threshold} times in a row; "
                "not calling it until its cool-down ends",
                provider=self.provider,
                retry_after_s=self.retry_after_s(),
                upstream=self.upstream,
            )
        if self._state == "half_open":
            self._probing = True
            return True
        return False

    def succeeded(self, probe: bool) -> None:
        self._failures = 0
        if probe:
            self._probing = False
        if self._state != "closed":
            self._transition("closed")

    def failed(self, probe: bool, retry_after_s: float | None = None) -> None:
        if probe:
            self._probing = False
        if self._state == "open":
            return  # a straggler admitted before the breaker opened
        self._failures += 1
        if self._state == "half_open" or self._failures >= self._threshold:
            self._open_until = self._clock() + max(self._cooldown_s, retry_after_s or 0.0)
            self._transition("open")

    def released(self, probe: bool) -> None:
        """The call ended without a verdict on the upstream (cancelled, or a 4xx): the probe slot is free again."""
        if probe:
            self._probing = False

    def _transition(self, state: BreakerState) -> None:
        previous, self._state = self._state, state
        log = logger.warning if state == "open" else logger.info
        log("%s upstream %r circuit %s -> %s", self.provider, self.upstream, previous, state)
        self._events.breaker_changed(self.upstream, state)


class _PastDeadline(stop_base):
    """Stop when the next attempt could not start before the deadline (the wait is computed first)."""

    def __init__(self, deadline: float, clock: Clock) -> None:
        self._deadline = deadline
        self._clock = clock

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self._clock() + (retry_state.upcoming_sleep or 0.0) >= self._deadline


class _RetryAfterOrJitter(wait_base):
    """The upstream's ``Retry-After`` when it sent one (or the jittered backoff, if longer), else full jitter."""

    def __init__(self, backoff_s: float, max_backoff_s: float) -> None:
        self._jitter = wait_random_exponential(multiplier=backoff_s, max=max(max_backoff_s, backoff_s))

    def __call__(self, retry_state: RetryCallState) -> float:
        jitter = float(self._jitter(retry_state))
        error = retry_state.outcome.exception() if retry_state.outcome is not None else None
        after = getattr(error, "retry_after_s", None)
        return max(float(after), jitter) if after is not None else jitter


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_retries`` retries after the first attempt; backoff from ``backoff_s`` doubling up to ``max_backoff_s``."""

    max_retries: int = 0
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0


class ResilientUpstream:
    """One upstream's breaker and retry policy around attempts the adapter makes: ``call(attempt, deadline)``."""

    def __init__(
        self,
        breaker: CircuitBreaker,
        policy: RetryPolicy | None = None,
        *,
        events: UpstreamEvents = NO_UPSTREAM_EVENTS,
        clock: Clock = time.monotonic,
    ) -> None:
        self.breaker = breaker
        self.policy = policy or RetryPolicy()
        self._events = events
        self._clock = clock

    @property
    def name(self) -> str:
        return self.breaker.upstream

    async def call(self, attempt: Callable[[float], Awaitable[T]], *, deadline: float) -> T:
        """``attempt(seconds_left)`` until it succeeds, a fault is not worth retrying, retries run out, or
        the deadline would pass; the last error is raised as it was.

        The attempt must end within the seconds it is given (the adapter knows what a timeout means for
        its protocol: a streamed answer cut short by one cannot be retried, for instance).

        The first attempt is made before tenacity is set up: almost every call succeeds at once, and tenacity's
        retry state and action chain cost ~13 µs of CPU per call hot, ~30-50 µs in a serving process. A
        first attempt that failed worth retrying is handed to tenacity as its first attempt's outcome (re-raised
        there, not made again), so the waits, retry reports and stops are tenacity's, as before."""
        first: BaseException | None = None
        try:
            return await self._once(attempt, deadline)
        except BaseException as exc:
            if self.policy.max_retries == 0 or not _retryable(exc):
                raise
            first = exc
        policy = self.policy
        retrying = AsyncRetrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(policy.max_retries + 1) | _PastDeadline(deadline, self._clock),
            wait=_RetryAfterOrJitter(policy.backoff_s, policy.max_backoff_s),
            before_sleep=self._report_retry,
            reraise=True,
        )
        async for round_ in retrying:
            with round_:
                if first is not None:
                    error, first = first, None
                    raise error  # the first attempt's failure, made above
                return await self._once(attempt, deadline)
        raise AssertionError("tenacity either returns, raises, or retries")  # pragma: no cover

    async def _once(self, attempt: Callable[[float], Awaitable[T]], deadline: float) -> T:
        remaining = deadline - self._clock()
        provider = self.breaker.provider
        if remaining <= 0:
            raise ProviderTimeoutError(f"{provider} call budget spent before calling {self.name!r}", provider=provider)
        probe = self.breaker.admit()
        try:
            result = await attempt(remaining)
        except BaseException as exc:
            fault = fault_of(exc)
            if fault is not None and fault.counts:
                self.breaker.failed(probe, getattr(exc, "retry_after_s", None))
            else:
                self.breaker.released(probe)
            raise
        self.breaker.succeeded(probe)
        return result

    def _report_retry(self, retry_state: RetryCallState) -> None:
        error = retry_state.outcome.exception() if retry_state.outcome is not None else None
        fault = fault_of(error) if error is not None else None
        reason = fault.reason if fault is not None else "other"
        logger.info(
            "retrying %s upstream %r after %s in %.2fs",
            self.breaker.provider,
            self.name,
            reason,
            retry_state.upcoming_sleep,
        )
        self._events.upstream_retried(self.name, reason)


def _retryable(exc: BaseException) -> bool:
    fault = fault_of(exc)
    return fault is not None and fault.retryable


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds from ``Retry-After`` (delta-seconds or an HTTP date, RFC 9110) or OpenAI's ``retry-after-ms``."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
