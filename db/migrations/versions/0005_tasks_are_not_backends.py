"""Tasks get their own column: ``candidates.task`` and ``measurements.task``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

Calibrations and verifications were stored as fake backends (``backend`` 'calibrate' or
'verify'). The upgrade moves them to ``task`` and leaves their ``backend`` NULL; a check
constraint keeps every row a kernel or a task. Since ``GET /v1/problems/{id}/trials`` now lists
kernels only, each decision whose job ran a verification gets that verification's per-round
medians in its evidence (``verification``), as the service writes them from now on.

The downgrade moves tasks back into ``backend``; the evidence keeps ``verification`` (older
code reads the keys it knows and ignores it).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TABLES = ("candidates", "measurements")
TASKS = ("calibrate", "verify")
CHECK = "(backend IS NULL) <> (task IS NULL)"


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("task", sa.String(32), nullable=True))
            batch.alter_column("backend", existing_type=sa.String(32), nullable=True)
        op.execute(f"UPDATE {table} SET task = backend, backend = NULL "
                   f"WHERE backend IN {TASKS!r}")
        with op.batch_alter_table(table) as batch:
            batch.create_check_constraint(f"ck_{table}_backend_or_task", CHECK)
    _verification_into_decisions()


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"ck_{table}_backend_or_task", type_="check")
        op.execute(f"UPDATE {table} SET backend = task WHERE task IS NOT NULL")
        with op.batch_alter_table(table) as batch:
            batch.alter_column("backend", existing_type=sa.String(32), nullable=False)
            batch.drop_column("task")


def _verification_into_decisions() -> None:
    """Copy each decided job's latest verification (its rounds) into the decision's evidence,
    in the shape ``service.agent_loop`` writes."""
    decisions = sa.table("decisions", sa.column("id", sa.Integer), sa.column("job_id"),
                         sa.column("evidence", sa.JSON))
    measurements = sa.table("measurements", sa.column("id", sa.Integer), sa.column("job_id"),
                            sa.column("task"),
                            sa.column("status"), sa.column("error"),
                            sa.column("compile_s", sa.Float), sa.column("bench_s", sa.Float),
                            sa.column("config", sa.JSON), sa.column("extra", sa.JSON))
    bind = op.get_bind()
    for d_id, job_id, evidence in bind.execute(
            sa.select(decisions.c.id, decisions.c.job_id, decisions.c.evidence)
            .where(decisions.c.job_id.is_not(None))).all():
        m = bind.execute(sa.select(measurements)
                         .where(measurements.c.job_id == job_id,
                                measurements.c.task == "verify")
                         .order_by(measurements.c.id.desc()).limit(1)).first()
        if m is None or not isinstance(evidence, dict) or "verification" in evidence:
            continue
        bind.execute(sa.update(decisions).where(decisions.c.id == d_id)
                     .values(evidence={**evidence, "verification": _rounds(m)}))


def _rounds(m: Any) -> dict[str, Any]:
    config, extra = dict(m.config or {}), dict(m.extra or {})

    def ident(key: str) -> int | None:
        return int(config[key]) if config.get(key) is not None else None

    return {"status": m.status, "error": m.error,
            "rounds": len(extra.get("library_us") or ()),
            "library_id": ident("library_id"), "custom_id": ident("custom_id"),
            "reference_id": ident("reference_id"),
            "library_us": [float(x) for x in extra.get("library_us") or ()],
            "custom_us": [float(x) for x in extra.get("custom_us") or ()],
            "reference_us": [float(x) for x in extra.get("reference_us") or ()],
            "gpu_s": float(m.compile_s or 0.0) + float(m.bench_s or 0.0)}
