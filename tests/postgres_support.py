"""A PostgreSQL database of a test's own on the real server (POSTGRES_TEST_URL), dropped after: tests of the
stores that live there never see each other's rows or migrations."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from uuid import uuid4

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

POSTGRES_TEST_URL = os.environ.get("POSTGRES_TEST_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")


@asynccontextmanager
async def fresh_database(prefix: str) -> AsyncIterator[str]:
    """The URL of a new database (CREATE DATABASE cannot run in a transaction: autocommit)."""
    name = f"{prefix}_{uuid4().hex[:12]}"
    admin = create_async_engine(POSTGRES_TEST_URL, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as connection:
            await connection.execute(text(f'CREATE DATABASE "{name}"'))
        yield POSTGRES_TEST_URL.rsplit("/", 1)[0] + f"/{name}"
        async with admin.connect() as connection:
            await connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()
