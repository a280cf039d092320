"""Route outcomes per answer and per-tenant routing calibrations (gateway.curation.routing).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "curation_route_outcomes",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False, index=True),
        sa.Column("classified_route", sa.String(32), nullable=False),
        sa.Column("served_route", sa.String(32), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("p_multi_hop", sa.Float),
        sa.Column("disliked", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False, index=True),
    )
    op.create_table(
        "route_calibrations",
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("multi_hop_threshold", sa.Float, nullable=False),
        sa.Column("outcomes", sa.Integer, nullable=False),
        sa.Column("accuracy_before", sa.Float, nullable=False),
        sa.Column("accuracy_after", sa.Float, nullable=False),
        sa.Column("calibrated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("route_calibrations")
    op.drop_table("curation_route_outcomes")
