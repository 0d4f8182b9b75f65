"""``/v1/problems``: the problems ever submitted, and each one's measurement history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from db import decisions, jobs, measurements
from service.auth import ReadAuth, UserDep, may_act_on
from service.deps import FlowDep, GpuQ, PagingDep, SessionDep, SettingsDep
from service.errors import Forbidden, NotFound
from service.responses import READ, WRITE, ErrorOut, answers
from service.routes.jobs import submit
from service.schemas import (
    MAX_ID,
    DecisionList,
    DecisionOut,
    JobOut,
    ProblemList,
    ReopenIn,
    TrialList,
)
from service.views import decision_out, problem_out, trial_out

router = APIRouter(prefix="/v1/problems", tags=["problems"], dependencies=[ReadAuth])
ProblemId = Annotated[int, Path(ge=1, le=MAX_ID)]


@router.get("", response_model=ProblemList, responses=answers(*READ))
def list_problems(session: SessionDep, page: PagingDep) -> ProblemList:
    rows, total = jobs.list_problems(session, page.limit, page.offset)
    return ProblemList(items=[problem_out(p, n) for p, n in rows], total=total,
                       limit=page.limit, offset=page.offset)


@router.get("/{problem_id}/trials", response_model=TrialList, responses=answers(*READ, 404))
def list_trials(problem_id: ProblemId, session: SessionDep, page: PagingDep,
                gpu: GpuQ = None) -> TrialList:
    problem = jobs.get_problem(session, problem_id)
    if problem is None:
        raise NotFound(f"problem {problem_id} not found")
    rows, total = measurements.list_trials(session, problem_id, page.limit, page.offset, gpu)
    return TrialList(items=[trial_out(m, t, problem.problem) for m, t in rows], total=total,
                     limit=page.limit, offset=page.offset)


@router.get("/{problem_id}/decision", response_model=DecisionOut,
            responses=answers(*READ) | {404: {"model": ErrorOut, "description":
                                              "no decision for this problem (on that GPU)"}})
def current_decision(problem_id: ProblemId, session: SessionDep, gpu: GpuQ = None
                     ) -> DecisionOut:
    """The decision in force: verdict, both timings with spreads, efficiencies, bound,
    speed-up, trials and GPU-seconds per stage, and the rationale."""
    if jobs.get_problem(session, problem_id) is None:
        raise NotFound(f"problem {problem_id} not found")
    d = decisions.current(session, problem_id, gpu)
    if d is None:
        where = f" on {gpu}" if gpu else ""
        raise NotFound(f"problem {problem_id} has no decision{where} yet: a job decides when "
                       "its search is over")
    return decision_out(d)


@router.get("/{problem_id}/decisions", response_model=DecisionList,
            responses=answers(*READ, 404))
def decision_history(problem_id: ProblemId, session: SessionDep, page: PagingDep,
                     gpu: GpuQ = None) -> DecisionList:
    """Every decision taken for the problem, newest first (superseded ones included)."""
    if jobs.get_problem(session, problem_id) is None:
        raise NotFound(f"problem {problem_id} not found")
    rows, total = decisions.history(session, problem_id, page.limit, page.offset, gpu)
    return DecisionList(items=[decision_out(d) for d in rows], total=total, limit=page.limit,
                        offset=page.offset)


@router.post("/{problem_id}/reopen", status_code=201, response_model=JobOut,
             responses=answers(*WRITE, 404, 413, 429))
def reopen(problem_id: ProblemId, flow: FlowDep, settings: SettingsDep, caller: UserDep,
           body: ReopenIn | None = None) -> JobOut:
    """Decide again (new budget, new policy, new versions): a new job for the problem whose
    decision supersedes the current one; the history keeps both. With tokens configured, only
    an admin or the owner of one of the problem's jobs may."""
    body = body or ReopenIn()
    with flow.db.read_session() as s:
        record = jobs.get_problem(s, problem_id)
        owners = {j.owner for j in jobs.jobs_of_problem(s, problem_id)}
    if record is None:
        raise NotFound(f"problem {problem_id} not found")
    if not any(may_act_on(caller, owner) for owner in owners or {None}):
        raise Forbidden(f"problem {problem_id} was submitted by others: only the owner of one "
                        "of its jobs or an admin token may re-open it")
    return submit(flow, settings, record.problem, body, caller)
