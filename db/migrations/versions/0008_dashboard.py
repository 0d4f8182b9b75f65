"""What the dashboard sorts, filters and sums in SQL: running totals, shape labels, savings.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26

- ``tuning_summaries``: per problem and GPU model, the kernel measurements (``trials``), those
  that failed, the GPU-seconds of every measurement, the first and last measurement time.
  ``db.summaries`` keeps it as measurements are stored; the upgrade fills it from the
  measurements in one ``INSERT ... SELECT``.
- ``problems.label``: the shape as people write it (GEMM ``64x48x80``), searched by the
  dashboard's shape box; ``problems.dtype``: the problem's dtype, filtered and sorted by.
- ``decisions.saved_gpu_s``: the GPU-seconds a decision's early stops left unspent.
- Indexes: ``ix_decisions_in_force``, a partial index of the decisions in force covering
  what the dashboard's lists read of them (a decision row's evidence runs to many kilobytes,
  and on SQLite a column stored after it costs a walk through its overflow pages);
  ``ix_jobs_created_at`` for the jobs list, newest first; ``ix_tuning_summaries_gpu`` for
  the GPU model filter and its choices.

The two columns are filled for existing rows by the code that fills them for new ones
(``search.kinds``' ``shape_label``, ``search.decision.early_stop_savings``), so old and new
rows agree; a problem of a kind that is not loaded keeps a NULL label (the dashboard shows its
key). Like 0001, the schema here is a snapshot: it does not import ``db.models``.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
#: a covering index of the decisions in force (what the dashboard's lists read of them)
IN_FORCE_COLUMNS = ("problem_id", "gpu_model", "superseded_at", "verdict", "backend", "speedup",
                    "median_us", "attainable_us", "saved_gpu_s")


def upgrade() -> None:
    op.create_table(
        "tuning_summaries",
        sa.Column("problem_id", _ID, sa.ForeignKey("problems.id"), primary_key=True,
                  nullable=False),
        sa.Column("gpu_model", sa.String(200), primary_key=True, nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("gpu_s", sa.Float(), nullable=False),
        sa.Column("first_at", sa.DateTime(), nullable=False),
        sa.Column("last_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_tuning_summaries_gpu", "tuning_summaries", ["gpu_model"])
    with op.batch_alter_table("problems") as batch:
        batch.add_column(sa.Column("label", sa.String(200), nullable=True))
        batch.add_column(sa.Column("dtype", sa.String(32), nullable=True))
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("saved_gpu_s", sa.Float(), nullable=True))
    where = sa.text("superseded_at IS NULL")
    op.create_index("ix_decisions_in_force", "decisions", list(IN_FORCE_COLUMNS),
                    sqlite_where=where, postgresql_where=where)
    op.create_index("ix_jobs_created_at", "jobs", ["created_at"])
    op.execute(
        "INSERT INTO tuning_summaries "
        "(problem_id, gpu_model, trials, failed, gpu_s, first_at, last_at) "
        "SELECT problem_id, gpu_model, "
        "COALESCE(SUM(CASE WHEN task IS NULL THEN 1 ELSE 0 END), 0), "
        "COALESCE(SUM(CASE WHEN task IS NULL AND status <> 'ok' THEN 1 ELSE 0 END), 0), "
        "COALESCE(SUM(COALESCE(compile_s, 0.0) + COALESCE(bench_s, 0.0)), 0.0), "
        "MIN(created_at), MAX(created_at) "
        "FROM measurements GROUP BY problem_id, gpu_model")
    _labels()
    _savings()


def downgrade() -> None:
    op.drop_index("ix_jobs_created_at", "jobs")
    op.drop_index("ix_decisions_in_force", "decisions")
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("saved_gpu_s")
    with op.batch_alter_table("problems") as batch:
        batch.drop_column("dtype")
        batch.drop_column("label")
    op.drop_index("ix_tuning_summaries_gpu", "tuning_summaries")
    op.drop_table("tuning_summaries")


def _labels() -> None:
    from search import kinds
    from search.types import ProblemError, parse_problem

    problems = sa.table("problems", sa.column("id", sa.Integer), sa.column("spec", sa.JSON),
                        sa.column("label", sa.String), sa.column("dtype", sa.String))
    bind = op.get_bind()
    for p_id, spec in bind.execute(sa.select(problems.c.id, problems.c.spec)).all():
        try:
            problem = parse_problem(spec)
            label = kinds.get(problem.kind).shape_label(problem)[:200]
        except (ProblemError, TypeError, ValueError):
            continue  # a kind not loaded here: the dashboard shows the key
        bind.execute(sa.update(problems).where(problems.c.id == p_id)
                     .values(label=label, dtype=str(problem.dtype)[:32]))


def _savings() -> None:
    from search.decision import early_stop_savings

    decisions = sa.table("decisions", sa.column("id", sa.Integer), sa.column("job_id"),
                         sa.column("evidence", sa.JSON), sa.column("saved_gpu_s", sa.Float))
    jobs = sa.table("jobs", sa.column("id", sa.Integer), sa.column("max_trials", sa.Integer))
    bind = op.get_bind()
    rows = bind.execute(sa.select(decisions.c.id, decisions.c.evidence, jobs.c.max_trials)
                        .select_from(decisions.outerjoin(jobs, jobs.c.id == decisions.c.job_id))
                        ).all()
    for d_id, evidence, max_trials in rows:
        ev: dict[str, Any] = evidence if isinstance(evidence, dict) else {}
        saved = early_stop_savings(ev.get("spend") or {}, max_trials,
                                   bool((ev.get("policy") or {}).get("full_search")))
        if saved is not None:
            bind.execute(sa.update(decisions).where(decisions.c.id == d_id)
                         .values(saved_gpu_s=saved))
