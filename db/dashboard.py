"""Read-only queries of the dashboard: filtered, sorted and paginated in SQL.

The overview reads ``tuning_summaries`` (one row per problem and GPU model, kept as
measurements are stored) joined with the problem and its decision in force, so sorting by any
column, the counts and the summary strip never aggregate the measurements table; the shapes map
groups those rows by two of the problem's fields read from its JSON spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, select
from sqlalchemy.orm import Session, aliased

from db.models import (
    CandidateRow,
    DecisionRow,
    JobRow,
    LeaseRow,
    MeasurementRow,
    ProblemRow,
    SummaryRow,
    WorkerRow,
)
from db.records import ACTIVE_JOB, OUTSTANDING, TERMINAL, CandidateStatus, JobRecord
from search.roofline import FLOOR_SLACK

#: Verdicts a decision may carry (``search.decision.Verdict``), and the overview's filter for
#: problems with none in force.
VERDICTS = ("library_sufficient", "custom_wins", "library_wins_after_search")
UNDECIDED = "undecided"

_S, _P = SummaryRow, ProblemRow
_D = aliased(DecisionRow, name="d")
_IN_FORCE = and_(_D.problem_id == _S.problem_id, _D.gpu_model == _S.gpu_model,
                 _D.superseded_at.is_(None))
#: the served kernel's share of the roofline, as ``search.roofline.efficiency`` computes it:
#: attainable time over its time, at most 1; none where the time refutes the roofline (more
#: than ``FLOOR_SLACK`` under it) or there is none
_SHARE = case((_D.median_us <= 0, None),
              (_D.median_us < _D.attainable_us * (1.0 - FLOOR_SLACK), None),
              (_D.attainable_us >= _D.median_us, 1.0),
              else_=_D.attainable_us / _D.median_us)
_DTYPE = _P.dtype

#: The overview's sortable columns.
SORTS: dict[str, ColumnElement[Any]] = {
    "kind": _P.kind, "shape": _P.label, "dtype": _DTYPE, "gpu": _S.gpu_model,
    "verdict": _D.verdict, "backend": _D.backend, "speedup": _D.speedup, "roofline": _SHARE,
    "trials": _S.trials, "gpu_s": _S.gpu_s, "last": _S.last_at,
}


@dataclass(frozen=True)
class OverviewFilter:
    kind: str | None = None
    gpu: str | None = None
    verdict: str | None = None
    #: a piece of the shape label (``4096x4096``), matched case-insensitively
    shape: str | None = None


@dataclass(frozen=True)
class OverviewRow:
    problem_id: int
    gpu_model: str
    kind: str
    label: str | None
    key: str
    dtype: str | None
    verdict: str | None
    backend: str | None
    speedup: float | None
    roofline_share: float | None
    trials: int
    failed: int
    gpu_s: float
    last_at: datetime


@dataclass(frozen=True)
class Strip:
    """Totals over the filtered rows: the overview's summary strip."""

    rows: int
    decided: int
    custom_wins: int
    saved_gpu_s: float
    gpu_s: float


def _where(f: OverviewFilter) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if f.kind:
        where.append(_P.kind == f.kind)
    if f.gpu:
        where.append(_S.gpu_model == f.gpu)
    if f.verdict == UNDECIDED:
        where.append(_D.verdict.is_(None))  # in the covering index, unlike its id
    elif f.verdict:
        where.append(_D.verdict == f.verdict)
    if f.shape:
        where.append(_P.label.icontains(f.shape, autoescape=True))
    return where


def _joined(*cols: Any, problem: bool = True, decision: bool = True) -> Any:
    """``cols`` from the totals joined with their problem and their decision in force (each
    join left out when nothing asks for it)."""
    stmt = select(*cols).select_from(_S)
    if problem:
        stmt = stmt.join(_P, _P.id == _S.problem_id)
    return stmt.outerjoin(_D, _IN_FORCE) if decision else stmt


#: The sorts that read the problem's columns, and those that read its decision's.
_BY_PROBLEM = {"kind", "shape", "dtype"}
_BY_DECISION = {"verdict", "backend", "speedup", "roofline"}


def overview(session: Session, f: OverviewFilter, sort: str, descending: bool, limit: int,
             offset: int) -> list[OverviewRow]:
    """One page of tuned problems (a problem per GPU model it was measured on). The page's
    keys come first (a deep page sorts narrow rows), then their rows, in a second query: as a
    subquery the planner may scan every row to join the page."""
    key = SORTS[sort]
    order = ((key.desc() if descending else key.asc()).nulls_last(), _S.problem_id,
             _S.gpu_model)
    keys = session.execute(
        _joined(_S.problem_id, _S.gpu_model,
                problem=bool(f.kind or f.shape) or sort in _BY_PROBLEM,
                decision=bool(f.verdict) or sort in _BY_DECISION)
        .where(*_where(f)).order_by(*order).limit(limit).offset(offset)).all()
    if not keys:
        return []
    stmt = (_joined(_S.problem_id, _S.gpu_model, _P.kind, _P.label, _P.key, _DTYPE,
                    _D.verdict, _D.backend, _D.speedup, _SHARE, _S.trials, _S.failed,
                    _S.gpu_s, _S.last_at)
            .where(_S.problem_id.in_({k[0] for k in keys})))  # the pairs are picked below
    found = {(r[0], r[1]): r for r in session.execute(stmt).all()}
    rows = [found[tuple(k)] for k in keys if tuple(k) in found]  # type: ignore[index]
    return [OverviewRow(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9],
                        int(r[10]), int(r[11]), float(r[12]), r[13]) for r in rows]


def strip(session: Session, f: OverviewFilter) -> Strip:
    """The number of rows the filter keeps and their totals."""
    row = session.execute(_joined(
        func.count(), func.count(_D.verdict),
        func.coalesce(func.sum(case((_D.verdict == "custom_wins", 1), else_=0)), 0),
        func.coalesce(func.sum(_D.saved_gpu_s), 0.0), func.coalesce(func.sum(_S.gpu_s), 0.0),
        problem=bool(f.kind or f.shape)).where(*_where(f))).one()
    return Strip(int(row[0]), int(row[1]), int(row[2]), float(row[3]), float(row[4]))


def facets(session: Session) -> tuple[list[str], list[str]]:
    """The kinds of the problems and the GPU models with tuned problems (the filters'
    choices)."""
    gpus = session.scalars(select(_S.gpu_model).group_by(_S.gpu_model)
                           .order_by(_S.gpu_model)).all()
    kinds = session.scalars(select(_P.kind).group_by(_P.kind).order_by(_P.kind)).all()
    return list(kinds), list(gpus)


# -- the shapes map ---------------------------------------------------------------------------
@dataclass(frozen=True)
class MapCell:
    """The decided problems of one (x, y) point of the shapes map."""

    x: int
    y: int
    problems: int
    share_mean: float | None
    share_min: float | None
    share_max: float | None
    verdicts: dict[str, int]
    #: one problem of the cell (its first), the one a click opens
    problem_id: int


def shapes_map(session: Session, gpu: str, kind: str, axes: tuple[str, str],
               dtype: str | None = None) -> list[MapCell]:
    """Decided problems of ``kind`` on ``gpu`` grouped by the spec fields ``axes``."""
    x, y = (_P.spec[a].as_integer() for a in axes)
    counts = [func.coalesce(func.sum(case((_D.verdict == v, 1), else_=0)), 0) for v in VERDICTS]
    stmt = (select(x, y, func.count(), func.avg(_SHARE), func.min(_SHARE), func.max(_SHARE),
                   func.min(_S.problem_id), *counts)
            .select_from(_S).join(_P, _P.id == _S.problem_id).join(_D, _IN_FORCE)
            .where(_S.gpu_model == gpu, _P.kind == kind)
            .group_by(x, y).order_by(x, y))
    if dtype:
        stmt = stmt.where(_DTYPE == dtype)
    return [MapCell(int(r[0]), int(r[1]), int(r[2]), _f(r[3]), _f(r[4]), _f(r[5]),
                    {v: int(n) for v, n in zip(VERDICTS, r[7:], strict=True)}, int(r[6]))
            for r in session.execute(stmt).all() if r[0] is not None and r[1] is not None]


def map_dtypes(session: Session, gpu: str, kind: str) -> list[str]:
    return [d for d in session.scalars(
        _joined(_DTYPE).where(_S.gpu_model == gpu, _P.kind == kind).group_by(_DTYPE)
        .order_by(_DTYPE)).all() if d]


def _f(v: Any) -> float | None:
    return float(v) if v is not None else None


# -- one problem --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrialPoint:
    """One kernel measurement of a problem, as the convergence and roofline charts need it."""

    id: int
    job_id: int | None
    trial_number: int | None
    tier: str | None
    backend: str | None
    config: dict[str, Any]
    status: str
    median_us: float | None
    p20_us: float | None
    p80_us: float | None
    gpu_s: float
    error: str | None
    created_at: datetime


def trials(session: Session, problem_id: int, gpu: str, limit: int
           ) -> tuple[list[TrialPoint], int]:
    """A problem's kernel measurements on ``gpu`` in the order they were stored (the first
    ``limit``), and how many there are."""
    m, c = MeasurementRow, CandidateRow
    where = (m.problem_id == problem_id, m.gpu_model == gpu, m.task.is_(None))
    total = session.scalar(select(func.count()).select_from(m).where(*where)) or 0
    rows = session.execute(
        select(m.id, m.job_id, c.trial_number, c.tier, m.backend, m.config, m.status,
               m.median_us, m.p20_us, m.p80_us,
               func.coalesce(m.compile_s, 0.0) + func.coalesce(m.bench_s, 0.0), m.error,
               m.created_at)
        .outerjoin(c, c.id == m.candidate_id).where(*where).order_by(m.id).limit(limit)).all()
    return [TrialPoint(int(r[0]), r[1], r[2], r[3], r[4], dict(r[5] or {}), r[6], r[7], r[8],
                       r[9], float(r[10]), r[11], r[12]) for r in rows], int(total)


def gpus_of(session: Session, problem_id: int) -> list[str]:
    """The GPU models a problem was measured on, most recent first."""
    return list(session.scalars(select(_S.gpu_model).where(_S.problem_id == problem_id)
                                .order_by(_S.last_at.desc())).all())


# -- jobs and workers ---------------------------------------------------------------------------
@dataclass(frozen=True)
class JobLine:
    id: int
    problem_id: int
    kind: str
    label: str | None
    key: str
    status: str
    stage: str | None
    gpu: str | None
    max_trials: int | None
    created_at: datetime
    finished_at: datetime | None
    verdict: str | None
    error: str | None


def job_lines(session: Session, statuses: Sequence[str] | None, limit: int, offset: int,
              newest_first: bool = True) -> tuple[list[JobLine], int]:
    """Jobs newest (or oldest) first, of ``statuses`` (else all), with their problem and
    verdict: the
    page's ids first, from ``ix_jobs_created_at`` alone, then their rows."""
    j, d = JobRow, aliased(DecisionRow, name="jd")
    where = [j.status.in_(list(statuses))] if statuses else []
    total = session.scalar(select(func.count()).select_from(j).where(*where)) or 0
    order = (j.created_at.desc(), j.id.desc()) if newest_first else (j.created_at, j.id)
    ids = list(session.scalars(select(j.id).where(*where).order_by(*order)
                               .limit(limit).offset(offset)))
    found = {r[0]: r for r in session.execute(
        select(j.id, j.problem_id, _P.kind, _P.label, _P.key, j.status, j.stage,
               func.coalesce(j.bound_gpu, j.target_gpu), j.max_trials, j.created_at,
               j.finished_at, d.verdict, j.error)
        .join(_P, _P.id == j.problem_id).outerjoin(d, d.job_id == j.id)
        .where(j.id.in_(ids))).all()} if ids else {}
    rows = [found[i] for i in ids if i in found]
    return [JobLine(*r) for r in rows], int(total)


def active(session: Session, limit: int) -> tuple[list[JobRecord], int]:
    """The first ``limit`` queued and running jobs, oldest first, and how many there are."""
    j = JobRow
    where = j.status.in_(ACTIVE_JOB)
    total = session.scalar(select(func.count()).select_from(j).where(where)) or 0
    rows = session.execute(select(j, _P).join(_P, _P.id == j.problem_id).where(where)
                           .order_by(j.created_at, j.id).limit(limit)).all()
    return [JobRecord.of(job, problem) for job, problem in rows], int(total)


@dataclass(frozen=True)
class Progress:
    """Where a job stands, as ``GET /v1/jobs/{id}`` counts it before a decision: custom
    trials that ended (what the budget counts; a library-side search's are not), candidates
    outstanding, the fastest ok kernel and the library's."""

    trials_done: int = 0
    outstanding: int = 0
    best_us: float | None = None
    best_backend: str | None = None
    library_us: float | None = None


def progress(session: Session, jobs: Sequence[tuple[int, str | None, Sequence[str]]]
             ) -> dict[int, Progress]:
    """The progress of each ``(job id, its kind's library tier, its library backends)`` in
    two grouped queries, however many jobs."""
    if not jobs:
        return {}
    c, m = CandidateRow, MeasurementRow
    ids = [job_id for job_id, _, _ in jobs]
    tiers = {job_id: tier for job_id, tier, _ in jobs}
    done: dict[int, int] = {}
    waiting: dict[int, int] = {}
    for job_id, tier, status, n in session.execute(
            select(c.job_id, c.tier, c.status, func.count()).where(c.job_id.in_(ids))
            .group_by(c.job_id, c.tier, c.status)).all():
        if status in OUTSTANDING:
            waiting[job_id] = waiting.get(job_id, 0) + int(n)
        if tier is not None and tier != tiers[job_id] and status in TERMINAL:
            done[job_id] = done.get(job_id, 0) + int(n)
    fastest: dict[int, dict[str, float]] = {}
    for job_id, backend, us in session.execute(
            select(m.job_id, m.backend, func.min(m.median_us))
            .where(m.job_id.in_(ids), m.task.is_(None), m.status == "ok",
                   m.median_us.is_not(None))
            .group_by(m.job_id, m.backend)).all():
        fastest.setdefault(int(job_id), {})[backend] = float(us)
    out = {}
    for job_id, _, library in jobs:
        times = fastest.get(job_id, {})
        best = min(times, key=times.__getitem__) if times else None
        lib = [t for b, t in times.items() if b in library]
        out[job_id] = Progress(done.get(job_id, 0), waiting.get(job_id, 0),
                               times.get(best) if best else None, best,
                               min(lib) if lib else None)
    return out


@dataclass(frozen=True)
class WorkerLine:
    id: int
    name: str
    gpu_model: str
    device: dict[str, Any]
    registered_at: datetime
    last_seen: datetime
    #: the lease in force (None: none): its id, expiry, the candidates it holds, their jobs
    lease_id: str | None = None
    lease_expires_at: datetime | None = None
    leased: int = 0
    job_ids: tuple[int, ...] = ()


def worker_lines(session: Session, now: datetime, limit: int, offset: int
                 ) -> tuple[list[WorkerLine], int]:
    """Workers most recently seen first, each with its lease in force."""
    w, le, c = WorkerRow, LeaseRow, CandidateRow
    total = session.scalar(select(func.count()).select_from(w)) or 0
    workers = session.execute(select(w).order_by(w.last_seen.desc(), w.id)
                              .limit(limit).offset(offset)).scalars().all()
    ids = [x.id for x in workers]
    held: dict[int, tuple[str, datetime, int, tuple[int, ...]]] = {}
    if ids:
        rows = session.execute(
            select(le.worker_id, le.id, le.expires_at, c.job_id, func.count(c.id))
            .join(c, and_(c.lease_id == le.id, c.status == CandidateStatus.LEASED.value))
            .where(le.worker_id.in_(ids), le.expires_at > now)
            .group_by(le.worker_id, le.id, le.expires_at, c.job_id)
            .order_by(le.expires_at.desc())).all()
        for worker_id, lease_id, expires, job_id, n in rows:
            lid, exp, count, jobs = held.get(worker_id, (lease_id, expires, 0, ()))
            if lid == lease_id:
                held[worker_id] = (lid, exp, count + int(n), (*jobs, int(job_id)))
    out = []
    for x in workers:
        lease = held.get(x.id)
        out.append(WorkerLine(x.id, x.name, x.gpu_model, dict(x.device), x.registered_at,
                              x.last_seen, *(lease if lease else (None, None, 0, ()))))
    return out, int(total)
