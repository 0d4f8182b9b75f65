"""Read-only answers that need more than one repository call: the best configuration."""

from __future__ import annotations

from dataclasses import dataclass

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


def find_best(db: Database, problem: Problem, gpu: str | None) -> BestAnswer:
    """The configuration to use for ``problem`` on ``gpu`` (default: the GPU model with the
    latest ok measurement, real GPUs before the interpreter): the decision loop's choice where
    a decision is in force (ties went to the library), else the fastest ok measurement."""
    with db.read_session() as s:
        record = jobs.find_problem(s, problem.key())
        gpu_model = gpu
        if record is not None and gpu_model is None:
            gpu_model = measurements.latest_gpu(s, record.id)
        best = (measurements.problem_best(s, record.id, gpu_model)
                if record is not None and gpu_model is not None else None)
        if record is None or best is None or gpu_model is None:
            where = gpu or "any GPU"
            raise NotFound(f"no measurements for {problem.kind} {problem.describe()} "
                           f"({problem.key()}) on {where}: submit a job with POST /v1/jobs")
        library = measurements.problem_best(s, record.id, gpu_model,
                                             kinds.get(problem.kind).library_backends)
        decision = decisions.current(s, record.id, gpu_model)
        best, library = decisions.as_decided(s, decision, best, library)
        return BestAnswer(record, gpu_model, best, library, decision)
