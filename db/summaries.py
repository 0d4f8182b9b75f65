"""Repository of the running totals per problem and GPU model (``tuning_summaries``).

Each stored measurement adds itself in the same transaction (an upsert: SQLite and Postgres
both have ``INSERT ... ON CONFLICT DO UPDATE``), so the totals never disagree with the
measurements; :func:`rebuild` recomputes them from scratch in one ``INSERT ... SELECT`` (the
migration's backfill, and a bulk load that wrote measurements directly).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from db.models import MeasurementRow, SummaryRow
from search.types import Status

_S = SummaryRow.__table__


@dataclass(frozen=True)
class Count:
    """One measurement as its totals count it (:func:`add_many`)."""

    problem_id: int
    gpu_model: str
    kernel: bool  # of a kernel, not a task
    ok: bool
    gpu_s: float
    now: datetime


def add(session: Session, problem_id: int, gpu_model: str, *, kernel: bool, ok: bool,
        gpu_s: float, now: datetime) -> None:
    """Count one measurement (``kernel``: of a kernel, not a task) into its totals."""
    add_many(session, [Count(problem_id, gpu_model, kernel, ok, gpu_s, now)])


def add_many(session: Session, counts: Sequence[Count]) -> None:
    """Count measurements into their totals: one upsert executed for a row per problem and
    GPU model, in key order (two reports that touch the same totals lock them in one
    order)."""
    if not counts:
        return
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    for c in counts:
        row = rows.setdefault((c.problem_id, c.gpu_model), {
            "problem_id": c.problem_id, "gpu_model": c.gpu_model, "trials": 0, "failed": 0,
            "gpu_s": 0.0, "first_at": c.now, "last_at": c.now})
        row["trials"] += int(c.kernel)
        row["failed"] += int(c.kernel and not c.ok)
        row["gpu_s"] += float(c.gpu_s)
        row["first_at"] = min(row["first_at"], c.now)
        row["last_at"] = max(row["last_at"], c.now)
    dialect = session.get_bind().dialect.name
    if dialect not in ("postgresql", "sqlite"):
        raise NotImplementedError(f"tuning_summaries upsert on {dialect}")
    session.execute(_upsert(dialect), [rows[k] for k in sorted(rows)])


@functools.cache
def _upsert(dialect: str) -> Any:
    """:func:`add_many`'s upsert of one row (executed for many), built once per dialect."""
    module: Any = postgresql if dialect == "postgresql" else sqlite
    stmt = module.insert(_S)
    new = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[_S.c.problem_id, _S.c.gpu_model],
        set_={"trials": _S.c.trials + new.trials, "failed": _S.c.failed + new.failed,
              "gpu_s": _S.c.gpu_s + new.gpu_s,
              "last_at": case((_S.c.last_at < new.last_at, new.last_at), else_=_S.c.last_at)})


def released(session: Session, problem_id: int, gpu_model: str) -> None:
    """A held kernel measurement (counted as failed) was confirmed: count it as ok."""
    session.execute(update(_S).where(_S.c.problem_id == problem_id, _S.c.gpu_model == gpu_model,
                                     _S.c.failed > 0).values(failed=_S.c.failed - 1))


def rebuild(session: Session) -> int:
    """Recompute every total from the measurements; returns how many rows it wrote."""
    m = MeasurementRow
    kernel = m.task.is_(None)
    source = (select(m.problem_id, m.gpu_model,
                     func.coalesce(func.sum(case((kernel, 1), else_=0)), 0),
                     func.coalesce(func.sum(case((kernel & (m.status != Status.OK.value), 1),
                                                 else_=0)), 0),
                     func.coalesce(func.sum(func.coalesce(m.compile_s, 0.0)
                                            + func.coalesce(m.bench_s, 0.0)), 0.0),
                     func.min(m.created_at), func.max(m.created_at))
              .group_by(m.problem_id, m.gpu_model))
    session.execute(delete(SummaryRow))
    session.execute(insert(SummaryRow).from_select(
        ["problem_id", "gpu_model", "trials", "failed", "gpu_s", "first_at", "last_at"],
        source))
    return int(session.scalar(select(func.count()).select_from(SummaryRow)) or 0)
