"""The curation store's migrations as a command (for GATEWAY_CURATION_MIGRATE_ON_START=false), the router versions
its route tables gained and the states its evaluation runs gained (on SQLite;
tests/integration/test_curation_postgres.py runs both on PostgreSQL)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.curation.cli import main
from tests.eval_run_support import abandoned_runs_are_stored_failed, eval_run_states_across_the_migration
from tests.migration_race_support import replicas_migrate_together
from tests.named_rule_support import named_documents_rule_across_the_migration
from tests.route_version_support import router_versions_across_the_migration
from tests.who_asked_support import who_asked_across_the_migration


def test_the_migrate_command_brings_a_database_to_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "nested" / "curation.db"
    monkeypatch.setenv("GATEWAY_CURATION_DATABASE_URL", f"sqlite+aiosqlite:///{path}")
    assert main(["migrate"]) == 0
    assert main(["migrate"]) == 0  # idempotent
    with sqlite3.connect(path) as connection:
        tables = {row[0] for row in connection.execute("select name from sqlite_master where type = 'table'")}
        (version,) = connection.execute("select version_num from alembic_version").fetchone()
    assert tables >= {
        "curation_answer_records",
        "curation_feedback",
        "curation_resolutions",
        "curation_document_changes",
        "curation_eval_cases",
        "curation_eval_runs",
        "assistant_profiles",
        "curation_route_outcomes",
        "route_calibrations",
        "curation_eval_suites",
    }
    assert version == "0008"
    assert main(["upgrade"]) == 2


async def test_replicas_starting_together_each_migrate_one_sqlite_file(tmp_path: Path) -> None:
    await replicas_migrate_together(f"sqlite+aiosqlite:///{tmp_path}/curation.db")


async def test_route_rows_from_before_router_versions_read_back_stale_and_new_ones_keep_theirs(
    tmp_path: Path,
) -> None:
    await router_versions_across_the_migration(f"sqlite+aiosqlite:///{tmp_path}/curation.db")


async def test_eval_runs_are_stored_running_then_as_they_ended_across_the_migration(tmp_path: Path) -> None:
    await eval_run_states_across_the_migration(f"sqlite+aiosqlite:///{tmp_path}/curation.db")


async def test_the_named_documents_rule_is_recorded_and_calibrated_across_the_migration(tmp_path: Path) -> None:
    await named_documents_rule_across_the_migration(f"sqlite+aiosqlite:///{tmp_path}/curation.db")


async def test_who_asked_is_recorded_and_rows_from_before_read_as_tenant_open(tmp_path: Path) -> None:
    await who_asked_across_the_migration(f"sqlite+aiosqlite:///{tmp_path}/curation.db")


async def test_runs_a_stopped_process_left_running_are_stored_failed(tmp_path: Path) -> None:
    await abandoned_runs_are_stored_failed(f"sqlite+aiosqlite:///{tmp_path}/curation.db")
