"""Initial tables: workers, problems, jobs, leases, candidates, measurements.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Written from ``alembic revision --autogenerate`` and tidied. It does not import ``db.models``
on purpose: a migration is a snapshot and must not change when the models do.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _id() -> sa.Column:
    return sa.Column("id", _ID, primary_key=True, autoincrement=True, nullable=False)


def _fk(name: str, target: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, _ID, sa.ForeignKey(target), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "problems", _id(),
        sa.Column("key", sa.String(300), nullable=False, unique=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "workers", _id(),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("gpu_model", sa.String(200), nullable=False),
        sa.Column("device", sa.JSON(), nullable=False),
        sa.Column("registered_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_workers_gpu_model", "workers", ["gpu_model"])
    op.create_table(
        "jobs", _id(),
        _fk("problem_id", "problems.id"),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("max_trials", sa.Integer(), nullable=True),
        sa.Column("max_seconds", sa.Float(), nullable=True),
        sa.Column("backends", sa.JSON(), nullable=False),
        sa.Column("target_gpu", sa.String(200), nullable=True),
        sa.Column("bound_gpu", sa.String(200), nullable=True),
        sa.Column("bound_backends", sa.JSON(), nullable=True),
        sa.Column("search_exhausted", sa.Boolean(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )
    op.create_index("ix_jobs_problem_id", "jobs", ["problem_id"])
    op.create_index("ix_jobs_status", "jobs", ["status"])
    op.create_table(
        "leases",
        sa.Column("id", sa.String(36), primary_key=True, nullable=False),
        _fk("worker_id", "workers.id"),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_leases_worker_id", "leases", ["worker_id"])
    op.create_table(
        "candidates", _id(),
        _fk("job_id", "jobs.id"),
        _fk("problem_id", "problems.id"),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("config_key", sa.Text(), nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_id", sa.String(36), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(), nullable=True),
        _fk("worker_id", "workers.id", nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_candidates_job_status", "candidates", ["job_id", "status"])
    op.create_index("ix_candidates_lease_id", "candidates", ["lease_id"])
    op.create_index("ix_candidates_status_expiry", "candidates", ["status", "lease_expires_at"])
    op.create_table(
        "measurements", _id(),
        _fk("candidate_id", "candidates.id", nullable=True),
        _fk("job_id", "jobs.id", nullable=True),
        _fk("problem_id", "problems.id"),
        sa.Column("gpu_model", sa.String(200), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("config_key", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("median_us", sa.Float(), nullable=True),
        sa.Column("p20_us", sa.Float(), nullable=True),
        sa.Column("p80_us", sa.Float(), nullable=True),
        sa.Column("reps", sa.Integer(), nullable=False),
        sa.Column("rel_error", sa.Float(), nullable=True),
        sa.Column("compile_s", sa.Float(), nullable=True),
        sa.Column("bench_s", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("env", sa.JSON(), nullable=False),
        _fk("worker_id", "workers.id", nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_measurements_candidate_id", "measurements", ["candidate_id"])
    op.create_index("ix_measurements_job_id", "measurements", ["job_id"])
    op.create_index("ix_measurements_lookup", "measurements",
                    ["problem_id", "gpu_model", "backend", "config_key"])


def downgrade() -> None:
    for table in ("measurements", "candidates", "leases", "jobs", "workers", "problems"):
        op.drop_table(table)
