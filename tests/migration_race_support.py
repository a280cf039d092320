"""Replicas of a rollout migrating one curation database at once, as separate processes (pods), shared by the
SQLite and PostgreSQL store tests."""

from __future__ import annotations

import asyncio
import os
import sys

from alembic.script import ScriptDirectory
from sqlalchemy import text

from gateway.curation.store import CurationStore
from gateway.providers.database.engine import migrations_folder

REPLICAS = 4


async def replicas_migrate_together(url: str) -> None:
    """Every replica exits migrated, and the schema is at head once."""
    env = {**os.environ, "GATEWAY_CURATION_DATABASE_URL": url}
    replicas = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.curation", "migrate", env=env, stderr=asyncio.subprocess.PIPE
        )
        for _ in range(REPLICAS)
    ]
    results = await asyncio.gather(*(replica.communicate() for replica in replicas))
    errors = [err.decode()[-600:] for _, err in results]
    assert [replica.returncode for replica in replicas] == [0] * REPLICAS, errors
    store = CurationStore.open(url)
    try:
        async with store.engine.connect() as connection:
            versions = (await connection.execute(text("SELECT version_num FROM alembic_version"))).scalars().all()
        assert versions == [ScriptDirectory(migrations_folder()).get_current_head()]
    finally:
        await store.close()
