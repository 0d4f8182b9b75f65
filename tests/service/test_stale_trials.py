"""Trials a dead service process left running are settled from the database before the next
proposal: one asked but never stored as a candidate is closed (pruned), one whose result was
stored but never told is told it; one whose candidate is still out stays running. Real Optuna
studies (the rule reads the study itself), FAKE measurements.
"""

from __future__ import annotations

import time
from typing import Any

import optuna
import pytest
from fastapi.testclient import TestClient
from optuna.trial import TrialState

from db import candidates as cands
from db import measurements
from db.records import CandidateStatus
from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_tuner import study_name
from search.optimizer import storage_for
from search.types import Measurement, Status
from service.settings import ServiceSettings
from service.tuning import optuna_tuner


@pytest.fixture
def fake_tuners() -> Any:
    """The real Optuna tuners here (the stale-trial rule reads the study itself)."""
    return optuna_tuner


@pytest.fixture
def settings(database_url: str) -> ServiceSettings:
    return ServiceSettings(database_url=database_url, lease_seconds=0.5, window=4,
                           max_attempts=3, default_max_trials=8)


def test_trials_left_running_by_a_dead_process_are_settled(
        client: TestClient, driver: Any, app: Any, database_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("service.agent_loop.STALE_TRIAL_S", 0.0)  # the lease alone (0.5 s)
    job = driver.submit({"max_trials": 8})
    w = driver.register()
    grant = driver.lease(w)
    first, second, third = [c for c in grant["candidates"] if c["backend"] == "triton"][:3]
    problem = GemmProblem.from_dict(driver.PROBLEM)
    study = optuna.load_study(study_name=study_name(problem, driver.GPU, "tiles"),
                              storage=storage_for(database_url))
    # A process asked a trial and died before storing its candidate ...
    orphan = study.ask()
    # ... another stored a result and died before telling the study.
    with app.state.flow.db.session() as s:
        cand = cands.get_candidate(s, first["id"])
        assert cand is not None
        measurements.add_measurements(s, [measurements.Reported(
            cand, driver.GPU, Measurement(Status.OK, median_us=33.0, p20_us=33.0,
                                          p80_us=33.0, reps=5), w, app.state.flow.clock())])
        cands.finish_candidate(s, cand.id, CandidateStatus.DONE)
    time.sleep(0.6)  # older than a lease: a live process would have stored and told by now
    driver.report(w, grant["lease_id"], second["id"], driver.fake_ok(40.0))  # a top-up
    trials = {t.number: t for t in study.trials}
    assert trials[orphan.number].state == TrialState.PRUNED
    numbers = {c.id: c.trial_number for c in cands_of(app, job["id"])}
    told = trials[numbers[first["id"]]]
    assert told.state == TrialState.COMPLETE and told.value == 33.0
    # a candidate still out keeps its trial running
    assert trials[numbers[third["id"]]].state == TrialState.RUNNING


def cands_of(app: Any, job_id: int) -> list[Any]:
    with app.state.flow.db.read_session() as s:
        return cands.job_candidates(s, job_id)
