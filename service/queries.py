"""Read-only answers that need more than one repository call: the best configuration."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from db import decisions, jobs, measurements
from db.engine import Database
from db.records import DecisionRecord, MeasurementRecord, ProblemRecord
from search import kinds
from search.types import Problem
from service.errors import NotFound


@dataclass(frozen=True)
class BestAnswer:
    problem: ProblemRecord
    gpu_model: str
    best: MeasurementRecord
    library: MeasurementRecord | None
    decision: DecisionRecord | None = None
    #: whether ``best`` is the decision's pick (not so in exact mode when the decision serves
    #: a kernel computing below the input precision)
    decided: bool = True


def find_best(db: Database, problem: Problem, gpu: str | None, exact: bool = False
              ) -> BestAnswer:
    """:func:`best_in` a read-only session of ``db``."""
    with db.read_session() as s:
        return best_in(s, problem, gpu, exact)


def best_in(s: Session, problem: Problem, gpu: str | None, exact: bool = False) -> BestAnswer:
    """:func:`best_of` the problem's stored record."""
    return best_of(s, jobs.find_problem(s, problem.key()), problem, gpu, exact)


def best_of(s: Session, record: ProblemRecord | None, problem: Problem, gpu: str | None,
            exact: bool = False) -> BestAnswer:
    """The configuration to use for ``problem`` (stored as ``record``; None: never stored) on
    ``gpu`` (default: the GPU model with the latest ok measurement, real GPUs before the
    interpreter): the decision loop's choice where a decision is in force (ties went to the
    library), else the fastest ok measurement.

    ``exact``: a kernel computing in the problem's input precision only. Where the decision
    serves one that computes lower (its policy allowed it), the answer is the decision's
    library pick, or an input-precision custom kernel measured faster than it."""
    gpu_model = gpu
    if record is not None and gpu_model is None:
        gpu_model = measurements.latest_gpu(s, record.id)
    kind = kinds.get(problem.kind)
    best = library = None
    if record is not None and gpu_model is not None:
        best, library = measurements.problem_bests(s, record.id, gpu_model,
                                                   kind.library_backends, exact=exact)
    if record is None or best is None or gpu_model is None:
        where = gpu or "any GPU"
        mode = " computing in its input precision" if exact else ""
        raise NotFound(f"no measurements{mode} for {problem.kind} {problem.describe()} "
                       f"({problem.key()}) on {where}: submit a job with POST /v1/jobs")
    decision = decisions.current(s, record.id, gpu_model)
    lowered = decision is not None and decision.precision not in (None, problem.dtype)
    if not (exact and lowered):
        best, library = decisions.as_decided(s, decision, best, library)
        return BestAnswer(record, gpu_model, best, library, decision)
    assert decision is not None
    picked = decisions.library_pick(s, decision)
    library = picked or library
    custom = measurements.problem_best(s, record.id, gpu_model, kind.custom_backends,
                                        exact=True)
    contenders = [m for m in (library, custom) if m is not None and m.median_us is not None]
    best = min(contenders, key=lambda m: m.median_us or 0.0) if contenders else best
    return BestAnswer(record, gpu_model, best, library, decision, decided=False)
