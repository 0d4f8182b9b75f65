"""Repository of the decision loop's verdicts: the current one per (problem, GPU model) and
the history (a new decision supersedes the previous one, which is kept)."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from db import measurements
from db.models import DecisionRow
from db.records import DecisionRecord, MeasurementRecord


def add_decision(session: Session, *, problem_id: int, job_id: int | None, gpu_model: str,
                 verdict: str, chosen: str, backend: str | None,
                 config: dict[str, Any] | None, median_us: float | None,
                 speedup: float | None, bound: str | None, attainable_us: float | None,
                 verified: bool, rationale: str, evidence: dict[str, Any],
                 env: dict[str, Any], now: datetime, precision: str | None = None,
                 rel_error: float | None = None, saved_gpu_s: float | None = None
                 ) -> DecisionRecord:
    """Store a decision (superseding the one in force for the problem and GPU model);
    ``precision`` and ``rel_error``: what the served kernel computes in, and its measured
    error; ``saved_gpu_s``: GPU-seconds the early stops left unspent."""
    session.execute(update(DecisionRow)
                    .where(DecisionRow.problem_id == problem_id,
                           DecisionRow.gpu_model == gpu_model,
                           DecisionRow.superseded_at.is_(None))
                    .values(superseded_at=now))
    row = DecisionRow(problem_id=problem_id, job_id=job_id, gpu_model=gpu_model,
                      verdict=verdict, chosen=chosen, backend=backend, config=config,
                      median_us=median_us, speedup=speedup, bound=bound,
                      attainable_us=attainable_us, verified=verified, rationale=rationale,
                      evidence=evidence, env=env, created_at=now, superseded_at=None,
                      precision=precision, rel_error=rel_error, saved_gpu_s=saved_gpu_s)
    session.add(row)
    session.flush()
    return DecisionRecord.of(row)


def current(session: Session, problem_id: int, gpu_model: str | None = None
            ) -> DecisionRecord | None:
    """The decision in force for the problem (on ``gpu_model``, else the newest on any)."""
    params: dict[str, Any] = {"problem_id": problem_id}
    if gpu_model is not None:
        params["gpu_model"] = gpu_model
    row = session.scalars(_current(gpu_model is not None), params).first()
    return DecisionRecord.of(row) if row is not None else None


@functools.cache
def _current(on_gpu: bool) -> Any:
    """:func:`current`'s statement, built once (``on_gpu``: of one GPU model)."""
    stmt = select(DecisionRow).where(DecisionRow.problem_id == bindparam("problem_id"),
                                     DecisionRow.superseded_at.is_(None))
    if on_gpu:
        stmt = stmt.where(DecisionRow.gpu_model == bindparam("gpu_model"))
    return stmt.order_by(DecisionRow.id.desc()).limit(1)


def of_job(session: Session, job_id: int) -> DecisionRecord | None:
    row = session.scalars(select(DecisionRow).where(DecisionRow.job_id == job_id)
                          .order_by(DecisionRow.id.desc()).limit(1)).first()
    return DecisionRecord.of(row) if row is not None else None


def history(session: Session, problem_id: int, limit: int, offset: int,
            gpu_model: str | None = None) -> tuple[list[DecisionRecord], int]:
    where = [DecisionRow.problem_id == problem_id]
    if gpu_model is not None:
        where.append(DecisionRow.gpu_model == gpu_model)
    total = session.scalar(select(func.count()).select_from(DecisionRow).where(*where)) or 0
    rows = session.scalars(select(DecisionRow).where(*where).order_by(DecisionRow.id.desc())
                           .limit(limit).offset(offset))
    return [DecisionRecord.of(r) for r in rows], int(total)


def as_decided(session: Session, decision: DecisionRecord | None,
               best: MeasurementRecord | None, library: MeasurementRecord | None
               ) -> tuple[MeasurementRecord | None, MeasurementRecord | None]:
    """``(best, library best)`` as ``decision`` has them: its pick is the best (a custom
    kernel faster only in the search, tied in the verification, is not), and the library's
    best when it chose the library. Unchanged without a decision or a timed pick."""
    pick = (decision.evidence.get(decision.chosen) or {}).get("candidate_id") \
        if decision is not None else None
    chosen = measurements.of_candidates(session, [int(pick)]).get(int(pick)) if pick else None
    if decision is None or chosen is None or chosen.median_us is None:
        return best, library
    return chosen, chosen if decision.chosen == "library" else library


def library_pick(session: Session, decision: DecisionRecord) -> MeasurementRecord | None:
    """The measurement of ``decision``'s library pick (None: it has none, or it was never
    timed)."""
    pick = (decision.evidence.get("library") or {}).get("candidate_id")
    found = measurements.of_candidates(session, [int(pick)]).get(int(pick)) if pick else None
    return found if found is not None and found.median_us is not None else None
