"""Repository of measurements: storing them, the best per job and per problem, the history."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, case, func, insert, literal, select, union_all
from sqlalchemy.orm import Session

from db import summaries
from db.models import CandidateRow, MeasurementRow
from db.records import CandidateRecord, MeasurementRecord
from search.types import INTERPRETER_GPU, Measurement, Status

_OK = Status.OK.value
_M = MeasurementRow.__table__
_INSERT = insert(_M)
#: Measurements of one kernel, not of a task (calibration, verification).
_KERNEL = MeasurementRow.task.is_(None)


@dataclass(frozen=True)
class Reported:
    """A measurement to store with :func:`add_measurements`: of ``candidate`` on
    ``gpu_model``; ``precision``: what the kernel computes in when below the problem's input
    precision (``ProblemKind.precision_of``)."""

    candidate: CandidateRecord
    gpu_model: str
    measurement: Measurement
    worker_id: int | None
    now: datetime
    precision: str | None = None


def add_measurements(session: Session, items: Sequence[Reported]) -> None:
    """Store several measurements in one statement and count them into their totals with one
    upsert (``db.summaries.add_many``): what a report of several results writes."""
    if not items:
        return
    session.execute(_INSERT, [_values(r) for r in items])
    summaries.add_many(session, [
        summaries.Count(r.candidate.problem_id, r.gpu_model, kernel=r.candidate.task is None,
                        ok=r.measurement.ok, gpu_s=_gpu_s(r.measurement), now=r.now)
        for r in items])


def _values(r: Reported) -> dict[str, Any]:
    c, m = r.candidate, r.measurement
    return {"candidate_id": c.id, "job_id": c.job_id, "problem_id": c.problem_id,
            "gpu_model": r.gpu_model, "backend": c.backend, "task": c.task,
            "config": dict(c.config), "config_key": c.config_key, "status": str(m.status),
            "median_us": m.median_us, "p20_us": m.p20_us, "p80_us": m.p80_us, "reps": m.reps,
            "rel_error": m.rel_error, "compile_s": m.compile_s, "bench_s": m.bench_s,
            "error": m.error, "env": dict(m.env), "extra": dict(m.extra) or None,
            "worker_id": r.worker_id, "created_at": r.now, "precision": r.precision}


def _gpu_s(m: Measurement) -> float:
    return float(m.compile_s or 0.0) + float(m.bench_s or 0.0)


def find_known(session: Session, problem_id: int, gpu_model: str, backend: str,
               key: str) -> MeasurementRecord | None:
    """A stored measurement of this configuration: the fastest ok one, else the latest."""
    row = session.scalars(
        select(MeasurementRow)
        .where(MeasurementRow.problem_id == problem_id, MeasurementRow.gpu_model == gpu_model,
               MeasurementRow.backend == backend, MeasurementRow.config_key == key)
        .order_by(case((MeasurementRow.status == _OK, 0), else_=1),
                  MeasurementRow.median_us, MeasurementRow.id.desc())
        .limit(1)).first()
    return MeasurementRecord.of(row) if row is not None else None


def built_ops(session: Session, problem_id: int, gpu_model: str, backend: str) -> set[str]:
    """The ``op`` of every configuration of ``backend`` measured for this problem on this GPU
    model that got past compiling: a worker has built it (CUTLASS: an nvcc artifact)."""
    rows = session.scalars(
        select(MeasurementRow.config)
        .where(MeasurementRow.problem_id == problem_id, MeasurementRow.gpu_model == gpu_model,
               MeasurementRow.backend == backend,
               MeasurementRow.status.not_in((Status.COMPILE_ERROR.value,
                                             Status.CRASHED.value)))).all()
    return {str(c["op"]) for c in rows if isinstance(c, dict) and "op" in c}


def _fastest_stmt(*where: Any, backend: str | tuple[str, ...] | None,
                  exact: bool = False) -> Select[Any]:
    stmt = select(_M).where(*where, _M.c.status == _OK, _M.c.median_us.is_not(None),
                            _M.c.task.is_(None))
    if exact:
        stmt = stmt.where(_M.c.precision.is_(None))
    if isinstance(backend, str):
        stmt = stmt.where(_M.c.backend == backend)
    elif backend is not None:
        stmt = stmt.where(_M.c.backend.in_(backend))
    return stmt.order_by(_M.c.median_us, _M.c.id).limit(1)


def _fastest(session: Session, *where: Any, backend: str | tuple[str, ...] | None,
             exact: bool = False) -> MeasurementRecord | None:
    row = session.execute(_fastest_stmt(*where, backend=backend, exact=exact)).first()
    return MeasurementRecord.of(row) if row is not None else None  # type: ignore[arg-type]


def job_best(session: Session, job_id: int, backend: str | tuple[str, ...] | None = None
             ) -> MeasurementRecord | None:
    """The job's fastest ok measurement (optionally of one backend, or of several)."""
    return _fastest(session, MeasurementRow.job_id == job_id, backend=backend)


def problem_best(session: Session, problem_id: int, gpu_model: str,
                 backend: str | tuple[str, ...] | None = None, *, exact: bool = False
                 ) -> MeasurementRecord | None:
    """The fastest ok measurement of a problem on a GPU model (optionally of one backend, or of
    several; ``exact``: of a kernel computing in the problem's input precision)."""
    return _fastest(session, MeasurementRow.problem_id == problem_id,
                    MeasurementRow.gpu_model == gpu_model, backend=backend, exact=exact)


def problem_bests(session: Session, problem_id: int, gpu_model: str,
                  backends: tuple[str, ...], *, exact: bool = False
                  ) -> tuple[MeasurementRecord | None, MeasurementRecord | None]:
    """:func:`problem_best` of any backend and of ``backends``, in one statement."""
    found: dict[int, MeasurementRecord] = {}
    rows = session.execute(_bests_statement(exact), {"problem_id": problem_id,
                                                     "gpu_model": gpu_model,
                                                     "backends": list(backends)})
    for row in rows:
        found[int(row.part)] = MeasurementRecord.of(row)  # type: ignore[arg-type]
    return found.get(0), found.get(1)


@functools.cache
def _bests_statement(exact: bool) -> Any:
    """:func:`problem_bests`'s statement, built once (a union's structure is costly to build
    and to read results by, each time)."""
    where = (_M.c.problem_id == bindparam("problem_id"),
             _M.c.gpu_model == bindparam("gpu_model"))
    every = _fastest_stmt(*where, backend=None, exact=exact)
    some = _fastest_stmt(*where, _M.c.backend.in_(bindparam("backends", expanding=True)),
                         backend=None, exact=exact)
    parts = [stmt.add_columns(literal(n).label("part")).subquery()
             for n, stmt in enumerate((every, some))]
    return union_all(*(select(p) for p in parts))


def latest_gpu(session: Session, problem_id: int) -> str | None:
    """The GPU model with the most recent ok kernel measurement, real GPUs before the
    interpreter."""
    return session.scalars(_LATEST_GPU, {"problem_id": problem_id}).first()


#: :func:`latest_gpu`'s statement, built once (building one costs more than running it).
_LATEST_GPU = (select(MeasurementRow.gpu_model)
               .where(MeasurementRow.problem_id == bindparam("problem_id"),
                      MeasurementRow.status == _OK, _KERNEL)
               .order_by(case((MeasurementRow.gpu_model == INTERPRETER_GPU, 1), else_=0),
                         MeasurementRow.created_at.desc(), MeasurementRow.id.desc())
               .limit(1))


def list_trials(session: Session, problem_id: int, limit: int, offset: int,
                gpu_model: str | None = None
                ) -> tuple[list[tuple[MeasurementRecord, int | None]], int]:
    """A problem's kernel measurements (no tasks), newest first, each with its candidate's
    Optuna trial number."""
    where = [MeasurementRow.problem_id == problem_id, _KERNEL]
    if gpu_model is not None:
        where.append(MeasurementRow.gpu_model == gpu_model)
    total = session.scalar(select(func.count()).select_from(MeasurementRow).where(*where)) or 0
    rows = session.execute(
        select(MeasurementRow, CandidateRow.trial_number)
        .outerjoin(CandidateRow, CandidateRow.id == MeasurementRow.candidate_id)
        .where(*where).order_by(MeasurementRow.id.desc()).limit(limit).offset(offset)).all()
    return [(MeasurementRecord.of(m), t) for m, t in rows], int(total)


def of_tasks(session: Session, job_ids: list[int], task: str) -> dict[int, MeasurementRecord]:
    """Each job's latest ok measurement of ``task`` (e.g. the calibration it ran)."""
    out: dict[int, MeasurementRecord] = {}
    if not job_ids:
        return out
    rows = session.scalars(select(MeasurementRow)
                           .where(MeasurementRow.job_id.in_(job_ids), MeasurementRow.task == task,
                                  MeasurementRow.status == _OK)
                           .order_by(MeasurementRow.id.desc()))
    for row in rows:
        out.setdefault(int(row.job_id or 0), MeasurementRecord.of(row))
    return out


def has_measurement(session: Session, candidate_id: int) -> bool:
    return session.scalar(select(MeasurementRow.id)
                          .where(MeasurementRow.candidate_id == candidate_id).limit(1)) is not None


def of_candidates(session: Session, candidate_ids: list[int]) -> dict[int, MeasurementRecord]:
    """The measurement of each candidate that has one (the first, if ever two)."""
    out: dict[int, MeasurementRecord] = {}
    for i in range(0, len(candidate_ids), 500):
        rows = session.execute(_OF_CANDIDATES, {"ids": candidate_ids[i:i + 500]})
        for row in rows:
            out.setdefault(int(row.candidate_id), MeasurementRecord.of(row))  # type: ignore[arg-type]
    return out


#: :func:`of_candidates`' statement, built once.
_OF_CANDIDATES = (select(_M).where(_M.c.candidate_id.in_(bindparam("ids", expanding=True)))
                  .order_by(_M.c.id))


def held_of_job(session: Session, job_id: int) -> list[MeasurementRecord]:
    """The job's measurements held for re-measurement (status ``held``), oldest first."""
    rows = session.scalars(select(MeasurementRow)
                           .where(MeasurementRow.job_id == job_id,
                                  MeasurementRow.status == Status.HELD.value)
                           .order_by(MeasurementRow.id))
    return [MeasurementRecord.of(r) for r in rows]


def settle_held(session: Session, measurement: MeasurementRecord, *, confirmed: bool,
                error: str | None, extra: dict[str, Any]) -> MeasurementRecord:
    """Release a held measurement (``confirmed``: status ok, counted as ok in its totals) or
    keep it held with ``error`` saying why; ``extra`` records the re-measurement."""
    row = session.get(MeasurementRow, measurement.id)
    assert row is not None
    row.status = Status.OK.value if confirmed else Status.HELD.value
    row.error = error
    row.extra = {**(row.extra or {}), **extra}
    session.flush()
    if confirmed:
        summaries.released(session, row.problem_id, row.gpu_model)
    return MeasurementRecord.of(row)
