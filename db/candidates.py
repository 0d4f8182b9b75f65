"""Repository of candidates and leases.

Leasing locks the rows it hands out with ``SELECT ... FOR UPDATE SKIP LOCKED`` so two workers
(or two API replicas) never get the same candidate on Postgres; SQLite ignores the clause and
serialises writers with ``BEGIN IMMEDIATE`` instead.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, case, exists, func, insert, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from db.models import CandidateRow, JobRow, LeaseRow, MeasurementRow, WorkerRow
from db.records import (
    ACTIVE_JOB,
    OUTSTANDING,
    TERMINAL,
    CandidateRecord,
    CandidateStatus,
    Expired,
    JobCounts,
    JobStatus,
    LeaseRecord,
)
from search.types import Status, config_key

#: The table, for statements that need no ORM bookkeeping (no identity map to keep in step).
_C = CandidateRow.__table__


def add_candidates(session: Session, job_id: int, problem_id: int, backend: str,
                   items: Iterable[tuple[dict[str, Any], int | None]], now: datetime,
                   tier: str | None = None) -> list[CandidateRecord]:
    """Insert pending candidates: one per ``(config, optuna trial number or None)``."""
    rows = [CandidateRow(job_id=job_id, problem_id=problem_id, backend=backend,
                         config=dict(config), config_key=config_key(config),
                         trial_number=trial, tier=tier, status=CandidateStatus.PENDING.value,
                         attempts=0, created_at=now)
            for config, trial in items]
    session.add_all(rows)
    session.flush()
    return [CandidateRecord.of(r) for r in rows]


def add_task(session: Session, job_id: int, problem_id: int, task: str, config: dict[str, Any],
             now: datetime) -> CandidateRecord:
    """Insert a pending task (``search.types.Task``): leased like a candidate, no backend."""
    row = CandidateRow(job_id=job_id, problem_id=problem_id, backend=None, task=task,
                       config=dict(config), config_key=config_key(config), trial_number=None,
                       tier=None, status=CandidateStatus.PENDING.value, attempts=0,
                       created_at=now)
    session.add(row)
    session.flush()
    return CandidateRecord.of(row)


def job_counts(session: Session, job_id: int, library_tier: str | None = None) -> JobCounts:
    """The job's candidates by state; ``library_tier``: the problem kind's library-side search
    tier, whose trials have their own budget and are not counted as custom trials."""
    c = CandidateRow
    # custom-search trials (what the trial budget counts): a tier, not the library search's
    custom = c.tier.is_not(None)
    if library_tier is not None:
        custom = custom & (c.tier != library_tier)

    def count(cond: Any) -> Any:
        return func.coalesce(func.sum(case((cond, 1), else_=0)), 0)

    row = session.execute(select(
        count(c.status == CandidateStatus.PENDING.value),
        count(c.status == CandidateStatus.LEASED.value),
        count(custom),
        count(custom & c.status.in_(TERMINAL)),
        count(c.status == CandidateStatus.DONE.value),
        count(c.status == CandidateStatus.FAILED.value),
    ).where(c.job_id == job_id)).one()
    return JobCounts(*(int(v) for v in row))


def get_candidate(session: Session, candidate_id: int, *, lock: bool = False
                  ) -> CandidateRecord | None:
    stmt = select(CandidateRow).where(CandidateRow.id == candidate_id)
    if lock:
        stmt = stmt.with_for_update()
    row = session.scalars(stmt).first()
    return CandidateRecord.of(row) if row is not None else None


def lock_candidates(session: Session, ids: Sequence[int]) -> dict[int, CandidateRecord]:
    """The candidates of ``ids`` that exist, read in one statement with their rows locked in id
    order (two transactions locking overlapping sets never wait on each other in a circle)."""
    if not ids:
        return {}
    rows = session.execute(_LOCK, {"ids": sorted(set(ids))})
    return {int(r.id): CandidateRecord.of(r) for r in rows}  # type: ignore[arg-type]


_LOCK = (select(*_C.c).where(_C.c.id.in_(bindparam("ids", expanding=True)))
         .order_by(_C.c.id).with_for_update())


def job_candidates(session: Session, job_id: int) -> list[CandidateRecord]:
    rows = session.scalars(select(CandidateRow).where(CandidateRow.job_id == job_id)
                           .order_by(CandidateRow.id))
    return [CandidateRecord.of(r) for r in rows]


def finish_candidate(session: Session, candidate_id: int, status: CandidateStatus,
                     reason: str | None = None) -> None:
    session.execute(update(CandidateRow).where(CandidateRow.id == candidate_id)
                    .values(status=status.value, failure_reason=reason))


def finish_candidates(session: Session,
                      finished: Sequence[tuple[int, CandidateStatus, str | None]]) -> None:
    """Set each ``(candidate id, status, reason)``, in one statement (executed for many)."""
    if finished:
        session.execute(_FINISH, [{"cid": i, "new_status": st.value, "reason": r}
                                  for i, st, r in finished])


_FINISH = (update(_C).where(_C.c.id == bindparam("cid"))
           .values(status=bindparam("new_status"), failure_reason=bindparam("reason")))


def requeue_for_recheck(session: Session, candidate_id: int) -> None:
    """Put a candidate whose result is held back in the queue, for another worker
    (:func:`lease_pending` never hands it to the worker whose result is held)."""
    session.execute(update(CandidateRow).where(CandidateRow.id == candidate_id)
                    .values(status=CandidateStatus.PENDING.value, lease_id=None,
                            lease_expires_at=None, worker_id=None))


def awaiting_recheck() -> tuple[ColumnElement[bool], ...]:
    """The conditions under which a candidate (with its measurement) is queued or leased
    again for the re-measurement of its held result (``service.plausibility``)."""
    return (CandidateRow.status.in_(OUTSTANDING),
            MeasurementRow.candidate_id == CandidateRow.id,
            MeasurementRow.status == Status.HELD.value)


def held_outstanding(session: Session, job_id: int) -> dict[int, datetime]:
    """The job's candidates awaiting the re-measurement of their held result, each with when
    the result was held."""
    rows = session.execute(
        select(CandidateRow.id, MeasurementRow.created_at)
        .where(CandidateRow.job_id == job_id, *awaiting_recheck())).all()
    return {int(cid): at for cid, at in rows}


def cancel_outstanding(session: Session, job_id: int, reason: str,
                       statuses: Sequence[str] = OUTSTANDING) -> int:
    """Cancel the job's candidates in ``statuses``; returns how many."""
    result = session.execute(
        update(CandidateRow)
        .where(CandidateRow.job_id == job_id, CandidateRow.status.in_(statuses))
        .values(status=CandidateStatus.CANCELLED.value, failure_reason=reason))
    return int(result.rowcount)  # type: ignore[attr-defined]


def expire_stale(session: Session, now: datetime, max_attempts: int) -> list[Expired]:
    """Take back leased candidates whose lease ran out.

    Each goes back to ``pending`` with one more attempt, or to ``failed`` once it has expired
    ``max_attempts`` times, or to ``cancelled`` when its job is no longer active.
    """
    rows = session.execute(_EXPIRED, {"now": now}).all()
    out: list[Expired] = []
    for row, job_status in rows:
        row.attempts += 1
        if job_status not in ACTIVE_JOB:
            row.status = CandidateStatus.CANCELLED.value
            row.failure_reason = "job no longer active when its lease expired"
        elif row.attempts >= max_attempts:
            row.status = CandidateStatus.FAILED.value
            row.failure_reason = f"lease expired {row.attempts} times"
        else:
            row.status = CandidateStatus.PENDING.value
            row.lease_id = None
            row.lease_expires_at = None
            row.worker_id = None
        out.append(Expired(CandidateRecord.of(row), row.status))
    session.flush()
    return out


#: :func:`expire_stale`'s statement, built once (building one costs more than running it).
_EXPIRED = (select(CandidateRow, JobRow.status)
            .join(JobRow, JobRow.id == CandidateRow.job_id)
            .where(CandidateRow.status == CandidateStatus.LEASED.value,
                   CandidateRow.lease_expires_at < bindparam("now"))
            .order_by(CandidateRow.id)
            .with_for_update(of=CandidateRow, skip_locked=True))


def lease_pending(session: Session, job_id: int, backends: Sequence[str], limit: int,
                  lease_id: str, worker_id: int, expires_at: datetime, *,
                  by_identity: bool = False, token_name: str | None = None
                  ) -> list[CandidateRecord]:
    """Lease up to ``limit`` pending candidates of the job whose backend is in ``backends``,
    and its pending tasks (tasks and library candidates before custom trials); none whose
    result the worker may not re-check (:func:`_not_held_by`)."""
    if limit <= 0:
        return []
    rows = list(session.scalars(
        select(CandidateRow)
        .where(CandidateRow.job_id == job_id,
               CandidateRow.status == CandidateStatus.PENDING.value,
               or_(CandidateRow.backend.in_(list(backends)), CandidateRow.task.is_not(None)),
               _not_held_by(worker_id, by_identity, token_name))
        .order_by(case((CandidateRow.tier.is_(None), 0), else_=1), CandidateRow.id)
        .limit(limit)
        .with_for_update(skip_locked=True)))
    return _hand_out(session, rows, lease_id, worker_id, expires_at)


def lease_pending_of_model(session: Session, gpu_model: str, backends: Sequence[str],
                           limit: int, lease_id: str, worker_id: int, expires_at: datetime,
                           *, by_identity: bool = False, token_name: str | None = None
                           ) -> list[CandidateRecord]:
    """Lease up to ``limit`` pending candidates of the running jobs bound to ``gpu_model``, in
    one statement: the oldest job's first, and in a job its tasks and library candidates
    before custom trials (as ``lease_pending``). Used when requests do not plan
    (``KS_PLANNING=background``): the queue is read by an index, not job by job, and the rows
    picked (``FOR UPDATE SKIP LOCKED`` on Postgres) are marked leased by the same
    statement."""
    if limit <= 0:
        return []
    rows = session.execute(
        _lease_of_model(by_identity, token_name is None),
        {"gpu_model": gpu_model, "backends": list(backends), "limit": limit,
         "to_lease": lease_id, "to_expire": expires_at, "to_worker": worker_id,
         "token": token_name}).all()
    got = [CandidateRecord.of(r) for r in rows]  # type: ignore[arg-type]
    return sorted(got, key=lambda c: (c.job_id, c.tier is not None, c.id))


@functools.cache
def _lease_of_model(by_identity: bool, no_token: bool) -> Any:
    """:func:`lease_pending_of_model`'s statement, built once per kind of identity check."""
    first = (CandidateRow.job_id, case((CandidateRow.tier.is_(None), 0), else_=1),
             CandidateRow.id)
    picked = (select(CandidateRow.id)
              .join(JobRow, JobRow.id == CandidateRow.job_id)
              .where(JobRow.status == JobStatus.RUNNING.value,
                     JobRow.bound_gpu == bindparam("gpu_model"),
                     CandidateRow.status == CandidateStatus.PENDING.value,
                     or_(CandidateRow.backend.in_(bindparam("backends", expanding=True)),
                         CandidateRow.task.is_not(None)),
                     _not_held_by(bindparam("to_worker"), by_identity,
                                  None if no_token else bindparam("token")))
              .order_by(*first).limit(bindparam("limit"))
              .with_for_update(skip_locked=True, of=CandidateRow))
    return (update(_C).where(_C.c.id.in_(picked.scalar_subquery()))
            .values(status=CandidateStatus.LEASED.value, lease_id=bindparam("to_lease"),
                    lease_expires_at=bindparam("to_expire"),
                    worker_id=bindparam("to_worker"))
            .returning(*_C.c))


def _not_held_by(worker_id: Any, by_identity: bool = False, token_name: Any = None) -> Any:
    """Not a candidate whose result this worker reported held (another worker re-checks it);
    with ``by_identity`` (more than one worker token), not one whose held result came from a
    worker of the leasing worker's token identity ``token_name`` or of none recorded (a worker
    of another identity re-checks it; one of none re-checks nothing:
    ``service.plausibility.confirms_across``)."""
    held = exists().where(MeasurementRow.candidate_id == CandidateRow.id,
                          MeasurementRow.status == Status.HELD.value)
    if not by_identity:
        return ~held.where(MeasurementRow.worker_id == worker_id)
    if token_name is None:
        return ~held
    other = exists().where(WorkerRow.id == MeasurementRow.worker_id,
                           WorkerRow.token_name.is_not(None), WorkerRow.token_name != token_name)
    return ~held.where(~other)


def _hand_out(session: Session, rows: list[CandidateRow], lease_id: str, worker_id: int,
              expires_at: datetime) -> list[CandidateRecord]:
    """Mark the locked ``rows`` leased to the worker under ``lease_id``."""
    for row in rows:
        row.status = CandidateStatus.LEASED.value
        row.lease_id = lease_id
        row.lease_expires_at = expires_at
        row.worker_id = worker_id
    session.flush()
    return [CandidateRecord.of(r) for r in rows]


def create_lease(session: Session, lease_id: str, worker_id: int, now: datetime,
                 expires_at: datetime) -> LeaseRecord:
    session.execute(_ADD_LEASE, {"id": lease_id, "worker_id": worker_id, "created_at": now,
                                 "expires_at": expires_at})
    return LeaseRecord(lease_id, worker_id, now, expires_at)


_ADD_LEASE = insert(LeaseRow.__table__)


def get_lease(session: Session, lease_id: str) -> LeaseRecord | None:
    row = session.get(LeaseRow, lease_id)
    return LeaseRecord.of(row) if row is not None else None


def renew_lease(session: Session, lease_id: str, expires_at: datetime) -> None:
    """Push the lease's expiry, and that of the candidates it still holds."""
    session.execute(update(LeaseRow).where(LeaseRow.id == lease_id)
                    .values(expires_at=expires_at))
    session.execute(update(CandidateRow)
                    .where(CandidateRow.lease_id == lease_id,
                           CandidateRow.status == CandidateStatus.LEASED.value)
                    .values(lease_expires_at=expires_at))


def cancel_ids(session: Session, ids: Sequence[int], reason: str) -> int:
    """Cancel these candidates if they are still pending."""
    if not ids:
        return 0
    result = session.execute(
        update(CandidateRow)
        .where(CandidateRow.id.in_(list(ids)),
               CandidateRow.status == CandidateStatus.PENDING.value)
        .values(status=CandidateStatus.CANCELLED.value, failure_reason=reason))
    return int(result.rowcount)  # type: ignore[attr-defined]


def outstanding_tasks(session: Session, gpu_model: str, task: str) -> int:
    """Outstanding tasks ``task`` in active jobs bound to ``gpu_model``."""
    return int(session.scalar(
        select(func.count()).select_from(CandidateRow)
        .join(JobRow, JobRow.id == CandidateRow.job_id)
        .where(CandidateRow.task == task, CandidateRow.status.in_(OUTSTANDING),
               JobRow.bound_gpu == gpu_model, JobRow.status.in_(ACTIVE_JOB))) or 0)


def tier_trials(session: Session, job_id: int, tier: str) -> int:
    """The job's trials in ``tier`` as the decision loop's evidence counts them: every candidate
    but a cancelled one that was never measured."""
    c = CandidateRow
    measured = exists().where(MeasurementRow.candidate_id == c.id)
    return int(session.scalar(
        select(func.count()).select_from(c)
        .where(c.job_id == job_id, c.tier == tier,
               or_(c.status != CandidateStatus.CANCELLED.value, measured))) or 0)


def of_trials(session: Session, problem_id: int, gpu_model: str, tier: str | None,
              numbers: Sequence[int]) -> dict[int, CandidateRecord]:
    """The candidates standing for these Optuna trial numbers of a study: the problem's
    candidates in ``tier`` of jobs bound to ``gpu_model``."""
    if not numbers:
        return {}
    tier_is = CandidateRow.tier.is_(None) if tier is None else CandidateRow.tier == tier
    rows = session.scalars(
        select(CandidateRow).join(JobRow, JobRow.id == CandidateRow.job_id)
        .where(CandidateRow.problem_id == problem_id, JobRow.bound_gpu == gpu_model, tier_is,
               CandidateRow.trial_number.in_(list(numbers)))
        .order_by(CandidateRow.id))
    return {int(r.trial_number): CandidateRecord.of(r) for r in rows}
