"""Repositories and the session helper: dedup, locking, expiry, time zones."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from db import candidates, jobs, workers
from db.engine import Database
from db.migrate import upgrade
from db.records import CandidateStatus
from search.kinds.gemm.spec import GemmProblem

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    upgrade(database_url)
    db = Database(database_url)
    yield db
    db.dispose()


def _job(db: Database, n: int = 4) -> tuple[int, int]:
    with db.session() as s:
        p = jobs.get_or_create_problem(s, GemmProblem(1, 2, 3), NOW)
        job = jobs.create_job(s, p, max_trials=n, max_seconds=None, backends=["triton"],
                              target_gpu=None, seed=0, now=NOW)
        candidates.add_candidates(s, job.id, p.id, "triton",
                                  [({"i": i}, i) for i in range(n)], NOW, tier="tiles")
        w = workers.register(s, "w", "G", {"gpu_model": "G", "mode": "cuda"}, NOW)
    return job.id, w.id


def test_problem_dedup_and_records_are_frozen_utc(database: Database) -> None:
    with database.session() as s:
        a = jobs.get_or_create_problem(s, GemmProblem(1, 2, 3), NOW)
    with database.session() as s:
        b = jobs.get_or_create_problem(s, GemmProblem(1, 2, 3), NOW + timedelta(1))
    assert a == b and b.created_at == NOW and b.created_at.tzinfo is not None
    assert a.problem == GemmProblem(1, 2, 3)  # parsed as it leaves the table
    with pytest.raises(AttributeError):
        a.key = "other"  # type: ignore[misc]


def test_session_rolls_back_on_error(database: Database) -> None:
    with pytest.raises(RuntimeError), database.session() as s:
        jobs.get_or_create_problem(s, GemmProblem(5, 6, 7), NOW)
        raise RuntimeError("boom")
    with database.read_session() as s:
        assert jobs.find_problem(s, GemmProblem(5, 6, 7).key()) is None


def test_skip_locked_hands_out_disjoint_candidates(database: Database) -> None:
    job_id, worker_id = _job(database)
    exp = NOW + timedelta(minutes=1)
    if database.dialect == "postgresql":
        # Two transactions open at once: the second skips the rows the first holds.
        with database.session() as s1, database.session() as s2:
            got1 = candidates.lease_pending(s1, job_id, ["triton"], 2, "l1", worker_id, exp)
            got2 = candidates.lease_pending(s2, job_id, ["triton"], 4, "l2", worker_id, exp)
    else:
        with database.session() as s1:
            got1 = candidates.lease_pending(s1, job_id, ["triton"], 2, "l1", worker_id, exp)
        with database.session() as s2:
            got2 = candidates.lease_pending(s2, job_id, ["triton"], 4, "l2", worker_id, exp)
    assert len(got1) == 2 and len(got2) == 2
    assert not {c.id for c in got1} & {c.id for c in got2}


def test_expire_stale(database: Database) -> None:
    job_id, worker_id = _job(database, n=2)
    exp = NOW + timedelta(seconds=30)
    with database.session() as s:
        candidates.lease_pending(s, job_id, ["triton"], 2, "l1", worker_id, exp)
    with database.session() as s:
        assert candidates.expire_stale(s, NOW + timedelta(seconds=29), max_attempts=1) == []
        out = candidates.expire_stale(s, NOW + timedelta(seconds=31), max_attempts=1)
    assert [e.new_status for e in out] == [CandidateStatus.FAILED] * 2
    assert out[0].candidate.failure_reason == "lease expired 1 times"
    with database.read_session() as s:
        counts = candidates.job_counts(s, job_id)
    assert counts.failed == 2 and counts.outstanding == 0 and counts.custom_terminal == 2
