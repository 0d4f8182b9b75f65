"""Who owns a job, and each worker's secret.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27

- ``jobs.owner``: the name of the user token that submitted the job (``KS_API_TOKENS``); NULL
  for jobs submitted while the service was open and for every job before this revision.
  ``ix_jobs_owner_status`` serves the per-owner queue limit.
- ``workers.secret_sha256``: the digest of the secret issued at a worker's first registration;
  NULL for workers registered before this revision (their next registration issues one).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("owner", sa.String(64), nullable=True))
    op.create_index("ix_jobs_owner_status", "jobs", ["owner", "status"])
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("secret_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("secret_sha256")
    op.drop_index("ix_jobs_owner_status", "jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("owner")
