"""``measurements.precision``, ``decisions.precision`` and ``decisions.rel_error``.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

A kernel may compute below its problem's input precision where a job's policy allows it (fp8
e4m3 for a bf16 GEMM, tf32 for fp32): ``measurements.precision`` names that precision (NULL:
the input precision), so ``GET /v1/best?exact=true`` can leave such kernels out, and a decision
states the precision and the measured error of the kernel it serves.

Rows written before are backfilled: tf32 measurements are the Triton configurations with
``INPUT_PRECISION`` tf32 and cuBLAS's with ``allow_tf32`` (no other lower precision existed); a
decision's precision is its pick's (tf32 likewise, else the problem's dtype) and its error the
pick's measured one. A snapshot like 0001: it does not import ``db.models``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

#: Canonical config keys (``search.types.config_key``) of the tf32 kernels stored before 0007.
_TF32_KEYS = ('%"INPUT_PRECISION":"tf32"%', '%"allow_tf32":true%')


def _tf32(config_key: str | None) -> bool:
    key = config_key or ""
    return any(pattern.strip("%") in key for pattern in _TF32_KEYS)


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("precision", sa.String(16), nullable=True))
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("precision", sa.String(16), nullable=True))
        batch.add_column(sa.Column("rel_error", sa.Float(), nullable=True))

    measurements = sa.table("measurements", sa.column("id"), sa.column("candidate_id"),
                            sa.column("backend"), sa.column("config_key"),
                            sa.column("precision"), sa.column("rel_error"))
    decisions = sa.table("decisions", sa.column("id"), sa.column("problem_id"),
                         sa.column("chosen"), sa.column("evidence", sa.JSON),
                         sa.column("precision"), sa.column("rel_error"))
    problems = sa.table("problems", sa.column("id"), sa.column("spec", sa.JSON))
    bind = op.get_bind()
    bind.execute(measurements.update()
                 .where(measurements.c.backend.in_(("triton", "cublas")),
                        sa.or_(*(measurements.c.config_key.like(p) for p in _TF32_KEYS)))
                 .values(precision="tf32"))
    dtypes = {pid: (spec or {}).get("dtype") for pid, spec in
              bind.execute(sa.select(problems.c.id, problems.c.spec))}
    rows = bind.execute(sa.select(decisions.c.id, decisions.c.problem_id, decisions.c.chosen,
                                  decisions.c.evidence)).all()
    for did, pid, chosen, evidence in rows:
        pick = (evidence or {}).get(chosen) or {}
        candidate = pick.get("candidate_id")
        found = bind.execute(sa.select(measurements.c.config_key, measurements.c.rel_error)
                             .where(measurements.c.candidate_id == candidate)
                             .order_by(measurements.c.id).limit(1)).first() \
            if candidate is not None else None
        precision = "tf32" if found is not None and _tf32(found[0]) else dtypes.get(pid)
        bind.execute(decisions.update().where(decisions.c.id == did)
                     .values(precision=precision,
                             rel_error=found[1] if found is not None else None))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("rel_error")
        batch.drop_column("precision")
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("precision")
