"""The curation store's migrations as a command (for GATEWAY_CURATION_MIGRATE_ON_START=false)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.curation.cli import main


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
    }
    assert version == "0004"
    assert main(["upgrade"]) == 2
