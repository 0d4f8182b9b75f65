"""``worker_catalogues``: what the workers of a GPU model declared they can build.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

A worker that offers CUTLASS sends its operation catalogue when it registers, so the API host
never enumerates CUTLASS itself (``search.spaces.cutlass_catalogue``). One row per GPU model and
kind; a snapshot like 0001: it does not import ``db.models``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "worker_catalogues",
        sa.Column("gpu_model", sa.String(200), primary_key=True, nullable=False),
        sa.Column("kind", sa.String(32), primary_key=True, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("worker_id", _ID, sa.ForeignKey("workers.id"), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("worker_catalogues")
