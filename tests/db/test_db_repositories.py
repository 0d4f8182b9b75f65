"""Repositories and the session helper: dedup, locking, expiry, time zones."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from db import candidates, generations, jobs, measurements, workers
from db.engine import Database
from db.migrate import upgrade
from db.models import WorkerRow
from db.records import CandidateStatus
from search.kinds.gemm.spec import GemmProblem
from search.types import Measurement, Status

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


def test_problem_bests_in_one_statement_as_problem_best_twice(database: Database) -> None:
    """The best of any backend and the best of some backends, read together, are what two
    reads of ``problem_best`` give (``exact``: only kernels in the input precision)."""
    job_id, worker_id = _job(database, n=4)
    times = {0: ("triton", 30.0, None), 1: ("cublas", 50.0, None), 2: ("cublas", 40.0, None),
             3: ("triton", 20.0, "tf32")}
    with database.session() as s:
        cands = {c.config["i"]: c for c in candidates.job_candidates(s, job_id)}
        for i, (backend, us, precision) in times.items():
            c = dataclasses.replace(cands[i], backend=backend)
            measurements.add_measurements(s, [measurements.Reported(
                c, "G", Measurement(Status.OK, median_us=us), worker_id, NOW, precision)])
        problem_id = cands[0].problem_id
    with database.read_session() as s:
        for exact in (False, True):
            both = measurements.problem_bests(s, problem_id, "G", ("cublas",), exact=exact)
            assert both == (measurements.problem_best(s, problem_id, "G", exact=exact),
                            measurements.problem_best(s, problem_id, "G", ("cublas",),
                                                      exact=exact))
            assert [m.median_us for m in both if m] == ([30.0, 40.0] if exact else [20.0, 40.0])
        assert measurements.problem_bests(s, problem_id, "G", ("cutlass",))[1] is None
        assert measurements.problem_bests(s, problem_id, "other GPU", ("cublas",)) == (None,
                                                                                     None)


def test_the_generation_comes_with_its_problem(database: Database) -> None:
    """``generations.with_problem`` over ``Database.reads``: the problem's record and the
    generation ``of_problem`` reads, which a stored measurement moves on."""
    key = GemmProblem(1, 2, 3).key()
    job_id, worker_id = _job(database, n=1)
    with database.reads() as s:
        record, before = generations.with_problem(s, key) or (None, None)
        assert record is not None and record.problem == GemmProblem(1, 2, 3)
        assert before == generations.of_problem(s, key)
        assert generations.with_problem(s, "gemm:none") is None
    with database.session() as s:
        [c] = candidates.job_candidates(s, job_id)
        measurements.add_measurements(s, [measurements.Reported(
            c, "G", Measurement(Status.OK, median_us=1.0), worker_id, NOW)])
    with database.reads() as s:
        assert (generations.of_problem(s, key) or (0, 0))[1] == (before or (0, 0))[1] + 1


def test_bind_and_mark_binds_a_queued_job_once(database: Database) -> None:
    """The job is bound and marked for the planner in one step (one statement on Postgres);
    a job bound already is neither bound again nor marked."""
    with database.session() as s:
        p = jobs.get_or_create_problem(s, GemmProblem(1, 2, 3), NOW)
        job = jobs.create_job(s, p, max_trials=4, max_seconds=None, backends=["triton"],
                              target_gpu=None, seed=0, now=NOW)
    with database.session() as s:
        assert jobs.bind_and_mark(s, job.id, "G", ["triton"], NOW)
    with database.session() as s:
        assert jobs.claim_due(s, 10) == [job.id]
        assert not jobs.bind_and_mark(s, job.id, "H", ["triton"], NOW)
    with database.read_session() as s:
        bound = jobs.get_job(s, job.id)
        assert not jobs.is_marked(s, job.id)
    assert bound is not None and bound.status == "running" and bound.bound_gpu == "G"
    assert bound.bound_backends == ("triton",) and bound.started_at == NOW


def test_lease_of_model_leaves_a_held_result_to_other_identities(database: Database) -> None:
    """The one-statement lease of a GPU model's queue: a candidate whose result is held goes
    to no worker of the identity that reported it, nor (with identities) to one of none."""
    job_id, holder = _job(database, n=2)
    exp = NOW + timedelta(minutes=1)
    with database.session() as s:
        jobs.bind_job(s, job_id, "G", ["triton"], NOW)
        a2 = workers.register(s, "a2", "G", {"gpu_model": "G"}, NOW, token_name="a").id
        b1 = workers.register(s, "b1", "G", {"gpu_model": "G"}, NOW, token_name="b").id
        s.execute(update(WorkerRow).where(WorkerRow.id == holder).values(token_name="a"))
        held, other = candidates.job_candidates(s, job_id)
        measurements.add_measurements(s, [measurements.Reported(
            held, "G", Measurement(Status.HELD, median_us=1.0), holder, NOW)])

    def lease(worker: int, token: str | None, by_identity: bool = True) -> list[int]:
        with database.session() as s:
            got = candidates.lease_pending_of_model(s, "G", ["triton"], 4, f"l{worker}",
                                                    worker, exp, by_identity=by_identity,
                                                    token_name=token)
            s.rollback()
        return [c.id for c in got]

    assert lease(holder, "a", by_identity=False) == [other.id]
    assert lease(a2, "a", by_identity=False) == [held.id, other.id]
    assert lease(a2, "a") == [other.id]
    assert lease(b1, None) == [other.id]
    assert lease(b1, "b") == [held.id, other.id]
