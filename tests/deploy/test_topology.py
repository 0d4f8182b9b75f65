"""The team topology without Docker: two API processes (uvicorn) on one database and four
interpreter workers as separate processes, two per GPU model, each pointed at one of the APIs.

Jobs for both models (and one naming none) run to the end while the workers lease through
both APIs at once: no candidate is handed to two workers, no Optuna trial is told twice or
lost, both workers of a model share its jobs' candidates, and a model's measurements stay in
its own jobs, studies and decisions. On Postgres and on SQLite (one file, two processes).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select

from db.models import WorkerRow
from search.types import INTERPRETER_GPU
from tests.deploy.cluster import (
    FORCE,
    PROBLEM,
    Cluster,
    assert_each_measured_once,
    assert_studies_match,
    leases,
    state,
    wait_until,
)

pytestmark = [pytest.mark.deploy, pytest.mark.slow]

MODEL_B = "cpu-interpreter-b"  # the interpreter registered under a second model name
OTHER = {"kind": "gemm", "m": 48, "n": 64, "k": 32, "dtype": "fp16"}


def test_two_apis_and_four_workers_of_two_gpu_models(database_url: str, tmp_path: Path
                                                      ) -> None:
    with Cluster(tmp_path, database_url, lease_seconds=30) as cl:
        cl.migrate()
        api1, api2 = cl.api("api1"), cl.api("api2")
        workers = [cl.worker("a1", api1), cl.worker("a2", api2),
                   cl.worker("b1", api1, gpu_model=MODEL_B),
                   cl.worker("b2", api2, gpu_model=MODEL_B)]
        # every worker registered before the jobs come, so that each gets a share
        wait_until(lambda: _registered(cl) == 4, 180, "four workers registered", cl._dump)
        one, two = cl.client(api1), cl.client(api2)
        budget = {"max_trials": 6}
        submitted = [one.submit_job(PROBLEM, budget=budget, gpu=INTERPRETER_GPU, policy=FORCE),
                     two.submit_job(PROBLEM, budget=budget, gpu=MODEL_B, policy=FORCE),
                     two.submit_job(OTHER, budget=budget, gpu=INTERPRETER_GPU, policy=FORCE),
                     one.submit_job(OTHER, budget=budget, gpu=MODEL_B, policy=FORCE),
                     one.submit_job({**OTHER, "k": 48}, budget={"max_trials": 2},
                                    policy=FORCE)]  # no model named: the first to lease
        finals = [cl.wait_job(api1 if i % 2 else api2, j["id"]) for i, j in enumerate(submitted)]
        states = [state(cl.db, j["id"]) for j in submitted]
        handed = leases(workers)
        alive = [w.name for w in workers if w.alive]
        # Each study (problem x model x tier) holds its own measured trials, each told once.
        assert_studies_match(cl.db, states)

    assert [j["status"] for j in finals] == ["done"] * 5, finals
    assert [j["gpu"] for j in finals[:4]] == [INTERPRETER_GPU, MODEL_B] * 2
    assert finals[4]["gpu"] in (INTERPRETER_GPU, MODEL_B)
    assert alive == ["a1", "a2", "b1", "b2"]

    # No candidate was handed to two workers: nothing expired here, so each was leased once.
    every = [c for st in states for c in st.candidates]
    assert all(c.attempts == 0 for c in every)
    times = Counter(x.candidate for x in handed)
    assert set(times) == {c.id for c in every if c.worker_id is not None}
    assert max(times.values()) == 1, [c for c, n in times.items() if n > 1]

    # A model's measurements stay in its jobs, run by its workers, and in its decision.
    model_of = {"a1": INTERPRETER_GPU, "a2": INTERPRETER_GPU, "b1": MODEL_B, "b2": MODEL_B}
    ran_by: dict[str, set[str]] = {INTERPRETER_GPU: set(), MODEL_B: set()}
    for st, final in zip(states, finals, strict=True):
        assert_each_measured_once(st)
        assert final["decision"]["gpu"] == st.job.bound_gpu
        for ms in st.measured.values():
            for m in ms:
                name = st.workers[m.worker_id or 0]
                assert model_of[name] == m.gpu_model == st.job.bound_gpu
                ran_by[m.gpu_model].add(name)
    # Several workers of one model share its jobs' candidates.
    assert ran_by == {INTERPRETER_GPU: {"a1", "a2"}, MODEL_B: {"b1", "b2"}}
    shared = [st for st in states
              if len({m.worker_id for ms in st.measured.values() for m in ms}) > 1]
    assert shared, "no job had its candidates measured by more than one worker"


def _registered(cl: Cluster) -> int:
    with cl.db.read_session() as s:
        return int(s.scalar(select(func.count()).select_from(WorkerRow)) or 0)


def test_background_planning_with_two_apis_and_their_planners(database_url: str,
                                                               tmp_path: Path) -> None:
    """``KS_PLANNING=background``: each ``serve`` starts a planner beside its API, so two
    planners share the marked jobs (``FOR UPDATE SKIP LOCKED``); the leases and reports plan
    nothing. Jobs still run to a decision, every trial told to its study once."""
    with Cluster(tmp_path, database_url, lease_seconds=30, KS_PLANNING="background") as cl:
        cl.migrate()
        api1, api2 = cl.api("api1"), cl.api("api2")
        workers = [cl.worker("a1", api1), cl.worker("a2", api2)]
        wait_until(lambda: _registered(cl) == 2, 180, "two workers registered", cl._dump)
        one, two = cl.client(api1), cl.client(api2)
        submitted = [one.submit_job(PROBLEM, budget={"max_trials": 4}, policy=FORCE),
                     two.submit_job(OTHER, budget={"max_trials": 4}, policy=FORCE)]
        finals = [cl.wait_job(api2 if i % 2 else api1, j["id"]) for i, j in enumerate(submitted)]
        states = [state(cl.db, j["id"]) for j in submitted]
        assert_studies_match(cl.db, states)
        logs = "".join(p.log() for p in cl.procs)
        alive = [w.name for w in workers if w.alive]
    assert [j["status"] for j in finals] == ["done"] * 2, finals
    assert all(j["decision"] is not None for j in finals)
    for st in states:
        assert_each_measured_once(st)
    assert alive == ["a1", "a2"]
    assert logs.count("planner started (pid") == 2, logs[-3000:]
