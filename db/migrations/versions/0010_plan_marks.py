"""Jobs waiting for the planner.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25

- ``plan_marks``: a row per change the decision loop reads (a result stored, a lease expired,
  a job bound, cancelled or out of time), inserted in the transaction of the change and
  deleted by the planner that claims it (``KS_PLANNING=background``: ``service.planner``).
  Inserts only, never an update of the job's row: a request marking a job does not wait for a
  planner that holds the job's row lock. No foreign key, for the same reason (its check locks
  the job's row too). ``ix_plan_marks_job_id`` serves the claim's clean-up and the idle sweep.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "plan_marks",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  nullable=False))
    op.create_index("ix_plan_marks_job_id", "plan_marks", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_plan_marks_job_id", "plan_marks")
    op.drop_table("plan_marks")
