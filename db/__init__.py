"""Storage: SQLAlchemy models, the session helper, repositories and Alembic migrations.

ORM rows stay inside this package; repositories (``db.jobs``, ``db.candidates``,
``db.measurements``, ``db.workers``) take a session and return the frozen records of
``db.records``.
"""

from __future__ import annotations

from db.engine import Database, make_engine, normalize_url
from db.migrate import upgrade
from db.records import (
    CandidateRecord,
    CandidateStatus,
    JobCounts,
    JobRecord,
    JobStatus,
    LeaseRecord,
    MeasurementRecord,
    ProblemRecord,
    WorkerRecord,
)

__all__ = [
    "CandidateRecord",
    "CandidateStatus",
    "Database",
    "JobCounts",
    "JobRecord",
    "JobStatus",
    "LeaseRecord",
    "MeasurementRecord",
    "ProblemRecord",
    "WorkerRecord",
    "make_engine",
    "normalize_url",
    "upgrade",
]
