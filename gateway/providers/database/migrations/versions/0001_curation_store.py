"""The curation store: answer records, feedback, resolutions, document changes.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "curation_answer_records",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False, index=True),
        sa.Column("trace_id", sa.String(32), index=True),
        sa.Column("route", sa.String(32), nullable=False),
        sa.Column("reasons", sa.JSON, nullable=False),
        sa.Column("verdicts", sa.JSON, nullable=False),
        sa.Column("top_k", sa.Integer, nullable=False),
        sa.Column("documents", sa.JSON, nullable=False),
        sa.Column("cited", sa.JSON, nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("embedding", sa.JSON, nullable=False),
        sa.Column("expected_answer", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False, index=True),
        sa.Column("resolution_id", sa.String(64), index=True),
    )
    op.create_table(
        "curation_feedback",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False, index=True),
        sa.Column("response_id", sa.String(64), index=True),
        sa.Column("trace_id", sa.String(32)),
        sa.Column("rating", sa.String(8), nullable=False),
        sa.Column("comment", sa.Text),
        sa.Column("expected_answer", sa.Text),
        sa.Column("question", sa.Text),
        sa.Column("documents", sa.JSON, nullable=False),
        sa.Column("cited", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False, index=True),
    )
    op.create_table(
        "curation_resolutions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False, index=True),
        sa.Column("gap_id", sa.String(80), nullable=False, index=True),
        sa.Column("document_ids", sa.JSON, nullable=False),
        sa.Column("rules", sa.JSON, nullable=False),
        sa.Column("cases", sa.JSON, nullable=False),
        sa.Column("score_before", sa.Float, nullable=False),
        sa.Column("score_after", sa.Float, nullable=False),
        sa.Column("closed", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False, index=True),
    )
    op.create_table(
        "curation_document_changes",
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("doc_id", sa.String(256), primary_key=True),
        sa.Column("changed_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "curation_document_changes",
        "curation_resolutions",
        "curation_feedback",
        "curation_answer_records",
    ):
        op.drop_table(table)
