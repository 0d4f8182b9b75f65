"""Frozen records: what repositories hand out instead of ORM rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from db.models import (
    CalibrationRow,
    CandidateRow,
    CatalogueRow,
    DecisionRow,
    JobRow,
    LeaseRow,
    MeasurementRow,
    ProblemRow,
    WorkerRow,
)
from search.types import Measurement, Problem, Status, parse_problem


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_JOB = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)


class CandidateStatus(StrEnum):
    PENDING = "pending"
    LEASED = "leased"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


OUTSTANDING = (CandidateStatus.PENDING.value, CandidateStatus.LEASED.value)
TERMINAL = (CandidateStatus.DONE.value, CandidateStatus.FAILED.value)


@dataclass(frozen=True)
class WorkerRecord:
    id: int
    name: str
    gpu_model: str
    device: dict[str, Any] = field(hash=False)
    registered_at: datetime
    last_seen: datetime
    secret_sha256: str | None = field(default=None, repr=False)
    token_name: str | None = None

    @classmethod
    def of(cls, row: WorkerRow) -> WorkerRecord:
        return cls(row.id, row.name, row.gpu_model, dict(row.device), row.registered_at,
                   row.last_seen, row.secret_sha256, row.token_name)


@dataclass(frozen=True)
class CatalogueRecord:
    """A worker catalogue as stored (``db.catalogues``): ``body`` is the declared JSON."""

    gpu_model: str
    kind: str
    digest: str
    body: dict[str, Any] = field(hash=False)
    worker_id: int | None
    updated_at: datetime

    @classmethod
    def of(cls, row: CatalogueRow) -> CatalogueRecord:
        return cls(row.gpu_model, row.kind, row.digest, dict(row.body), row.worker_id,
                   row.updated_at)


@dataclass(frozen=True)
class ProblemRecord:
    """A stored problem, parsed (``search.types.parse_problem``) as it leaves the table."""

    id: int
    key: str
    kind: str
    problem: Problem
    created_at: datetime

    @classmethod
    def of(cls, row: ProblemRow) -> ProblemRecord:
        return cls(row.id, row.key, row.kind, parse_problem(row.spec), row.created_at)


@dataclass(frozen=True)
class JobRecord:
    """A job with its problem, parsed once as the row becomes this record."""

    id: int
    problem_id: int
    problem_key: str
    problem: Problem
    status: str
    max_trials: int | None
    max_seconds: float | None
    backends: tuple[str, ...]
    target_gpu: str | None
    bound_gpu: str | None
    bound_backends: tuple[str, ...] | None
    seed: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    policy: dict[str, Any] = field(default_factory=dict, hash=False)
    stage: str | None = None
    exhausted_tiers: tuple[str, ...] = ()
    owner: str | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_JOB

    @classmethod
    def of(cls, row: JobRow, problem: ProblemRow) -> JobRecord:
        bound = tuple(row.bound_backends) if row.bound_backends is not None else None
        return cls(row.id, row.problem_id, problem.key, parse_problem(problem.spec), row.status,
                   row.max_trials, row.max_seconds, tuple(row.backends), row.target_gpu,
                   row.bound_gpu, bound, row.seed, row.created_at,
                   row.started_at, row.finished_at, row.error, dict(row.policy or {}),
                   row.stage, tuple(row.exhausted_tiers or ()), row.owner)


@dataclass(frozen=True)
class CandidateRecord:
    """A kernel candidate (``backend``) or a task (``task``); exactly one is set."""

    id: int
    job_id: int
    problem_id: int
    backend: str | None
    config: dict[str, Any] = field(hash=False)
    config_key: str
    trial_number: int | None
    status: str
    attempts: int
    lease_id: str | None
    lease_expires_at: datetime | None
    worker_id: int | None
    failure_reason: str | None
    tier: str | None = None
    task: str | None = None

    @classmethod
    def of(cls, row: CandidateRow) -> CandidateRecord:
        return cls(row.id, row.job_id, row.problem_id, row.backend, dict(row.config),
                   row.config_key, row.trial_number, row.status, row.attempts, row.lease_id,
                   row.lease_expires_at, row.worker_id, row.failure_reason, row.tier, row.task)


@dataclass(frozen=True)
class MeasurementRecord:
    """A kernel's measurement (``backend``) or a task's (``task``), as its candidate."""

    id: int
    candidate_id: int | None
    job_id: int | None
    problem_id: int
    gpu_model: str
    backend: str | None
    config: dict[str, Any] = field(hash=False)
    config_key: str
    status: str
    median_us: float | None
    p20_us: float | None
    p80_us: float | None
    reps: int
    rel_error: float | None
    compile_s: float | None
    bench_s: float | None
    error: str | None
    env: dict[str, Any] = field(hash=False)
    worker_id: int | None
    created_at: datetime
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    task: str | None = None
    #: below the problem's input precision, what the kernel computes in (None: the input's)
    precision: str | None = None

    @classmethod
    def of(cls, row: MeasurementRow) -> MeasurementRecord:
        return cls(row.id, row.candidate_id, row.job_id, row.problem_id, row.gpu_model,
                   row.backend, dict(row.config), row.config_key, row.status, row.median_us,
                   row.p20_us, row.p80_us, row.reps, row.rel_error, row.compile_s, row.bench_s,
                   row.error, dict(row.env or {}), row.worker_id, row.created_at,
                   dict(row.extra or {}), row.task, row.precision)

    @property
    def gpu_s(self) -> float:
        """Seconds the worker's GPU was held for this measurement (compile + benchmark)."""
        return float(self.compile_s or 0.0) + float(self.bench_s or 0.0)

    def to_measurement(self) -> Measurement:
        return Measurement(status=Status(self.status), median_us=self.median_us,
                           p20_us=self.p20_us, p80_us=self.p80_us, reps=self.reps,
                           rel_error=self.rel_error, compile_s=self.compile_s,
                           bench_s=self.bench_s, error=self.error, env=dict(self.env),
                           extra=dict(self.extra))


@dataclass(frozen=True)
class LeaseRecord:
    id: str
    worker_id: int
    created_at: datetime
    expires_at: datetime

    @classmethod
    def of(cls, row: LeaseRow) -> LeaseRecord:
        return cls(row.id, row.worker_id, row.created_at, row.expires_at)


@dataclass(frozen=True)
class JobCounts:
    """Candidate counts of one job, as the completion rule and the top-up need them."""

    pending: int = 0
    leased: int = 0
    custom_created: int = 0
    custom_terminal: int = 0
    ok: int = 0
    failed: int = 0

    @property
    def outstanding(self) -> int:
        return self.pending + self.leased


@dataclass(frozen=True)
class Expired:
    """A leased candidate whose lease ran out, and where it went (pending, failed, cancelled)."""

    candidate: CandidateRecord
    new_status: str


@dataclass(frozen=True)
class CalibrationRecord:
    id: int
    gpu_model: str
    bandwidth_gbs: float
    peak_tflops: dict[str, float] = field(hash=False)
    env: dict[str, Any] = field(hash=False)
    stale: bool
    job_id: int | None
    worker_id: int | None
    bench_s: float | None
    created_at: datetime
    peak_low_tflops: dict[str, float] = field(default_factory=dict, hash=False)

    @classmethod
    def of(cls, row: CalibrationRow) -> CalibrationRecord:
        return cls(row.id, row.gpu_model, row.bandwidth_gbs, dict(row.peak_tflops),
                   dict(row.env or {}), bool(row.stale), row.job_id, row.worker_id,
                   row.bench_s, row.created_at, dict(row.peak_low_tflops or {}))


@dataclass(frozen=True)
class DecisionRecord:
    id: int
    problem_id: int
    job_id: int | None
    gpu_model: str
    verdict: str
    chosen: str
    backend: str | None
    config: dict[str, Any] | None = field(hash=False)
    median_us: float | None
    speedup: float | None
    bound: str | None
    attainable_us: float | None
    verified: bool
    rationale: str
    evidence: dict[str, Any] = field(hash=False)
    env: dict[str, Any] = field(hash=False)
    created_at: datetime
    superseded_at: datetime | None
    #: what the served kernel computes in and its measured relative error (None: a decision
    #: stored before precisions were recorded and never backfilled)
    precision: str | None = None
    rel_error: float | None = None

    @classmethod
    def of(cls, row: DecisionRow) -> DecisionRecord:
        return cls(row.id, row.problem_id, row.job_id, row.gpu_model, row.verdict, row.chosen,
                   row.backend, dict(row.config) if row.config is not None else None,
                   row.median_us, row.speedup, row.bound, row.attainable_us, bool(row.verified),
                   row.rationale, dict(row.evidence or {}), dict(row.env or {}), row.created_at,
                   row.superseded_at, row.precision, row.rel_error)
