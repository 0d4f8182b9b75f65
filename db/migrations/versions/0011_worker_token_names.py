"""Which worker token each worker registered with.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28

- ``workers.token_name``: the name of the worker token (``KS_WORKER_TOKENS``; ``default`` for
  ``KS_WORKER_TOKEN``) the worker registered with; its later calls need that token, and with
  more than one token configured its held results are confirmed only by a worker of another
  token. NULL for workers registered while worker endpoints were open and for every worker
  before this revision (their next registration records one).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("token_name", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("token_name")
