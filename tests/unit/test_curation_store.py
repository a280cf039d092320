"""The curation store's migrations as a command (for GATEWAY_CURATION_MIGRATE_ON_START=false), and the router
versions its route tables gained (on SQLite; tests/integration/test_curation_postgres.py runs it on PostgreSQL)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.curation.cli import main
from tests.route_version_support import router_versions_across_the_migration


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
    }
    assert version == "0005"
    assert main(["upgrade"]) == 2


async def test_route_rows_from_before_router_versions_read_back_stale_and_new_ones_keep_theirs(
    tmp_path: Path,
) -> None:
    await router_versions_across_the_migration(f"sqlite+aiosqlite:///{tmp_path}/curation.db")
