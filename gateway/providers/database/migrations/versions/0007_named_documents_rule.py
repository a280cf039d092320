"""The named-documents rule per tenant: whether each route outcome's question asked about two documents by title, and
whether a tenant's calibration keeps the rule deciding those questions.

Rows written before this revision get ``named_documents`` false on outcomes (the rule's decisions then recorded no
probability, and a recalibration reads none of them) and true on calibrations (the rule decided for every tenant),
with ``named_outcomes`` 0.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

OUTCOMES = "curation_route_outcomes"
CALIBRATIONS = "route_calibrations"


def upgrade() -> None:
    op.add_column(OUTCOMES, sa.Column("named_documents", sa.Boolean, nullable=False, server_default=sa.false()))
    op.add_column(CALIBRATIONS, sa.Column("named_documents", sa.Boolean, nullable=False, server_default=sa.true()))
    op.add_column(CALIBRATIONS, sa.Column("named_outcomes", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table(OUTCOMES) as batch:  # SQLite drops a column by copying the table
        batch.drop_column("named_documents")
    with op.batch_alter_table(CALIBRATIONS) as batch:
        batch.drop_column("named_outcomes")
        batch.drop_column("named_documents")
