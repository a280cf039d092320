"""The curation store on the real PostgreSQL (POSTGRES_TEST_URL): migrations, writes, retention, and
the whole relocation cycle through the app. Each test gets a database of its own, dropped after."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import SecretStr

from gateway.curation.models import AnswerRecord, RetrievedDocument
from gateway.curation.store import CurationStore
from gateway.settings import Settings
from tests.curation_support import relocation_cycle, relocation_model
from tests.eval_run_support import abandoned_runs_are_stored_failed, eval_run_states_across_the_migration
from tests.migration_race_support import replicas_migrate_together
from tests.named_rule_support import named_documents_rule_across_the_migration
from tests.postgres_support import fresh_database
from tests.route_version_support import router_versions_across_the_migration
from tests.who_asked_support import who_asked_across_the_migration

pytestmark = pytest.mark.postgres


@pytest.fixture
async def database_url() -> AsyncIterator[str]:
    async with fresh_database("curation") as url:
        yield url


def _record(record_id: str, created_at: float) -> AnswerRecord:
    return AnswerRecord(
        id=record_id,
        tenant="acme",
        trace_id="ab" * 16,
        route="single_hop",
        reasons=["abstained"],
        verdicts=["incorrect"],
        top_k=4,
        documents=[RetrievedDocument("doc-1", "Doc", 0.42)],
        cited=[],
        answer="The documents do not say.",
        question="現在の本社の住所は？",
        embedding=[0.1, 0.2, 0.3],
        created_at=created_at,
    )


async def test_migrations_run_twice_and_records_round_trip_with_retention(database_url: str) -> None:
    store = CurationStore.open(database_url)
    try:
        await store.migrate()
        await store.migrate()  # idempotent: start-up runs it on every boot
        now = time.time()
        await store.add_records([_record("resp_old", now - 31 * 86_400), _record("resp_new", now)])
        found = await store.find_record(response_id=None, trace_id="ab" * 16)
        assert found is not None
        assert found.documents == [RetrievedDocument("doc-1", "Doc", 0.42)]
        assert found.verdicts == ["incorrect"]
        await store.mark_rated_down("resp_new", "東京都渋谷区")
        assert await store.purge(retention_days=30) == 1
        (left,) = await store.open_records("acme")
        assert left.id == "resp_new"
        assert left.reasons == ["abstained", "negative_feedback"]
        assert left.expected_answer == "東京都渋谷区"
        await store.documents_changed("acme", ["doc-1"], at=now)
        await store.documents_changed("acme", ["doc-1"], at=now + 5)
        assert await store.change_times("acme", ["doc-1", "doc-2"]) == {"doc-1": now + 5}
    finally:
        await store.close()


async def test_route_rows_from_before_router_versions_read_back_stale_on_postgresql(database_url: str) -> None:
    await router_versions_across_the_migration(database_url)


async def test_eval_runs_are_stored_running_then_as_they_ended_on_postgresql(database_url: str) -> None:
    await eval_run_states_across_the_migration(database_url)


async def test_the_named_documents_rule_is_recorded_and_calibrated_on_postgresql(database_url: str) -> None:
    await named_documents_rule_across_the_migration(database_url)


async def test_the_relocation_cycle_on_postgresql(
    make_client: Callable[..., Any], settings: Settings, database_url: str
) -> None:
    on_postgres = settings.replace(curation={"database_url": SecretStr(database_url)})
    async with make_client(relocation_model, settings_override=on_postgres) as (client, _):
        result = await relocation_cycle(client)
    assert result["closed"]
    store = CurationStore.open(database_url)
    try:
        (resolution,) = await store.resolutions_of("acme", closed_only=True)
        assert resolution.score_after > resolution.score_before
    finally:
        await store.close()


async def test_who_asked_is_recorded_and_rows_from_before_read_as_tenant_open_on_postgresql(database_url: str) -> None:
    await who_asked_across_the_migration(database_url)


async def test_runs_a_stopped_process_left_running_are_stored_failed(database_url: str) -> None:
    await abandoned_runs_are_stored_failed(database_url)


async def test_replicas_starting_together_each_migrate_the_same_database(database_url: str) -> None:
    await replicas_migrate_together(database_url)
