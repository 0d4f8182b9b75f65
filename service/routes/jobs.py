"""``/v1/jobs``: submit, follow, list and cancel tuning jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from search import kinds
from search.decision import Policy
from search.types import Problem, ProblemError, parse_problem
from service.auth import Caller, ReadAuth, UserDep, may_act_on
from service.deps import FlowDep, PagingDep, SettingsDep
from service.errors import Forbidden, InvalidInput
from service.flow import Flow
from service.responses import READ, WRITE, answers
from service.schemas import MAX_ID, JobIn, JobList, JobOut, ReopenIn
from service.settings import ServiceSettings
from service.views import job_out

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], dependencies=[ReadAuth])
JobId = Annotated[int, Path(ge=1, le=MAX_ID)]


@router.post("", status_code=201, response_model=JobOut,
             responses=answers(*WRITE, 413, 429))
def submit_job(body: JobIn, flow: FlowDep, settings: SettingsDep, caller: UserDep) -> JobOut:
    """Submit a tuning job; with tokens configured the job records its owner (the token's
    name)."""
    try:
        problem = parse_problem(body.problem)
    except ProblemError as exc:
        raise InvalidInput(["body", "problem", exc.field], exc.message) from exc
    return submit(flow, settings, problem, body, caller)


def submit(flow: Flow, settings: ServiceSettings, problem: Problem, body: ReopenIn,
           caller: Caller) -> JobOut:
    """Submit a job for ``problem`` as ``body`` says (budget, policy, backends, GPU, seed);
    shared by ``POST /v1/jobs`` and ``POST /v1/problems/{id}/reopen``."""
    budget = body.budget
    policy = Policy.from_dict(body.policy.model_dump() if body.policy is not None else None)
    state = flow.submit_job(problem,
                            max_trials=budget.max_trials if budget
                            else settings.default_max_trials,
                            max_seconds=budget.max_seconds if budget else None,
                            backends=body.backends or kinds.get(problem.kind).backends,
                            gpu=body.gpu, seed=body.seed, policy=policy,
                            owner=caller.name if caller is not None else None)
    return job_out(state)


@router.get("", response_model=JobList, responses=answers(*READ))
def list_jobs(flow: FlowDep, page: PagingDep) -> JobList:
    states, total = flow.list_jobs(page.limit, page.offset)
    return JobList(items=[job_out(s) for s in states], total=total, limit=page.limit,
                   offset=page.offset)


@router.get("/{job_id}", response_model=JobOut, responses=answers(*READ, 404))
def get_job(job_id: JobId, flow: FlowDep) -> JobOut:
    return job_out(flow.job_state(job_id))


@router.post("/{job_id}/cancel", response_model=JobOut, responses=answers(*WRITE, 404, 409))
def cancel_job(job_id: JobId, flow: FlowDep, caller: UserDep) -> JobOut:
    """Cancel a queued or running job: its owner or an admin token only."""
    job = flow.job(job_id)
    if not may_act_on(caller, job.owner):
        raise Forbidden(f"job {job_id} belongs to {job.owner or 'nobody'}: only its owner or "
                        "an admin token may cancel it")
    return job_out(flow.cancel_job(job_id))
