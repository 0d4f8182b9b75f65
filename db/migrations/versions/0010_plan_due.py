"""Jobs waiting for the planner.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25

- ``jobs.plan_due``: true when something the decision loop reads changed since it last planned
  the job (a result stored, a lease expired, the job bound or cancelled or out of time). Set in
  the transaction of the change, cleared by the planner that claims the job, so with
  ``KS_PLANNING=background`` requests never plan and a crash loses no planning.
  ``ix_jobs_plan_due`` serves the planner's claim.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("plan_due", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
    op.create_index("ix_jobs_plan_due", "jobs", ["plan_due"])


def downgrade() -> None:
    op.drop_index("ix_jobs_plan_due", "jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("plan_due")
