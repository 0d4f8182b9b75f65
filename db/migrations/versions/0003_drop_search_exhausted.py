"""``jobs.search_exhausted`` goes: it always equalled ``bool(exhausted_tiers)`` (since 0002).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

The downgrade restores the column from ``exhausted_tiers``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("search_exhausted")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("search_exhausted", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
    op.execute("UPDATE jobs SET search_exhausted = (exhausted_tiers IS NOT NULL AND "
               "CAST(exhausted_tiers AS TEXT) NOT IN ('[]', 'null'))")
