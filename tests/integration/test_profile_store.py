"""The profile store on both databases it runs on: a SQLite file and the real PostgreSQL (POSTGRES_TEST_URL).
Migrations, round trips, versions under concurrent writers, deletion, and the admin API on PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from gateway.curation.store import CurationStore
from gateway.profiles.model import AssistantProfile
from gateway.profiles.store import ProfileStore
from gateway.settings import Settings
from tests.chat_support import chat_model
from tests.postgres_support import fresh_database


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    async with fresh_database("profiles") as url:
        yield url


async def test_profiles_round_trip_with_versions_on_sqlite(tmp_path: Path) -> None:
    await round_trip(f"sqlite+aiosqlite:///{tmp_path}/profiles.db")


@pytest.mark.postgres
async def test_profiles_round_trip_with_versions_on_postgresql(postgres_url: str) -> None:
    await round_trip(postgres_url)


async def round_trip(database_url: str) -> None:
    curation = CurationStore.open(database_url)
    try:
        await curation.migrate()
        await curation.migrate()  # idempotent
        store = ProfileStore(curation.engine)
        assert await store.get("acme") is None
        profile = AssistantProfile(
            tenant="acme",
            name="Hoshi",
            persona="the HR desk",
            instructions="敬語で答えてください。",
            answer_language="ja",
            allowed_routes=("direct", "multi_hop"),
            route_models={"direct": "gpt-4o-mini"},
            allow_system_messages=True,
        )
        first = await store.put(profile)
        assert first.version == 1
        assert first.configured
        assert first.updated_at is not None
        assert first.digest == profile.digest
        found = await store.get("acme")
        assert found == first
        assert found is not None
        assert found.instructions == "敬語で答えてください。"
        assert found.allowed_routes == ("direct", "multi_hop")
        assert found.route_models == {"direct": "gpt-4o-mini"}
        # Writers at once each get their own version: none is lost under another's number.
        written = await asyncio.gather(*(store.put(profile) for _ in range(5)))
        assert sorted(p.version for p in written) == [2, 3, 4, 5, 6]
        assert await store.get("globex") is None
        assert await store.delete("acme")
        assert not await store.delete("acme")
        assert await store.get("acme") is None
        assert (await store.put(profile)).version == 1
    finally:
        await curation.close()


@pytest.mark.postgres
async def test_the_admin_api_and_a_profiled_answer_on_postgresql(
    make_client: Callable[..., Any], settings: Settings, postgres_url: str
) -> None:
    on_postgres = settings.replace(curation={"database_url": SecretStr(postgres_url)})
    async with make_client(chat_model(), settings_override=on_postgres) as (client, model):
        written = await client.put("/v1/assistant-profile", json={"tenant": "acme", "name": "Hoshi"})
        assert written.status_code == 200, written.text
        answered = await client.post("/v1/query", json={"query": "Who are you?", "tenant": "acme", "route": "direct"})
        assert answered.status_code == 200, answered.text
    system = str(model.calls[-1][0][0].content)
    assert system.startswith("You are Hoshi")
    store = CurationStore.open(postgres_url)
    try:
        stored = await ProfileStore(store.engine).get("acme")
    finally:
        await store.close()
    assert stored is not None
    assert stored.name == "Hoshi"
