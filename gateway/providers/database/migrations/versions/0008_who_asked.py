"""Who asked: each answer record (and the feedback on it) keeps the reader's user id and the visibility the answer
ran under, so a curator sees whose question it was and a resolution re-runs it in the same view; evaluation suites
may name a user to run as, and each run keeps the one it ran as.

``visibility_key`` is ``Visibility.key()`` ("all" for an unrestricted reader) and ``visible_tags`` its access tags
(NULL when unrestricted); ``reader_source`` how the user was learnt (token / header / none). Rows written before this
revision have all of them NULL: they were asked before readers were known, and read back as the tenant-open
visibility (no user), the least any reader of the tenant sees, never as everything. The migration writes no guess
into them: the tenant-open tags depend on the tenant's policy for documents without access, read when they are.

``curation_eval_suites`` holds a suite's settings (only ``run_as`` so far: ``{"user_id", "groups"}``, NULL: run as
no user); ``curation_eval_runs.run_as`` the user a run ran as (NULL: none, as every run before this revision).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

RECORDS = "curation_answer_records"
FEEDBACK = "curation_feedback"
RUNS = "curation_eval_runs"
SUITES = "curation_eval_suites"


def upgrade() -> None:
    for table in (RECORDS, FEEDBACK):
        op.add_column(table, sa.Column("user_id", sa.String(256), nullable=True))
        op.add_column(table, sa.Column("visibility_key", sa.String(16), nullable=True))
        op.add_column(table, sa.Column("visible_tags", sa.JSON, nullable=True))
        op.create_index(f"ix_{table}_user_id", table, ["user_id"])
    op.add_column(RECORDS, sa.Column("reader_source", sa.String(8), nullable=True))
    op.add_column(RUNS, sa.Column("run_as", sa.JSON, nullable=True))
    op.create_table(
        SUITES,
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("suite", sa.String(64), primary_key=True),
        sa.Column("run_as", sa.JSON, nullable=True),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table(SUITES)
    with op.batch_alter_table(RUNS) as batch:  # SQLite drops a column by copying the table
        batch.drop_column("run_as")
    for table in (RECORDS, FEEDBACK):
        op.drop_index(f"ix_{table}_user_id", table_name=table)
        with op.batch_alter_table(table) as batch:
            if table == RECORDS:
                batch.drop_column("reader_source")
            batch.drop_column("visible_tags")
            batch.drop_column("visibility_key")
            batch.drop_column("user_id")
