"""The router version behind each route outcome's p(multi_hop) and each routing calibration.

A retrained router gives questions other probabilities: outcomes and thresholds are only comparable within the
version that computed them. Rows written before this revision get NULL (an unknown router): a recalibration does not
read such outcomes, and such a calibration is not applied.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-12
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TABLES = ("curation_route_outcomes", "route_calibrations")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("router_version", sa.String(64), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:  # SQLite drops a column by copying the table
            batch.drop_column("router_version")
