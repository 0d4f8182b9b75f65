"""Repository of device calibrations (one current calibration per GPU model and toolkit)."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from db.models import CalibrationRow
from db.records import CalibrationRecord


def add_calibration(session: Session, gpu_model: str, bandwidth_gbs: float,
                    peak_tflops: dict[str, float], env: dict[str, Any], now: datetime, *,
                    job_id: int | None = None, worker_id: int | None = None,
                    bench_s: float | None = None,
                    peak_low_tflops: dict[str, float] | None = None) -> CalibrationRecord:
    row = CalibrationRow(gpu_model=gpu_model, bandwidth_gbs=bandwidth_gbs,
                         peak_tflops=dict(peak_tflops),
                         peak_low_tflops=dict(peak_low_tflops) if peak_low_tflops else None,
                         env=dict(env), stale=False,
                         job_id=job_id, worker_id=worker_id, bench_s=bench_s, created_at=now)
    session.add(row)
    session.flush()
    return CalibrationRecord.of(row)


def latest(session: Session, gpu_model: str, *, include_stale: bool = False
           ) -> CalibrationRecord | None:
    row = session.scalars(_latest(include_stale), {"gpu_model": gpu_model}).first()
    return CalibrationRecord.of(row) if row is not None else None


@functools.cache
def _latest(include_stale: bool) -> Any:
    """:func:`latest`'s statement, built once (building one costs more than running it)."""
    stmt = select(CalibrationRow).where(CalibrationRow.gpu_model == bindparam("gpu_model"))
    if not include_stale:
        stmt = stmt.where(CalibrationRow.stale.is_(False))
    return stmt.order_by(CalibrationRow.id.desc()).limit(1)


def list_calibrations(session: Session, gpu_model: str | None = None
                      ) -> list[CalibrationRecord]:
    stmt = select(CalibrationRow)
    if gpu_model is not None:
        stmt = stmt.where(CalibrationRow.gpu_model == gpu_model)
    return [CalibrationRecord.of(r) for r in
            session.scalars(stmt.order_by(CalibrationRow.id.desc()).limit(200))]


def mark_stale(session: Session, gpu_model: str) -> int:
    """Ask for a re-run: the next job on this GPU model calibrates again."""
    result = session.execute(update(CalibrationRow)
                             .where(CalibrationRow.gpu_model == gpu_model,
                                    CalibrationRow.stale.is_(False))
                             .values(stale=True))
    return int(result.rowcount)  # type: ignore[attr-defined]
