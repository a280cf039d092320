"""What assistant profiles add to a request's latency.

    python -m tests.benchmarks.profile_latency [--n 2000] [--postgres postgresql+asyncpg://…/test]

Three figures, each p50/p95 over ``--n`` requests after a warm-up:

1. **Per request, profile cached** (the common case, within ``GATEWAY_PROFILE_CACHE_TTL_S``): what the request
   path does for a profile: ``Profiles.get`` (an in-process hit), the answer key's profile parameters, the
   run profile (assistant and route models from the pool) and the direct route's system prompt.
2. **Per read, profile expired** (once per tenant per TTL per process): the same with the cache TTL at 0, so
   every request reads the store: a SQLite file, and PostgreSQL when ``--postgres`` (or POSTGRES_TEST_URL)
   answers (in a database of its own, created and dropped by the script).
3. **End to end**: ``/v1/query`` answered from the answer cache (the fastest full request, where a profile's
   share is largest) in an in-process app on the scripted model, with the profile cached (TTL 5 s) and read
   every time (TTL 0).

A figure-printing script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from uuid import uuid4

from litestar.testing import AsyncTestClient
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from gateway.app import create_app
from gateway.curation.store import CurationStore
from gateway.overrides import ProviderOverrides
from gateway.profiles.model import AssistantProfile
from gateway.profiles.service import ModelPool, Profiles
from gateway.profiles.store import ProfileStore
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.llm import LLMClient
from gateway.settings import AssistantSettings, LLMEndpointSettings, ModelPrice, ProfileSettings, Settings
from pipelines.direct.prompts import RULES
from tests.benchmarks.figures import percentile
from tests.fakes.scripted_chat import ScriptedChatModel, replies

TENANT = "acme"
PROFILE = AssistantProfile(
    tenant=TENANT,
    name="Hoshi",
    persona="the HR help desk of Acme Corp",
    instructions="Always mention the HR portal for forms. " * 20,
    route_models={"direct": "gpt-4o-mini", "multi_hop": "gpt-4o"},
    allow_system_messages=True,
)
QUESTION = "あなたは誰ですか？"


def figures(label: str, samples: list[float]) -> None:
    p50, p95 = percentile(samples, 50) * 1e6, percentile(samples, 95) * 1e6
    print(f"{label:<58} p50 {p50:9.1f} µs   p95 {p95:9.1f} µs   (n={len(samples)})")


async def timed(n: int, step: Callable[[], Awaitable[Any]], warm_up: int = 50) -> list[float]:
    for _ in range(warm_up):
        await step()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await step()
        samples.append(time.perf_counter() - started)
    return samples


def book(store: ProfileStore, ttl_s: float) -> Profiles:
    default = LLMClient(ScriptedChatModel(responder=replies("hi")), model_name="base", price=ModelPrice())
    pool = ModelPool(default, lambda _: ScriptedChatModel(responder=replies("hi")), LLMEndpointSettings())
    return Profiles(store, AssistantSettings(), ProfileSettings(cache_ttl_s=ttl_s), models=pool)


async def request_path(profiles: Profiles) -> None:
    profile = await profiles.get(TENANT)
    profile.key_params("Talk like a pirate.")
    run = profiles.run_profile(profile, "Talk like a pirate.")
    run.assistant.system_prompt(RULES, QUESTION)


async def components(url: str, label: str, n: int) -> None:
    store = CurationStore.open(url)
    try:
        await store.migrate()
        profiles = ProfileStore(store.engine)
        await profiles.put(PROFILE)
        cached, every_time = book(profiles, 5.0), book(profiles, 0.0)
        if label == "sqlite":
            figures("1. per request, profile cached (in-process hit)", await timed(n, lambda: request_path(cached)))
        figures(f"2. per request, profile read every time ({label})", await timed(n, lambda: request_path(every_time)))
    finally:
        await store.close()


@asynccontextmanager
async def scratch_database(server_url: str) -> AsyncIterator[str]:
    """A database of this run's own on the server of ``server_url``, dropped afterwards: never the shared one."""
    name = f"profile_bench_{uuid4().hex[:12]}"
    admin = create_async_engine(server_url, isolation_level="AUTOCOMMIT")
    async with admin.connect() as connection:
        await connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        async with admin.connect() as connection:
            await connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


async def end_to_end(settings: Settings, n: int) -> None:
    embeddings = USEEmbeddings()
    for ttl in (5.0, 0.0):
        app = create_app(
            settings.replace(profiles={"cache_ttl_s": ttl}),
            ProviderOverrides(chat_model=ScriptedChatModel(responder=replies("I am Hoshi.")), embeddings=embeddings),
        )
        async with AsyncTestClient(app) as client:
            written = await client.put("/v1/assistant-profile", json={"tenant": TENANT, "name": "Hoshi"})
            assert written.status_code == 200, written.text
            body = {"query": "Who are you?", "tenant": TENANT, "route": "direct"}

            async def ask(client: AsyncTestClient[Any] = client, body: dict[str, Any] = body) -> None:
                response = await client.post("/v1/query", json=body)
                assert response.status_code == 200, response.text

            samples = await timed(n, ask)
        what = "cached (TTL 5 s)" if ttl else "read every time (TTL 0, SQLite)"
        figures(f"3. /v1/query, cached answer, profile {what}", samples)


async def main(n: int, postgres: str | None) -> None:
    with tempfile.TemporaryDirectory() as folder:
        await components(f"sqlite+aiosqlite:///{folder}/bench.db", "sqlite", n)
        if postgres:
            try:
                async with scratch_database(postgres) as url:
                    await components(url, "postgresql", n)
            except Exception as exc:  # a figure-printing script: say why a figure is missing and go on
                print(f"2. postgresql: not measured ({type(exc).__name__}: {exc})")
        settings = Settings().replace(
            vector_store={"path": Path(folder) / "lancedb"},
            router_artefact={"cache_dir": Path(folder) / "router"},
            redis={"url": None},
            curation={"database_url": SecretStr(f"sqlite+aiosqlite:///{folder}/app.db")},
            observability={"log_level": "WARNING"},
        )
        await end_to_end(settings, max(200, n // 5))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--postgres", default=os.environ.get("POSTGRES_TEST_URL"))
    arguments = parser.parse_args()
    asyncio.run(main(arguments.n, arguments.postgres))
