"""ORM models of the service's tables. They stay inside ``db``; repositories return records.

Table names are plain (``workers``, ``problems``, ``jobs``, ``candidates``, ``measurements``,
``leases``) and must not collide with Optuna's own tables (``studies``, ``trials``,
``version_info``, ``alembic_version`` ...), which live in the same database.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

#: Primary keys: 64-bit on Postgres; SQLite needs plain INTEGER for its rowid autoincrement.
IdType = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps stored as naive UTC (SQLite has no time zones) and read back as aware UTC."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base of the service's tables (its metadata drives Alembic)."""

    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON(), list[str]: JSON()}


class WorkerRow(Base):
    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    gpu_model: Mapped[str] = mapped_column(String(200), index=True)
    device: Mapped[dict[str, Any]]
    registered_at: Mapped[datetime]
    last_seen: Mapped[datetime]
    #: SHA-256 hex digest of the secret issued at the first registration (NULL: registered
    #: before secrets existed; the next registration issues one)
    secret_sha256: Mapped[str | None] = mapped_column(String(64))
    #: the name of the worker token it registered with (``KS_WORKER_TOKENS``, ``default`` for
    #: ``KS_WORKER_TOKEN``): its later calls need that token; NULL: registered while worker
    #: endpoints were open, or before token identities existed (its next registration records
    #: one)
    token_name: Mapped[str | None] = mapped_column(String(64))


class CatalogueRow(Base):
    """What the workers of a GPU model declared they can build, per name (``cutlass``: the
    operation catalogue of ``search.kinds.gemm.cutlass_catalogue``); the latest declaration
    wins."""

    __tablename__ = "worker_catalogues"

    gpu_model: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64))
    body: Mapped[dict[str, Any]]
    worker_id: Mapped[int | None] = mapped_column(IdType, ForeignKey("workers.id"))
    updated_at: Mapped[datetime]


class ProblemRow(Base):
    __tablename__ = "problems"

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(300), unique=True)
    kind: Mapped[str] = mapped_column(String(32))
    spec: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    #: the shape as people write it (``ProblemKind.shape_label``: GEMM ``64x48x80``), for the
    #: dashboard's shape search; NULL where the kind was not loaded when it was labelled
    label: Mapped[str | None] = mapped_column(String(200))
    #: the problem's input dtype (its ``dtype``), a column so that lists filter and sort by it
    dtype: Mapped[str | None] = mapped_column(String(32))


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_created_at", "created_at"),
                      Index("ix_jobs_owner_status", "owner", "status"))

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    problem_id: Mapped[int] = mapped_column(IdType, ForeignKey("problems.id"), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    max_trials: Mapped[int | None] = mapped_column(Integer)
    max_seconds: Mapped[float | None] = mapped_column(Float)
    backends: Mapped[list[str]]
    target_gpu: Mapped[str | None] = mapped_column(String(200))
    bound_gpu: Mapped[str | None] = mapped_column(String(200))
    #: ``backends`` intersected with what the first leasing device supports.
    bound_backends: Mapped[list[str] | None] = mapped_column(JSON)
    seed: Mapped[int] = mapped_column(Integer, default=0)
    #: the decision loop's policy (``search.decision.Policy`` fields) and where it stands
    policy: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    stage: Mapped[str | None] = mapped_column(String(16))
    #: custom-search tiers whose space ran out for this job
    exhausted_tiers: Mapped[list[str] | None] = mapped_column(JSON)
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error: Mapped[str | None] = mapped_column(Text)
    #: the name of the user token that submitted it (NULL: submitted while the service was
    #: open, or before owners existed)
    owner: Mapped[str | None] = mapped_column(String(64))


class PlanMarkRow(Base):
    """A change the decision loop reads, waiting for the planner (``KS_PLANNING=background``:
    ``service.planner``); no foreign key, so that marking never waits on the job's row."""

    __tablename__ = "plan_marks"

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(IdType, index=True)


#: A row is a kernel (``backend``) or a task (``task``: calibration, verification), never both.
BACKEND_OR_TASK = "(backend IS NULL) <> (task IS NULL)"


class CandidateRow(Base):
    __tablename__ = "candidates"
    __table_args__ = (
        Index("ix_candidates_job_status", "job_id", "status"),
        Index("ix_candidates_status_expiry", "status", "lease_expires_at"),
        # the candidates of a study's trials (db.candidates.of_trials)
        Index("ix_candidates_problem_trial", "problem_id", "tier", "trial_number"),
        CheckConstraint(BACKEND_OR_TASK, name="ck_candidates_backend_or_task"),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(IdType, ForeignKey("jobs.id"))
    problem_id: Mapped[int] = mapped_column(IdType, ForeignKey("problems.id"))
    backend: Mapped[str | None] = mapped_column(String(32))
    #: ``search.types.Task`` value of a task (NULL for a kernel)
    task: Mapped[str | None] = mapped_column(String(32))
    config: Mapped[dict[str, Any]]
    config_key: Mapped[str] = mapped_column(Text)
    trial_number: Mapped[int | None] = mapped_column(Integer)
    #: the custom-search tier (``None`` for library candidates and tasks)
    tier: Mapped[str | None] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_id: Mapped[str | None] = mapped_column(String(36), index=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    worker_id: Mapped[int | None] = mapped_column(IdType, ForeignKey("workers.id"))
    failure_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]


class MeasurementRow(Base):
    __tablename__ = "measurements"
    __table_args__ = (
        Index("ix_measurements_lookup", "problem_id", "gpu_model", "backend", "config_key"),
        CheckConstraint(BACKEND_OR_TASK, name="ck_measurements_backend_or_task"),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    candidate_id: Mapped[int | None] = mapped_column(
        IdType, ForeignKey("candidates.id"), index=True)
    job_id: Mapped[int | None] = mapped_column(IdType, ForeignKey("jobs.id"), index=True)
    problem_id: Mapped[int] = mapped_column(IdType, ForeignKey("problems.id"))
    gpu_model: Mapped[str] = mapped_column(String(200))
    backend: Mapped[str | None] = mapped_column(String(32))
    #: the task measured (NULL for a kernel), as on its candidate
    task: Mapped[str | None] = mapped_column(String(32))
    config: Mapped[dict[str, Any]]
    config_key: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    median_us: Mapped[float | None] = mapped_column(Float)
    p20_us: Mapped[float | None] = mapped_column(Float)
    p80_us: Mapped[float | None] = mapped_column(Float)
    reps: Mapped[int] = mapped_column(Integer, default=0)
    rel_error: Mapped[float | None] = mapped_column(Float)
    compile_s: Mapped[float | None] = mapped_column(Float)
    bench_s: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    env: Mapped[dict[str, Any]]
    #: what a calibration or a verification measured besides one kernel's times
    extra: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    worker_id: Mapped[int | None] = mapped_column(IdType, ForeignKey("workers.id"))
    created_at: Mapped[datetime]
    #: the precision the kernel computes in when below the problem's input precision (fp8_e4m3,
    #: tf32); NULL: the input precision (``ProblemKind.precision_of``)
    precision: Mapped[str | None] = mapped_column(String(16))


class CalibrationRow(Base):
    """Measured peaks of a GPU model under one driver/toolkit (``search.roofline``)."""

    __tablename__ = "calibrations"

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    gpu_model: Mapped[str] = mapped_column(String(200), index=True)
    bandwidth_gbs: Mapped[float] = mapped_column(Float)
    peak_tflops: Mapped[dict[str, Any]]
    #: by precision, the lowest calibration pass behind the peak (NULL: one pass)
    peak_low_tflops: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    env: Mapped[dict[str, Any]]
    stale: Mapped[bool] = mapped_column(Boolean, default=False)
    job_id: Mapped[int | None] = mapped_column(IdType, ForeignKey("jobs.id"))
    worker_id: Mapped[int | None] = mapped_column(IdType, ForeignKey("workers.id"))
    bench_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime]


#: The columns of ``ix_decisions_in_force``.
IN_FORCE_COLUMNS = ("problem_id", "gpu_model", "superseded_at", "verdict", "backend", "speedup",
                    "median_us", "attainable_us", "saved_gpu_s")


class DecisionRow(Base):
    """A verdict of the decision loop for a problem on a GPU model, with its evidence."""

    __tablename__ = "decisions"
    __table_args__ = (
        Index("ix_decisions_problem_gpu", "problem_id", "gpu_model"),
        # The decisions in force with what the dashboard's lists read of them: a covering
        # index, so a list never reads a row (whose evidence runs to many kilobytes).
        Index("ix_decisions_in_force", *IN_FORCE_COLUMNS,
              sqlite_where=text("superseded_at IS NULL"),
              postgresql_where=text("superseded_at IS NULL")),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    problem_id: Mapped[int] = mapped_column(IdType, ForeignKey("problems.id"))
    job_id: Mapped[int | None] = mapped_column(IdType, ForeignKey("jobs.id"), index=True)
    gpu_model: Mapped[str] = mapped_column(String(200))
    verdict: Mapped[str] = mapped_column(String(32))
    chosen: Mapped[str] = mapped_column(String(16))
    backend: Mapped[str | None] = mapped_column(String(32))
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    median_us: Mapped[float | None] = mapped_column(Float)
    speedup: Mapped[float | None] = mapped_column(Float)
    bound: Mapped[str | None] = mapped_column(String(16))
    attainable_us: Mapped[float | None] = mapped_column(Float)
    verified: Mapped[bool] = mapped_column(Boolean, default=False)
    rationale: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any]]
    env: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    superseded_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    #: the precision the served kernel computes in (the input precision unless a policy
    #: allowed a lower one) and its measured relative error
    precision: Mapped[str | None] = mapped_column(String(16))
    rel_error: Mapped[float | None] = mapped_column(Float)
    #: GPU-seconds the early stops left unspent (``search.decision.early_stop_savings``)
    saved_gpu_s: Mapped[float | None] = mapped_column(Float)


class SummaryRow(Base):
    """Running totals of one problem's measurements on one GPU model, kept by
    ``db.summaries`` as each measurement is stored, so the dashboard sorts and sums tuned
    problems without aggregating every measurement on each page."""

    __tablename__ = "tuning_summaries"
    __table_args__ = (Index("ix_tuning_summaries_gpu", "gpu_model"),)

    problem_id: Mapped[int] = mapped_column(IdType, ForeignKey("problems.id"), primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(200), primary_key=True)
    #: kernel measurements (tasks excluded), and those that did not end ok
    trials: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    #: compile + benchmark seconds of every measurement, tasks included
    gpu_s: Mapped[float] = mapped_column(Float, default=0.0)
    first_at: Mapped[datetime]
    last_at: Mapped[datetime]


class LeaseRow(Base):
    __tablename__ = "leases"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    worker_id: Mapped[int] = mapped_column(IdType, ForeignKey("workers.id"), index=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
