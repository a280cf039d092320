"""The fault matrix: each upstream fault, injected by a real HTTP upstream, and what a client of the gateway gets.

    python -m tests.benchmarks.fault_matrix [--timeout 2] [--retries 2] [--failures 3] [--cooldown 1]

For every fault (:class:`tests.fakes.openai_server.FakeOpenAI` scripted per row) a fresh gateway
(production wiring: ChatOpenAI, the resilience layer, no scripted model) answers one direct-route
question, once without and once with a fallback upstream configured: HTTP status, the problem's
title (or, for streams, how the event stream ended), Retry-After, the time to answer and how many
calls each upstream received. Then the breaker's transitions over a scripted outage and recovery.
Loopback only; about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import json
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import Settings
from tests.fakes.openai_server import Answer, Behaviour, Cut, FakeOpenAI, Hang, Status

NORMAL = Answer("Fine.")


@dataclass(frozen=True)
class Fault:
    name: str
    script: tuple[Behaviour, ...] = ()
    default: Behaviour = NORMAL
    stream: bool = False
    refuse: bool = False
    warm_failures: int = 0  # requests sent first, to open the breaker


def faults(failures: int) -> list[Fault]:
    return [
        Fault("none (answers normally)"),
        Fault("429, Retry-After: 1, once", (Status(429, "1"),)),
        Fault("429, Retry-After: 30 (past the budget)", default=Status(429, "30")),
        Fault("429, Retry-After: HTTP date +1s, once", (Status(429, "@date+1"),)),
        Fault("500, 503 burst then answers", (Status(500), Status(503))),
        Fault("500 on every call", default=Status(500)),
        Fault("503 on every call", default=Status(503)),
        Fault("hangs past the timeout", default=Hang(60)),
        Fault("refuses connections", refuse=True),
        Fault("stream cut after 3 tokens", (Cut(3),), stream=True),
        Fault("stream cut before any token", (Cut(0),), stream=True),
        Fault(f"breaker open (after {failures} x 500)", default=Status(500), warm_failures=failures),
    ]


@dataclass
class Row:
    fault: str
    fallback: bool
    status: int
    outcome: str
    retry_after: str
    seconds: float
    primary_calls: int
    fallback_calls: int


def _settings(base: Settings, primary: FakeOpenAI, fallback: FakeOpenAI | None, args: argparse.Namespace) -> Settings:
    endpoint: dict[str, Any] = {
        "base_url": primary.base_url,
        "timeout_s": args.timeout,
        "max_retries": args.retries,
        "retry_backoff_s": 0.1,
        "retry_max_backoff_s": 0.5,
        "breaker_failures": args.failures,
        "breaker_cooldown_s": args.cooldown,
    }
    if fallback is not None:
        endpoint |= {"fallback_base_url": fallback.base_url, "fallback_model": "fallback-model"}
    return base.replace(llm_endpoint=endpoint, cache={"enabled": False})


def _expand(behaviour: Behaviour) -> Behaviour:
    """``@date+N``: an HTTP-date Retry-After N seconds from now (rendered when the row runs)."""
    if isinstance(behaviour, Status) and behaviour.retry_after and behaviour.retry_after.startswith("@date+"):
        seconds = float(behaviour.retry_after.removeprefix("@date+")) + 1  # one-second resolution
        return Status(behaviour.code, email.utils.formatdate(time.time() + seconds, usegmt=True))
    return behaviour


async def _ask(client: AsyncTestClient[Any], stream: bool) -> tuple[int, str, str]:
    if not stream:
        response = await client.post("/v1/query", json={"query": "hello there", "route": "direct"})
        body = response.json()
        outcome = "answered" if response.status_code == 200 else str(body.get("title"))
        return response.status_code, outcome, response.headers.get("retry-after", "")
    body = {"model": "gateway-direct", "stream": True, "messages": [{"role": "user", "content": "hello there"}]}
    response = await client.post("/v1/chat/completions", json=body)
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    text = "".join(
        choice["delta"].get("content", "")
        for event in events
        if event != "[DONE]"
        for choice in json.loads(event).get("choices", [])
    )
    if events and events[-1] == "[DONE]":
        return response.status_code, f"stream complete ({len(text)} chars)", ""
    error = json.loads(events[-1]).get("error", {}) if events else {}
    return response.status_code, f"stream: {len(text)} chars, then error event ({error.get('type')})", ""


async def run_row(
    fault: Fault, with_fallback: bool, base: Settings, embeddings: USEEmbeddings, args: argparse.Namespace
) -> Row:
    with FakeOpenAI(fault.default) as primary, FakeOpenAI(Answer("From the fallback.")) as backup:
        primary.script(*(_expand(b) for b in fault.script))
        if fault.refuse:
            primary.refuse()
        settings = _settings(base, primary, backup if with_fallback else None, args)
        app = create_app(settings, ProviderOverrides(embeddings=embeddings))
        async with AsyncTestClient(app, timeout=120) as client:
            for _ in range(fault.warm_failures):
                await _ask(client, False)
            warm_primary, warm_fallback = primary.calls, backup.calls
            started = time.perf_counter()
            status, outcome, retry_after = await _ask(client, fault.stream)
            took = time.perf_counter() - started
        return Row(
            fault.name,
            with_fallback,
            status,
            outcome,
            retry_after,
            took,
            primary.calls - warm_primary,
            backup.calls - warm_fallback,
        )


class Transitions(logging.Handler):
    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self.clock = clock
        self.seen: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "circuit" in message:
            self.seen.append((self.clock(), message))


async def breaker_story(base: Settings, embeddings: USEEmbeddings, args: argparse.Namespace) -> list[str]:
    """An outage and a recovery, request by request: what each got, and every transition in between."""
    lines: list[str] = []
    started = time.perf_counter()

    def now() -> float:
        return time.perf_counter() - started

    handler = Transitions(now)
    logger = logging.getLogger("gateway.providers.resilience")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        with FakeOpenAI(Status(500)) as primary:
            settings = _settings(base, primary, None, args).replace(llm_endpoint={"max_retries": 0})
            async with AsyncTestClient(create_app(settings, ProviderOverrides(embeddings=embeddings))) as client:
                pause = args.cooldown + 0.1
                steps: list[tuple[str, float, Behaviour | None]] = [
                    *[("upstream answers 500", 0.0, None)] * (args.failures + 1),
                    ("cool-down passes, upstream still 500 (probe fails)", pause, None),
                    ("right after the failed probe", 0.0, None),
                    ("cool-down passes, upstream fixed (probe succeeds)", pause, Answer("Back.")),
                    ("next request", 0.0, None),
                ]
                for label, wait_s, fixed in steps:
                    await asyncio.sleep(wait_s)
                    if fixed is not None:
                        primary.default = fixed
                    calls, at = primary.calls, now()
                    status, outcome, retry_after = await _ask(client, False)
                    ms = (now() - at) * 1000
                    reached = "reached upstream" if primary.calls > calls else "upstream NOT called"
                    after = f", Retry-After {retry_after}" if retry_after else ""
                    lines.append(f"  t={at:5.2f}s  {label:<52} -> {status} {outcome}{after} ({ms:.0f} ms, {reached})")
                    lines.extend(f"  t={moment:5.2f}s      transition: {message}" for moment, message in handler.seen)
                    handler.seen.clear()
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=2.0, help="GATEWAY_LLM_TIMEOUT_S")
    parser.add_argument("--retries", type=int, default=2, help="GATEWAY_LLM_MAX_RETRIES")
    parser.add_argument("--failures", type=int, default=3, help="GATEWAY_LLM_BREAKER_FAILURES")
    parser.add_argument("--cooldown", type=float, default=1.0, help="GATEWAY_LLM_BREAKER_COOLDOWN_S")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("gateway").setLevel(logging.ERROR)
    embeddings = USEEmbeddings()
    with tempfile.TemporaryDirectory() as tmp:
        base = Settings().replace(vector_store={"path": Path(tmp) / "lancedb"}, redis={"url": None})
        rows = [
            await run_row(fault, with_fallback, base, embeddings, args)
            for fault in faults(args.failures)
            for with_fallback in (False, True)
        ]
        story = await breaker_story(base, embeddings, args)
    print(
        f"Fault matrix: timeout {args.timeout}s, {args.retries} retries (backoff 0.1-0.5s, full jitter), "
        f"breaker opens after {args.failures} failures, cool-down {args.cooldown}s\n"
    )
    columns = ("injected fault", 42), ("fallback", 8), ("status", 6), ("what the client got", 52), ("Retry-After", 11)
    header = " ".join(f"{name:<{width}}" for name, width in columns) + f" {'time':>7}  calls p/f"
    print(header)
    print("-" * len(header))
    for r in rows:
        cells = (r.fault, "yes" if r.fallback else "no", r.status, r.outcome, r.retry_after or "-")
        line = " ".join(f"{cell!s:<{width}}" for cell, (_, width) in zip(cells, columns, strict=True))
        print(f"{line} {r.seconds:6.2f}s  {r.primary_calls}/{r.fallback_calls}")
    print("\nBreaker transitions (no fallback, no retries, so each request is one attempt):")
    print("\n".join(story))


if __name__ == "__main__":
    asyncio.run(main())
