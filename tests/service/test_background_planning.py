"""``KS_PLANNING=background``: leases and reports plan nothing, the planner plans the marked jobs.

Tuners are the FAKE tuners of ``tests/conftest.py`` behind a proxy that logs every call with
whether the planner was running it; measurements are FAKE dicts from the driver.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import event, select

from db import candidates as cands
from db import jobs, measurements
from db.models import SummaryRow
from service.planner import Planner
from service.settings import ServiceSettings


class Watched:
    """A tuner whose every method call is logged with ``who[0]`` (who is calling)."""

    def __init__(self, inner: Any, calls: list[tuple[str, str]], who: list[str]) -> None:
        self._inner, self._calls, self._who = inner, calls, who

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls.append((name, self._who[0]))
            return attr(*args, **kwargs)
        return call


class Planning:
    """The planner of an app, marking the tuner calls it makes as its own."""

    def __init__(self, app: FastAPI, who: list[str]) -> None:
        self.planner = Planner(app.state.flow)
        self.who = who

    def drain(self) -> int:
        self.who[0] = "planner"
        try:
            return self.planner.drain()
        finally:
            self.who[0] = "request"


@pytest.fixture
def settings(database_url: str) -> ServiceSettings:
    return ServiceSettings(database_url=database_url, lease_seconds=60, window=4,
                           max_attempts=3, default_max_trials=8, planning="background")


@pytest.fixture
def calls() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def who() -> list[str]:
    return ["request"]


@pytest.fixture
def app(make_app: Any, settings: ServiceSettings, fake_tuners: Any,
        calls: list[tuple[str, str]], who: list[str]) -> FastAPI:
    return make_app(settings, lambda *a, **k: Watched(fake_tuners(*a, **k), calls, who))


@pytest.fixture
def planning(app: FastAPI, who: list[str]) -> Planning:
    return Planning(app, who)


def _due(app: FastAPI, job_id: int) -> bool:
    with app.state.flow.db.read_session() as s:
        return jobs.is_marked(s, job_id)


def test_requests_only_mark_and_the_planner_runs_the_job(
        app: FastAPI, driver: Any, planning: Planning, fake_tuners: Any,
        calls: list[tuple[str, str]]) -> None:
    job = driver.submit({"max_trials": 6})
    w = driver.register()
    # The first lease binds the job and marks it; its candidates come once it is planned.
    assert driver.lease(w)["candidates"] == []
    assert driver.job(job["id"])["status"] == "running" and _due(app, job["id"])
    assert planning.drain() == 1 and not _due(app, job["id"])
    grant = driver.lease(w)
    assert len(grant["candidates"]) == 4  # the window
    for c in grant["candidates"]:
        assert driver.report(w, grant["lease_id"], c["id"], driver.fake_ok(10.0 + c["id"])
                             )["accepted"] == [c["id"]]
    assert _due(app, job["id"]) and fake_tuners.recorded() == []  # stored, not told yet
    planning.drain()
    assert sorted(m.median_us for m in fake_tuners.recorded()) == sorted(
        10.0 + c["id"] for c in grant["candidates"] if c["backend"] == "triton")
    for _ in range(20):
        if driver.job(job["id"])["status"] != "running":
            break
        g = driver.lease(w)
        for c in g["candidates"]:
            driver.report(w, g["lease_id"], c["id"], driver.fake_ok(10.0 + c["id"]))
        planning.drain()
    final = driver.job(job["id"])
    assert final["status"] == "done" and final["decision"] is not None
    assert final["progress"]["trials_done"] == 6 and final["progress"]["outstanding"] == 0
    # Every tuner call (proposals, tells) came from the planner, none from a request.
    assert calls and {who for _, who in calls} == {"planner"}, calls


def test_a_result_stored_before_a_crash_is_told_by_the_next_planner(
        app: FastAPI, make_app: Any, settings: ServiceSettings, driver: Any,
        planning: Planning, fake_tuners: Any, who: list[str]) -> None:
    job = driver.submit({"max_trials": 4})
    w = driver.register()
    driver.lease(w)
    planning.drain()
    grant = driver.lease(w)
    c = next(c for c in grant["candidates"] if c["backend"] == "triton")
    driver.report(w, grant["lease_id"], c["id"], driver.fake_ok(7.0))
    # The API process dies here, before any planner ran: the mark is in the database.
    app.state.flow.close()
    restarted = make_app(settings)
    assert _due(restarted, job["id"])
    Planning(restarted, who).drain()
    assert [m.median_us for m in fake_tuners.recorded()] == [7.0]


def test_the_planner_finishes_a_job_out_of_time(app: FastAPI, driver: Any,
                                               planning: Planning, clock: Any) -> None:
    job = driver.submit({"max_trials": 50, "max_seconds": 30})
    w = driver.register()
    driver.lease(w)
    planning.drain()
    grant = driver.lease(w)
    for c in grant["candidates"]:
        driver.report(w, grant["lease_id"], c["id"], driver.fake_ok(5.0 + c["id"]))
    planning.drain()
    assert driver.job(job["id"])["status"] == "running"
    clock.advance(31)
    # No request comes: the planner's deadline check alone ends the job.
    fresh = Planner(app.state.flow)
    fresh.step()
    fresh.drain()
    assert driver.job(job["id"])["status"] in ("done", "failed")


def test_an_expired_lease_marks_the_job(app: FastAPI, driver: Any, planning: Planning,
                                        clock: Any) -> None:
    job = driver.submit({"max_trials": 4})
    a, b = driver.register("a"), driver.register("b")
    driver.lease(a)
    planning.drain()
    first = driver.lease(a)
    assert first["candidates"] and not _due(app, job["id"])
    clock.advance(61)
    again = driver.lease(b)  # takes back the expired lease, then leases the same candidates
    assert sorted(c["id"] for c in again["candidates"]) == sorted(
        c["id"] for c in first["candidates"])
    assert _due(app, job["id"])


def test_cancel_marks_and_the_planner_closes_the_trials(
        app: FastAPI, driver: Any, planning: Planning, fake_tuners: Any,
        client: Any) -> None:
    job = driver.submit({"max_trials": 6})
    w = driver.register()
    driver.lease(w)
    planning.drain()
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200
    assert _due(app, job["id"])
    tiers = list(fake_tuners.tiers.values())
    assert all(t.abandoned == [] for t in tiers)
    planning.drain()
    proposed = sorted(n for t in tiers for n in range(t.trials))
    assert proposed and sorted(n for t in tiers for n in t.abandoned) == proposed


def test_a_job_whose_planning_fails_does_not_hold_up_the_others(
        app: FastAPI, driver: Any, planning: Planning, monkeypatch: Any) -> None:
    first = driver.submit({"max_trials": 4})
    second = driver.submit({"max_trials": 4})
    w = driver.register()
    driver.lease(w)  # binds the first
    driver.lease(w)  # binds the second
    agent = app.state.flow.agent
    advance = agent.advance

    def broken(job_id: int, *args: Any) -> None:
        if job_id == first["id"]:
            raise RuntimeError("a planning bug")
        advance(job_id, *args)

    monkeypatch.setattr(agent, "advance", broken)
    planning.drain()  # ends: a failed job is not marked again by its own failure
    assert driver.job(second["id"])["progress"]["outstanding"] > 0  # planned regardless
    assert driver.job(first["id"])["progress"]["outstanding"] == 0
    assert not _due(app, first["id"]) and not _due(app, second["id"])


def _planned_job(driver: Any, planning: Planning, max_trials: int = 4
                 ) -> tuple[dict[str, Any], int]:
    """A job and a worker whose first lease bound it, once the planner has planned it."""
    job = driver.submit({"max_trials": max_trials})
    w = driver.register()
    driver.lease(w)  # binds the job; the planner plans it
    planning.drain()
    return job, w


def _planned_lease(driver: Any, planning: Planning
                   ) -> tuple[dict[str, Any], int, dict[str, Any], list[int]]:
    """:func:`_planned_job`, and the worker's lease of the job's planned candidates (their
    ids sorted)."""
    job, w = _planned_job(driver, planning)
    grant = driver.lease(w)
    return job, w, grant, sorted(c["id"] for c in grant["candidates"])


def test_a_report_is_stored_whole_and_its_repeat_refused(
        app: FastAPI, driver: Any, planning: Planning, client: Any) -> None:
    job, w, grant, ids = _planned_lease(driver, planning)
    body = {"lease_id": grant["lease_id"],
            "results": [{"candidate_id": i, "measurement": driver.fake_ok(20.0 + i)}
                        for i in reversed(ids)] + [
                           {"candidate_id": 999_999, "measurement": driver.fake_ok(1.0)}]}
    first = client.post(f"/v1/workers/{w}/report", json=body).json()
    assert first["accepted"] == ids  # in the order they were locked: by id
    assert [r["candidate_id"] for r in first["rejected"]] == [999_999]
    assert _due(app, job["id"])
    planning.drain()
    again = client.post(f"/v1/workers/{w}/report", json=body).json()
    assert again["accepted"] == []
    assert all("already reported" in r["reason"] for r in again["rejected"][:-1])
    assert _due(app, job["id"])  # a repeat is marked too: the planner tells what it missed
    with app.state.flow.db.read_session() as s:
        stored = measurements.of_candidates(s, ids)
    assert sorted(stored) == ids and {m.median_us for m in stored.values()} == {
        20.0 + i for i in ids}  # each stored once, the first report's values


def test_a_lease_binds_the_oldest_job_it_can_run_past_the_first_page(
        app: FastAPI, driver: Any) -> None:
    """The lease reads the unbound jobs a few at a time: jobs the worker cannot run (no
    backend in common) are passed over, also beyond the first page read."""
    foreign = [driver.submit({"max_trials": 4}, backends=["cutlass"]) for _ in range(6)]
    mine = driver.submit({"max_trials": 4})
    w = driver.register()
    assert driver.lease(w)["candidates"] == []  # binds and marks; planned later
    assert driver.job(mine["id"])["status"] == "running" and _due(app, mine["id"])
    assert {driver.job(j["id"])["status"] for j in foreign} == {"queued"}


def test_a_lease_passes_over_a_job_another_lease_is_binding(
        app: FastAPI, driver: Any, database_url: str) -> None:
    """Leases bind jobs side by side: a job row another transaction holds (a lease binding it)
    is passed over, not waited for (Postgres; SQLite runs one writer at a time)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("row locks are Postgres's; SQLite serialises writers")
    first = driver.submit({"max_trials": 4})
    second = driver.submit({"max_trials": 4}, problem=dict(driver.PROBLEM, m=1024))
    w = driver.register()
    flow = app.state.flow
    with flow.db.session() as holder:  # another lease in the middle of binding the oldest
        held = jobs.unbound_jobs(holder, driver.GPU, limit=1, lock=True)
        assert [j.id for j in held] == [first["id"]]
        done = threading.Event()
        thread = threading.Thread(target=lambda: (flow.lease(w, 4), done.set()))
        thread.start()
        assert done.wait(10), "the lease waited for the held job's row lock"
        thread.join()
    assert driver.job(second["id"])["status"] == "running"
    assert driver.job(first["id"])["status"] == "queued"


def test_a_report_naming_a_candidate_twice_stores_it_once(
        app: FastAPI, driver: Any, planning: Planning, client: Any) -> None:
    """Results are read and written together; a candidate's second result in one report is
    refused as a repeat of the first, and a failed result fails its candidate."""
    job, w, grant, ids = _planned_lease(driver, planning)
    assert len(ids) >= 3
    results = ([{"candidate_id": ids[0], "measurement": driver.fake_ok(30.0)},
                {"candidate_id": ids[1], "measurement": driver.fake_failure()}]
               + [{"candidate_id": i, "measurement": driver.fake_ok(40.0)} for i in ids[2:]]
               + [{"candidate_id": ids[0], "measurement": driver.fake_ok(31.0)}])
    out = client.post(f"/v1/workers/{w}/report",
                      json={"lease_id": grant["lease_id"], "results": results}).json()
    assert out["accepted"] == ids
    assert [(r["candidate_id"], "already reported" in r["reason"]) for r in out["rejected"]] \
        == [(ids[0], True)]
    with app.state.flow.db.read_session() as s:
        stored = measurements.of_candidates(s, ids)
        states = {c.id: (c.status, c.failure_reason) for c in cands.job_candidates(s, job["id"])}
        totals = s.execute(select(SummaryRow.trials, SummaryRow.failed)
                           .where(SummaryRow.gpu_model == driver.GPU)).all()
    assert stored[ids[0]].median_us == 30.0 and stored[ids[1]].status == "compile_error"
    assert states[ids[0]] == ("done", None) and states[ids[1]][0] == "failed"
    assert "compile_error" in (states[ids[1]][1] or "")
    kernels = sum(1 for m in stored.values() if m.task is None)
    assert totals == [(kernels, 1)]


@contextmanager
def _statements(engine: Any) -> Iterator[list[str]]:
    """The SQL statements ``engine`` sends while the block runs."""
    sent: list[str] = []

    def count(*args: Any, **kwargs: Any) -> None:
        sent.append(args[2])
    event.listen(engine, "before_cursor_execute", count)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", count)


def test_a_report_reads_and_writes_its_results_together(
        app: FastAPI, driver: Any, planning: Planning, client: Any) -> None:
    """A report's statements do not grow with its results (one lock, one read of the stored
    measurements, one insert, one totals upsert, one candidate update for all of them)."""
    _, w = _planned_job(driver, planning, max_trials=8)
    engine = app.state.flow.db.engine
    counts = []
    for n in (1, 3):
        grant = driver.lease(w, n=n)
        assert len(grant["candidates"]) == n
        with _statements(engine) as statements:
            out = client.post(f"/v1/workers/{w}/report", json={
                "lease_id": grant["lease_id"],
                "results": [{"candidate_id": c["id"], "measurement": driver.answer(c)}
                            for c in grant["candidates"]]}).json()
        assert len(out["accepted"]) == n
        counts.append(len(statements))
    assert counts[0] == counts[1]


def test_a_lease_reads_a_problem_once_per_process(
        app: FastAPI, driver: Any, planning: Planning) -> None:
    """A lease hands out and marks its candidates in one statement; the problems of what it
    hands out are read once by a process (a problem's row never changes)."""
    _, w = _planned_job(driver, planning, max_trials=8)
    engine = app.state.flow.db.engine
    reads = []
    for _ in range(2):
        with _statements(engine) as statements:
            grant = driver.lease(w, n=1)
        assert len(grant["candidates"]) == 1
        assert grant["candidates"][0]["problem"]["m"] == driver.PROBLEM["m"]
        assert sum(1 for q in statements if q.lstrip().startswith("UPDATE candidates")) == 1
        reads.append(sum(1 for q in statements if "FROM problems" in q
                         and "JOIN" not in q))
    assert reads == [1, 0]
