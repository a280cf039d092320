"""Evaluation runs answer in the background: each run is stored when it starts and carries its state.

``state`` is ``running``, ``done`` or ``failed``; ``error`` says why a run failed; ``score`` and ``finished_at`` are
NULL while a run is running (``score`` stays NULL for a failed one). Rows written before this revision were finished
runs: they read back ``done``.

The downgrade deletes the runs that are not ``done``: the schema before this revision holds finished runs only, with a
score, and a running or failed run has none to give it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLE = "curation_eval_runs"


def upgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:  # SQLite changes a column's nullability by copying the table
        batch.add_column(sa.Column("state", sa.String(16), nullable=False, server_default="done"))
        batch.add_column(sa.Column("error", sa.Text, nullable=True))
        batch.alter_column("score", existing_type=sa.Float, nullable=True)
        batch.alter_column("finished_at", existing_type=sa.Float, nullable=True)


def downgrade() -> None:
    runs = sa.table(TABLE, sa.column("state", sa.String))
    op.execute(runs.delete().where(runs.c.state != "done"))
    with op.batch_alter_table(TABLE) as batch:
        batch.alter_column("finished_at", existing_type=sa.Float, nullable=False)
        batch.alter_column("score", existing_type=sa.Float, nullable=False)
        batch.drop_column("error")
        batch.drop_column("state")
