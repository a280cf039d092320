"""Moving a curation store's database to a given Alembic revision, and comparing the migrated schema with the tables
queries are written against: shared by the tests of each migration, on SQLite and on PostgreSQL."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect

from gateway.curation.store import CurationStore
from gateway.providers.database.engine import migrations_folder
from gateway.providers.database.tables import metadata


def _alembic(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", migrations_folder())
    config.attributes["connection"] = connection
    return config


async def migrate_to(store: CurationStore, revision: str, *, down: bool = False) -> None:
    move = command.downgrade if down else command.upgrade
    async with store.engine.begin() as connection:
        await connection.run_sync(lambda sync: move(_alembic(sync), revision))


async def schema_drift(store: CurationStore) -> list[object]:
    """What the migrated database lacks or has beyond ``gateway.providers.database.tables`` (empty: they agree)."""
    async with store.engine.connect() as connection:
        return await connection.run_sync(
            lambda sync: compare_metadata(
                MigrationContext.configure(sync, opts={"compare_server_default": True}), metadata
            )
        )


async def columns(store: CurationStore, table: str) -> dict[str, bool]:
    """The table's columns as the database has them: name → nullable."""

    def read(sync: Connection) -> dict[str, bool]:
        return {c["name"]: bool(c["nullable"]) for c in inspect(sync).get_columns(table)}

    async with store.engine.connect() as connection:
        return await connection.run_sync(read)
