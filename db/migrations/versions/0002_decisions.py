"""The decision loop: calibrations, decisions, the job's policy and stage, candidate tiers,
measurement extras.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

A snapshot like 0001: it does not import ``db.models``. New columns are nullable, so the rows
written before this migration stay valid (they read as "no policy": the defaults).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _id() -> sa.Column:
    return sa.Column("id", _ID, primary_key=True, autoincrement=True, nullable=False)


def _fk(name: str, target: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, _ID, sa.ForeignKey(target), nullable=nullable)


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("policy", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("stage", sa.String(16), nullable=True))
        batch.add_column(sa.Column("exhausted_tiers", sa.JSON(), nullable=True))
    with op.batch_alter_table("candidates") as batch:
        batch.add_column(sa.Column("tier", sa.String(32), nullable=True))
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("extra", sa.JSON(), nullable=True))
    op.create_table(
        "calibrations", _id(),
        sa.Column("gpu_model", sa.String(200), nullable=False),
        sa.Column("bandwidth_gbs", sa.Float(), nullable=False),
        sa.Column("peak_tflops", sa.JSON(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("stale", sa.Boolean(), nullable=False),
        _fk("job_id", "jobs.id", nullable=True),
        _fk("worker_id", "workers.id", nullable=True),
        sa.Column("bench_s", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_calibrations_gpu_model", "calibrations", ["gpu_model"])
    op.create_table(
        "decisions", _id(),
        _fk("problem_id", "problems.id"),
        _fk("job_id", "jobs.id", nullable=True),
        sa.Column("gpu_model", sa.String(200), nullable=False),
        sa.Column("verdict", sa.String(32), nullable=False),
        sa.Column("chosen", sa.String(16), nullable=False),
        sa.Column("backend", sa.String(32), nullable=True),
        sa.Column("config", sa.JSON(), nullable=True),
        sa.Column("median_us", sa.Float(), nullable=True),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("bound", sa.String(16), nullable=True),
        sa.Column("attainable_us", sa.Float(), nullable=True),
        sa.Column("verified", sa.Boolean(), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("superseded_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_decisions_problem_gpu", "decisions", ["problem_id", "gpu_model"])
    op.create_index("ix_decisions_job_id", "decisions", ["job_id"])


def downgrade() -> None:
    op.drop_table("decisions")
    op.drop_table("calibrations")
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("extra")
    with op.batch_alter_table("candidates") as batch:
        batch.drop_column("tier")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("exhausted_tiers")
        batch.drop_column("stage")
        batch.drop_column("policy")
