"""How far a problem's tuning has gone, read in one cheap indexed query: what keys the cache of
``GET /v1/best`` (``service.best_cache``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, bindparam, func, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from db.models import DecisionRow, ProblemRow, SummaryRow
from db.records import ProblemRecord

#: ``(problem id, kernel measurements stored, those not ok, decisions stored)``
Generation = tuple[int, int, int, int]


def of_problem(session: Session | Connection, key: str) -> Generation | None:
    """The generation of the problem with canonical ``key`` (None: no such problem).

    It changes whenever the problem's best configuration can: every kernel measurement counts
    itself into ``tuning_summaries`` in the transaction that stores it (``db.summaries.add``),
    a held result released after its re-check counts itself out of the failed ones
    (``db.summaries.released``), and every decision is a new row (superseding the one in force
    in the same transaction). Measurements only grow and a release only lowers the failed count
    at the same total, so a committed change never leaves the generation as it was. A writer
    that changes what ``GET /v1/best`` reads in another way must change it too."""
    row = session.execute(statement(key)).first()
    return (int(row[0]), int(row[1]), int(row[2]), int(row[3])) if row is not None else None


def with_problem(session: Session, key: str
                 ) -> tuple[ProblemRecord, Generation] | None:
    """The problem with canonical ``key`` and its generation, in one query (None: no such
    problem)."""
    row = session.execute(_WITH_PROBLEM, {"key": key}).first()
    if row is None:
        return None
    return ProblemRecord.of(row[0]), (int(row[1]), int(row[2]), int(row[3]), int(row[4]))


def statement(key: Any, *, many: bool = False, problem: bool = False) -> Select[Any]:
    """The query of :func:`of_problem` (``key``: the key, or a ``bindparam``): its rows are
    ``(problem id, measured, failed, decided)``. ``many``: ``key`` is a list (an array
    parameter) and each row starts with the problem's key (``service.best_fast`` runs it
    compiled, for the questions of many requests at once); ``problem``: each row starts with
    the problem's row (:func:`with_problem`)."""
    measured = (select(func.coalesce(func.sum(SummaryRow.trials), 0))
                .where(SummaryRow.problem_id == ProblemRow.id).scalar_subquery())
    failed = (select(func.coalesce(func.sum(SummaryRow.failed), 0))
              .where(SummaryRow.problem_id == ProblemRow.id).scalar_subquery())
    decided = (select(func.count()).select_from(DecisionRow)
               .where(DecisionRow.problem_id == ProblemRow.id).scalar_subquery())
    if problem:
        return select(ProblemRow, ProblemRow.id, measured, failed, decided).where(
            ProblemRow.key == key)
    if many:
        return (select(ProblemRow.key, ProblemRow.id, measured, failed, decided)
                .where(ProblemRow.key == func.any(key)))
    return select(ProblemRow.id, measured, failed, decided).where(ProblemRow.key == key)


#: :func:`with_problem`'s statement, built once (building one costs more than running it).
_WITH_PROBLEM = statement(bindparam("key"), problem=True)
