"""Alembic's environment: always handed a live connection by
:meth:`gateway.providers.database.engine.Database.migrate`."""

from __future__ import annotations

from alembic import context

from gateway.providers.database.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
