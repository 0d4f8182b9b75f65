"""``/v1/problems``: the problems ever submitted, and each one's measurement history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from db import jobs, measurements
from search.types import GemmProblem
from service.deps import PagingDep, SessionDep
from service.errors import NotFound
from service.schemas import MAX_ID, ProblemList, TrialList
from service.views import problem_out, trial_out

router = APIRouter(prefix="/v1/problems", tags=["problems"])


@router.get("", response_model=ProblemList)
def list_problems(session: SessionDep, page: PagingDep) -> ProblemList:
    rows, total = jobs.list_problems(session, page.limit, page.offset)
    return ProblemList(items=[problem_out(p, n) for p, n in rows], total=total,
                       limit=page.limit, offset=page.offset)


@router.get("/{problem_id}/trials", response_model=TrialList)
def list_trials(problem_id: Annotated[int, Path(ge=1, le=MAX_ID)], session: SessionDep,
                page: PagingDep,
                gpu: Annotated[str | None, Query(min_length=1, max_length=200,
                                                 pattern=r"^[^\x00-\x1f]+$")] = None
                ) -> TrialList:
    problem = jobs.get_problem(session, problem_id)
    if problem is None:
        raise NotFound(f"problem {problem_id} not found")
    rows, total = measurements.list_trials(session, problem_id, page.limit, page.offset, gpu)
    gemm = GemmProblem.from_dict(problem.spec)
    return TrialList(items=[trial_out(m, t, gemm) for m, t in rows], total=total,
                     limit=page.limit, offset=page.offset)
