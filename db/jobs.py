"""Repository of problems and jobs."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, exists, func, insert, or_, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.candidates import awaiting_recheck
from db.models import CandidateRow, JobRow, MeasurementRow, PlanMarkRow, ProblemRow
from db.records import ACTIVE_JOB, OUTSTANDING, JobRecord, JobStatus, ProblemRecord
from search import kinds
from search.types import Problem, parse_problem


def get_or_create_problem(session: Session, problem: Problem, now: datetime) -> ProblemRecord:
    """The row of ``problem``'s canonical key, created on first sight (race-safe)."""
    key = problem.key()
    row = session.scalars(select(ProblemRow).where(ProblemRow.key == key)).first()
    if row is not None:
        return ProblemRecord.of(row)
    try:
        with session.begin_nested():
            row = ProblemRow(key=key, kind=problem.kind, spec=problem.to_dict(), created_at=now,
                             label=kinds.get(problem.kind).shape_label(problem)[:200],
                             dtype=str(problem.dtype)[:32])
            session.add(row)
    except IntegrityError:  # another request inserted the same key first
        row = session.scalars(select(ProblemRow).where(ProblemRow.key == key)).one()
    return ProblemRecord.of(row)


def get_problem(session: Session, problem_id: int) -> ProblemRecord | None:
    row = session.get(ProblemRow, problem_id)
    return ProblemRecord.of(row) if row is not None else None


def find_problem(session: Session, key: str) -> ProblemRecord | None:
    row = session.scalars(select(ProblemRow).where(ProblemRow.key == key)).first()
    return ProblemRecord.of(row) if row is not None else None


def list_problems(session: Session, limit: int, offset: int
                  ) -> tuple[list[tuple[ProblemRecord, int]], int]:
    """Problems newest first, each with its number of kernel measurements, and the total."""
    total = session.scalar(select(func.count()).select_from(ProblemRow)) or 0
    counts = (select(MeasurementRow.problem_id, func.count().label("n"))
              .where(MeasurementRow.task.is_(None))
              .group_by(MeasurementRow.problem_id).subquery())
    rows = session.execute(
        select(ProblemRow, func.coalesce(counts.c.n, 0))
        .outerjoin(counts, counts.c.problem_id == ProblemRow.id)
        .order_by(ProblemRow.id.desc()).limit(limit).offset(offset)).all()
    return [(ProblemRecord.of(p), int(n)) for p, n in rows], int(total)


def create_job(session: Session, problem: ProblemRecord, *, max_trials: int | None,
               max_seconds: float | None, backends: Sequence[str], target_gpu: str | None,
               seed: int, now: datetime, policy: dict[str, Any] | None = None,
               owner: str | None = None) -> JobRecord:
    row = JobRow(problem_id=problem.id, status=JobStatus.QUEUED.value, max_trials=max_trials,
                 max_seconds=max_seconds, backends=list(backends), target_gpu=target_gpu,
                 bound_gpu=None, bound_backends=None, seed=seed, owner=owner,
                 created_at=now, policy=dict(policy or {}), stage=None, exhausted_tiers=[])
    session.add(row)
    session.flush()
    # the problem's row is in the session (read or added by get_or_create_problem): no query
    stored = session.get(ProblemRow, problem.id)
    assert stored is not None
    return JobRecord.of(row, stored)


def count_active(session: Session, owner: str | None = None) -> int:
    """Queued or running jobs, in all or of one ``owner``."""
    if owner is None:
        return int(session.scalar(_COUNT_ACTIVE) or 0)
    return int(session.scalar(_COUNT_ACTIVE.where(JobRow.owner == owner)) or 0)


#: :func:`count_active`'s statement (a submission's), built once.
_COUNT_ACTIVE = (select(func.count()).select_from(JobRow)
                 .where(JobRow.status.in_(ACTIVE_JOB)))


def lock_submissions(session: Session) -> None:
    """Serialise job submissions until the transaction ends, so a count and the insert after
    it are one step: a transaction-level advisory lock on Postgres; on SQLite every write
    transaction already holds the database's write lock (``BEGIN IMMEDIATE``)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SUBMIT_LOCK})


#: The advisory lock key of job submissions (any constant other code does not use).
_SUBMIT_LOCK = 0x6B735F6A6F6273  # "ks_jobs"


def problems_of(session: Session, problem_ids: Sequence[int]) -> dict[int, Problem]:
    """The problems of ``problem_ids`` (those stored), in one query."""
    if not problem_ids:
        return {}
    rows = session.execute(select(ProblemRow.id, ProblemRow.spec)
                           .where(ProblemRow.id.in_(sorted(set(problem_ids)))))
    return {pid: parse_problem(spec) for pid, spec in rows}


def get_job(session: Session, job_id: int, *, lock: bool = False) -> JobRecord | None:
    stmt = select(JobRow, ProblemRow).join(ProblemRow, ProblemRow.id == JobRow.problem_id)
    stmt = stmt.where(JobRow.id == job_id)
    if lock:
        stmt = stmt.with_for_update(of=JobRow)
    row = session.execute(stmt).first()
    if row is None:
        return None
    return JobRecord.of(row[0], row[1])


def get_jobs(session: Session, job_ids: Sequence[int]) -> dict[int, JobRecord]:
    """The jobs of ``job_ids`` that exist, in one query."""
    if not job_ids:
        return {}
    rows = session.execute(_GET_JOBS, {"ids": sorted(set(job_ids))}).all()
    return {j.id: JobRecord.of(j, p) for j, p in rows}


_GET_JOBS = (select(JobRow, ProblemRow).join(ProblemRow, ProblemRow.id == JobRow.problem_id)
             .where(JobRow.id.in_(bindparam("ids", expanding=True))))


def list_jobs(session: Session, limit: int, offset: int) -> tuple[list[JobRecord], int]:
    """Jobs newest first, and the total."""
    total = session.scalar(select(func.count()).select_from(JobRow)) or 0
    rows = session.execute(
        select(JobRow, ProblemRow).join(ProblemRow, ProblemRow.id == JobRow.problem_id)
        .order_by(JobRow.id.desc()).limit(limit).offset(offset)).all()
    return [JobRecord.of(j, p) for j, p in rows], int(total)


def eligible_jobs(session: Session, gpu_model: str, *, after: int = 0,
                  limit: int | None = None) -> list[JobRecord]:
    """Active jobs a worker of ``gpu_model`` may serve, oldest first (FIFO): those after job
    ``after``, at most ``limit`` of them (a lease reads a page at a time, not the queue)."""
    stmt = (select(JobRow, ProblemRow).join(ProblemRow, ProblemRow.id == JobRow.problem_id)
            .where(JobRow.status.in_(ACTIVE_JOB), JobRow.id > after,
                   or_(JobRow.target_gpu.is_(None), JobRow.target_gpu == gpu_model),
                   or_(JobRow.bound_gpu.is_(None), JobRow.bound_gpu == gpu_model))
            .order_by(JobRow.id))
    rows = session.execute(stmt.limit(limit) if limit is not None else stmt).all()
    return [JobRecord.of(j, p) for j, p in rows]


def bind_job(session: Session, job_id: int, gpu_model: str, backends: Sequence[str],
             now: datetime) -> bool:
    """Bind a queued, unbound job to ``gpu_model``; False when someone else bound it first.
    The table is written directly: read the job after it (``get_job``), not before."""
    result = session.execute(_BIND, _bind_params(job_id, gpu_model, backends, now))
    return bool(result.rowcount)  # type: ignore[attr-defined]


def bind_and_mark(session: Session, job_id: int, gpu_model: str, backends: Sequence[str],
                  now: datetime) -> bool:
    """:func:`bind_job`, and :func:`mark_due` the job if it was bound: on Postgres in one
    statement (the update's row feeds the mark's insert)."""
    if session.get_bind().dialect.name != "postgresql":
        bound = bind_job(session, job_id, gpu_model, backends, now)
        if bound:
            mark_due(session, [job_id])
        return bound
    marked = session.execute(_BIND_AND_MARK, _bind_params(job_id, gpu_model, backends,
                                                          now)).all()
    return bool(marked)


_J = JobRow.__table__
#: The binding of a queued, unbound job to a GPU model (:func:`bind_job`), built once.
_BIND = (update(_J)
         .where(_J.c.id == bindparam("job"), _J.c.bound_gpu.is_(None),
                _J.c.status == JobStatus.QUEUED.value)
         .values(bound_gpu=bindparam("gpu"),
                 bound_backends=bindparam("with_backends", type_=_J.c.bound_backends.type),
                 status=JobStatus.RUNNING.value,
                 started_at=bindparam("at", type_=_J.c.started_at.type)))


def _bind_params(job_id: int, gpu_model: str, backends: Sequence[str], now: datetime
                 ) -> dict[str, Any]:
    return {"job": job_id, "gpu": gpu_model, "with_backends": list(backends), "at": now}


def _bind_and_mark() -> Any:
    """:data:`_BIND` feeding the plan mark's insert with the id it bound (Postgres)."""
    bound = _BIND.returning(_J.c.id).cte("bound")
    marks = PlanMarkRow.__table__
    return insert(marks).from_select(["job_id"], select(bound.c.id)).returning(marks.c.job_id)


#: :func:`bind_and_mark`'s statement on Postgres, built once.
_BIND_AND_MARK = _bind_and_mark()


def mark_exhausted(session: Session, job_id: int, tier: str) -> None:
    """Record that the custom search ran out of configurations in ``tier`` for this job."""
    row = session.get(JobRow, job_id)
    if row is not None and tier not in (row.exhausted_tiers or []):
        row.exhausted_tiers = [*(row.exhausted_tiers or []), tier]
        session.flush()


def set_stage(session: Session, job_id: int, stage: str) -> None:
    session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.stage.is_distinct_from(stage))
                    .values(stage=stage))


def jobs_of_problem(session: Session, problem_id: int) -> list[JobRecord]:
    rows = session.execute(
        select(JobRow, ProblemRow).join(ProblemRow, ProblemRow.id == JobRow.problem_id)
        .where(JobRow.problem_id == problem_id).order_by(JobRow.id)).all()
    return [JobRecord.of(j, p) for j, p in rows]


def finish_job(session: Session, job_id: int, status: JobStatus, now: datetime,
               error: str | None = None) -> None:
    session.execute(update(JobRow).where(JobRow.id == job_id)
                    .values(status=status.value, finished_at=now, error=error))


def mark_due(session: Session, job_ids: Sequence[int]) -> None:
    """Mark the jobs for the planner (``service.planner``): something the decision loop reads
    changed. Written in the transaction of the change, so the mark commits with it; an insert,
    so it never waits for a planner holding the job's row."""
    ids = sorted(set(job_ids))
    if ids:
        session.execute(_MARK, [{"job_id": j} for j in ids])


_MARK = insert(PlanMarkRow.__table__)


def claim_due(session: Session, limit: int) -> list[int]:
    """The jobs of up to ``limit`` marks, oldest mark first, their marks deleted: this planner
    plans them (another planner skips the marks locked here; a change committed after the
    claim marks the job again, so nothing is planned on stale evidence for long)."""
    oldest = (select(PlanMarkRow.id).order_by(PlanMarkRow.id).limit(limit)
              .with_for_update(skip_locked=True).scalar_subquery())
    ids = sorted(set(session.scalars(
        delete(PlanMarkRow).where(PlanMarkRow.id.in_(oldest)).returning(PlanMarkRow.job_id))))
    if ids:  # the same jobs' other marks: planned now too (those another planner holds stay)
        others = (select(PlanMarkRow.id).where(PlanMarkRow.job_id.in_(ids))
                  .with_for_update(skip_locked=True).scalar_subquery())
        session.execute(delete(PlanMarkRow).where(PlanMarkRow.id.in_(others)))
    return ids


def is_marked(session: Session, job_id: int) -> bool:
    """Whether the job waits for the planner."""
    return session.scalar(select(exists().where(PlanMarkRow.job_id == job_id))) or False


def running_with_deadline(session: Session) -> list[JobRecord]:
    """Running jobs with a time budget (the planner finishes those whose time ran out)."""
    rows = session.execute(
        select(JobRow, ProblemRow).join(ProblemRow, ProblemRow.id == JobRow.problem_id)
        .where(JobRow.status == JobStatus.RUNNING.value, JobRow.max_seconds.is_not(None))
        .order_by(JobRow.id)).all()
    return [JobRecord.of(j, p) for j, p in rows]


def held_waits_over(session: Session, stage: str, held_before: datetime) -> list[int]:
    """Running jobs in ``stage`` (their decision waits for the re-measurement of held
    results) none of whose results still queued for re-measurement was held after
    ``held_before``: their wait is over."""
    recent = exists().where(CandidateRow.job_id == JobRow.id, *awaiting_recheck(),
                            MeasurementRow.created_at > held_before)
    return list(session.scalars(
        select(JobRow.id).where(JobRow.status == JobStatus.RUNNING.value,
                                JobRow.stage == stage, ~recent)
        .order_by(JobRow.id)))


def unbound_jobs(session: Session, gpu_model: str, *, after: int = 0, limit: int = 32,
                 lock: bool = False) -> list[JobRecord]:
    """Queued jobs no worker has bound yet that a worker of ``gpu_model`` may start, oldest
    first, after job ``after``. ``lock``: row-locked, passing over the rows another
    transaction holds (``SKIP LOCKED``), so that leases binding jobs at once each take
    another job instead of queueing on the oldest one's lock."""
    rows = session.execute(_unbound(lock), {"gpu_model": gpu_model, "after": after,
                                            "limit": limit}).all()
    return [JobRecord.of(j, p) for j, p in rows]


@functools.cache
def _unbound(lock: bool) -> Any:
    """:func:`unbound_jobs`' statement, built once (building one costs more than running
    it)."""
    stmt = (select(JobRow, ProblemRow).join(ProblemRow, ProblemRow.id == JobRow.problem_id)
            .where(JobRow.status == JobStatus.QUEUED.value, JobRow.bound_gpu.is_(None),
                   JobRow.id > bindparam("after"),
                   or_(JobRow.target_gpu.is_(None),
                       JobRow.target_gpu == bindparam("gpu_model")))
            .order_by(JobRow.id).limit(bindparam("limit")))
    return stmt.with_for_update(of=JobRow, skip_locked=True) if lock else stmt


def running_idle(session: Session) -> list[int]:
    """Running jobs with nothing pending or leased: each waits for planning alone."""
    return list(session.scalars(
        select(JobRow.id).where(
            JobRow.status == JobStatus.RUNNING.value,
            ~exists().where(PlanMarkRow.job_id == JobRow.id),
            ~exists().where(CandidateRow.job_id == JobRow.id,
                            CandidateRow.status.in_(OUTSTANDING)))
        .order_by(JobRow.id)))
