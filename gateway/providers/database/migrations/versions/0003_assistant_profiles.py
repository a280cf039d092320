"""Assistant profiles per tenant (gateway.profiles).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "assistant_profiles",
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("persona", sa.Text, nullable=False),
        sa.Column("instructions", sa.Text, nullable=False),
        sa.Column("answer_language", sa.String(16), nullable=False),
        sa.Column("allowed_routes", sa.JSON, nullable=False),
        sa.Column("route_models", sa.JSON, nullable=False),
        sa.Column("allow_system_messages", sa.Boolean, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("assistant_profiles")
