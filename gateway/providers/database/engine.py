"""The gateway's relational database: one async SQLAlchemy engine (a SQLite file by default, PostgreSQL by URL), its
schema (:mod:`gateway.providers.database.tables`) and Alembic's migrations of it.

The curation cycle and the assistant profiles keep their rows here, each through a store of its own over the same
engine; the database sits below both, so neither has to reach into the other for it. Opened once in the app lifespan;
the migrations run at start-up (``migrate_on_start``, an upgrade to head is idempotent) or by ``python -m
gateway.curation migrate``.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from importlib import resources
from pathlib import Path
from typing import Any, Self, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway.errors import ProviderUnavailableError

logger = logging.getLogger(__name__)

# The name its failures carry (the readiness check's and the problem details' ``provider``): the curation cycle
# opened this database first, and dashboards and alerts know it by that name.
PROVIDER = "curation_store"
# The PostgreSQL advisory lock the migrations hold (any constant that no other lock of the database uses).
MIGRATION_LOCK_KEY = 0x6761_7465_7761_79  # "gateway"


def migrations_folder() -> str:
    """Where Alembic finds the migrations: inside this package, so an installed wheel carries them."""
    return str(resources.files("gateway.providers.database") / "migrations")


def _alembic_config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", migrations_folder())
    config.attributes["connection"] = connection
    return config


def _upgrade(connection: Connection) -> None:
    """Migrate to head, one replica at a time. Replicas of a rollout start together and each migrates on
    start-up: without the lock, two read an empty version table, both create the tables, and the second fails
    (degraded until its retry a minute later). The lock is taken in the migration's own transaction, so it is
    released at its commit; a replica that waited then finds the schema at head and does nothing."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    elif connection.dialect.name == "sqlite":
        # SQLite's write lock taken up front (its driver otherwise begins only at the first write, after the
        # version table was read); another process waits for it for the driver's busy timeout.
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    command.upgrade(_alembic_config(connection), "head")


class Database:
    """The engine, and whether this process has migrated the schema to head."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.migrated = False

    @classmethod
    def open(cls, url: str, *, engine_options: dict[str, Any] | None = None) -> Self:
        """An engine for ``url``; a SQLite file's folder is created (the default lives under ``.data``)."""
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        return cls(create_async_engine(url, **(engine_options or {})))

    async def migrate(self) -> None:
        try:
            async with self.engine.connect() as connection:
                await connection.run_sync(_upgrade)
                await connection.commit()
            self.migrated = True
        except (SQLAlchemyError, OSError) as exc:
            raise ProviderUnavailableError(f"curation store migration failed: {exc}", provider=PROVIDER) from exc

    async def close(self) -> None:
        await self.engine.dispose()

    async def ping(self) -> None:
        try:
            async with self.engine.connect() as connection:
                await connection.execute(select(1))
        except (SQLAlchemyError, OSError) as exc:
            raise ProviderUnavailableError(f"curation store unreachable: {exc}", provider=PROVIDER) from exc


D = TypeVar("D", bound=Database)


async def open_database(database: D, stack: AsyncExitStack, *, migrate: bool) -> D:
    """``database`` closed with the lifespan and migrated when it can be (``migrate``): a database that is down at
    start-up does not stop the gateway answering (the curation cycle's maintenance task retries the migration every
    minute)."""
    stack.push_async_callback(database.close)
    if migrate:
        try:
            await database.migrate()
        except ProviderUnavailableError as exc:
            logger.warning(
                "curation store unavailable at start-up (%s): answers are served; those that need a human are "
                "counted and dropped, and the curation endpoints answer 503, until it is back",
                exc,
            )
    return database
