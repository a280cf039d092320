"""What metrics and tracing cost on the cheapest request there is: an exact-cache hit.

    python -m tests.benchmarks.observability_overhead --requests 2000 --rounds 5

Builds two apps in this process, identical but for ``metrics_enabled``/``tracing_enabled`` (tracing
on means spans are made, with no exporter, as in production without ``OTEL_EXPORTER_OTLP_ENDPOINT``),
warms one cached answer in each, then alternates rounds of sequential hits between them so drift on
a shared machine hits both alike. Both log as in production (a JSON line per answer, to /dev/null).
Prints per-request latency through the whole ASGI stack (in process, no sockets) and through
``QueryService.answer`` alone, and the on/off ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from litestar.testing import AsyncTestClient

from gateway.access.identity import Reader
from gateway.app import create_app
from gateway.observability.logs import JsonFormatter
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.query.schemas import QueryRequest
from gateway.query.service import QueryService
from gateway.settings import Settings
from tests.benchmarks.figures import percentile
from tests.fakes.scripted_chat import ScriptedChatModel

BODY = {"tenant": "bench", "query": "Hello, who are you?", "route": "direct"}


def settings_for(on: bool, root: Path) -> Settings:
    return Settings().replace(
        vector_store={"path": root / ("on" if on else "off")},
        router_artefact={"cache_dir": root / "router"},
        llm_endpoint={"base_url": "http://127.0.0.1:9/v1"},
        redis={"url": None},
        observability={"metrics_enabled": on, "tracing_enabled": on, "log_format": "text"},
    )


async def http_round(client: AsyncTestClient[Any], n: int) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        response = await client.post("/v1/query", json=BODY)
        times.append((time.perf_counter() - started) * 1e6)
        assert response.status_code == 200
    return times


async def service_round(service: QueryService, n: int) -> list[float]:
    request = QueryRequest(query=BODY["query"], tenant=BODY["tenant"], route="direct")
    times = []
    for _ in range(n):
        started = time.perf_counter()
        response = await service.answer(request, reader=Reader.unrestricted())
        times.append((time.perf_counter() - started) * 1e6)
        assert response.cached
    return times


def line(label: str, values: list[float]) -> str:
    a = np.asarray(values)
    return (
        f"{label:<34} n={a.size:>6}  mean={a.mean():8.1f} us  p50={percentile(values, 50):8.1f} us  "
        f"p99={percentile(values, 99):8.1f} us"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="requests per round and mode")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    # Production logging (one JSON line per answer, at INFO) into /dev/null, for both apps alike.
    with open(os.devnull, "w", encoding="utf-8") as sink:  # noqa: ASYNC230 - opened once, before the loop runs
        handler = logging.StreamHandler(sink)
        handler.setFormatter(JsonFormatter())
        logging.getLogger().handlers[:] = [handler]
        logging.getLogger().setLevel(logging.INFO)
        logging.getLogger("httpx").setLevel(logging.WARNING)
        await measure(args.requests, args.rounds)


async def measure(requests: int, rounds: int) -> None:
    embeddings = USEEmbeddings()
    with tempfile.TemporaryDirectory() as tmp:
        apps = {
            on: create_app(
                settings_for(on, Path(tmp)),
                ProviderOverrides(chat_model=ScriptedChatModel(responder=lambda *_: "Hello!"), embeddings=embeddings),
            )
            for on in (True, False)
        }
        results: dict[tuple[str, bool], list[float]] = {}
        async with AsyncTestClient(apps[True]) as client_on, AsyncTestClient(apps[False]) as client_off:
            clients = {True: client_on, False: client_off}
            for client in clients.values():
                first = (await client.post("/v1/query", json=BODY)).json()
                assert first["cached"] is False
                await http_round(client, 200)  # warm-up
            for _ in range(rounds):
                for on, client in clients.items():
                    results.setdefault(("http", on), []).extend(await http_round(client, requests))
                    service = apps[on].state.query_service
                    results.setdefault(("service", on), []).extend(await service_round(service, requests))
    for layer in ("http", "service"):
        enabled, disabled = results[(layer, True)], results[(layer, False)]
        what = "HTTP (ASGI in-process)" if layer == "http" else "QueryService.answer"
        print(line(f"{what}, metrics+tracing on", enabled))
        print(line(f"{what}, metrics+tracing off", disabled))
        print(
            f"{'':<34} ratio on/off: mean {np.mean(enabled) / np.mean(disabled):.3f}, "
            f"p50 {percentile(enabled, 50) / percentile(disabled, 50):.3f}, "
            f"added per request (p50) {percentile(enabled, 50) - percentile(disabled, 50):.1f} us"
        )


if __name__ == "__main__":
    asyncio.run(main())
