"""Evaluation suites: stored cases per tenant and suite, and the history of their runs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "curation_eval_cases",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False, index=True),
        sa.Column("suite", sa.String(64), nullable=False, index=True),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("rules", sa.JSON, nullable=False),
        sa.Column("reference", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "curation_eval_runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False, index=True),
        sa.Column("suite", sa.String(64), nullable=False, index=True),
        sa.Column("trigger", sa.String(32), nullable=False),
        sa.Column("score", sa.Float, nullable=False),
        sa.Column("cases", sa.JSON, nullable=False),
        sa.Column("started_at", sa.Float, nullable=False, index=True),
        sa.Column("finished_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("curation_eval_runs")
    op.drop_table("curation_eval_cases")
