"""What keeps a job's trials right when processes die or race (the process tests in
``tests/faults`` show it end to end; these pin each rule on its own, with FAKE measurements):

- a report whose telling failed for a database outage is answered 503, and its repeat, refused
  as a duplicate, tells the tuner then;
- a report from a worker whose GPU model is not its job's is refused;
- a top-up re-counts under the job's lock what another API process added meanwhile, and gives
  back what no longer fits.

``test_stale_trials.py``: trials a dead process left running.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.exc import OperationalError

from db import candidates as cands
from db.models import WorkerRow
from search.types import Measurement
from service.settings import ServiceSettings


def _triton(grant: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in grant["candidates"] if c["backend"] == "triton"]


def test_a_report_whose_telling_failed_is_told_on_its_repeat(
        client: TestClient, driver: Any, fake_tuners: Any) -> None:
    driver.submit({"max_trials": 4})
    w = driver.register()
    grant = driver.lease(w)
    trial = _triton(grant)[0]
    tuner = next(iter(fake_tuners.built.values()))
    record = tuner.record

    def cut_off(number: int, m: Measurement) -> None:
        tuner.record = record  # the database is back for the repeat
        raise OperationalError("UPDATE trials ...", {}, Exception("server closed the connection"))

    tuner.record = cut_off
    body = {"lease_id": grant["lease_id"],
            "results": [{"candidate_id": trial["id"], "measurement": driver.fake_ok(42.0)}]}
    first = client.post(f"/v1/workers/{w}/report", json=body)
    assert first.status_code == 503 and first.headers["retry-after"] == "5"
    assert "database is unavailable" in first.json()["detail"]
    assert tuner.recorded == {}  # stored, not told
    again = client.post(f"/v1/workers/{w}/report", json=body).json()
    assert again["accepted"] == [] and "already reported" in again["rejected"][0]["reason"]
    assert [m.median_us for m in tuner.recorded.values()] == [42.0]  # told from the stored one
    trials = client.get("/v1/problems/1/trials").json()
    assert trials["total"] == 1  # and stored once


def test_a_report_from_another_gpu_model_is_refused(client: TestClient, driver: Any,
                                                    app: Any) -> None:
    driver.submit({"max_trials": 2})
    w = driver.register()
    grant = driver.lease(w)
    with app.state.flow.db.session() as s:  # the worker's model changed since it leased
        s.execute(update(WorkerRow).where(WorkerRow.id == w).values(gpu_model="NVIDIA A100"))
    c = _triton(grant)[0]
    answer = driver.report(w, grant["lease_id"], c["id"], driver.fake_ok(5.0))
    assert answer["accepted"] == []
    assert "belongs to a job on 'NVIDIA H100 80GB HBM3'" in answer["rejected"][0]["reason"]
    assert client.get("/v1/problems/1/trials").json()["total"] == 0


def test_a_top_up_gives_back_what_another_process_filled(client: TestClient, driver: Any,
                                                         app: Any, fake_tuners: Any,
                                                         settings: ServiceSettings) -> None:
    job = driver.submit({"max_trials": 8})
    w = driver.register()
    grant = driver.lease(w)
    assert len(grant["candidates"]) == settings.window  # the window is full
    tuner = next(iter(fake_tuners.built.values()))
    propose = tuner.propose
    raced: list[int] = []

    def racing(n: int, known: Any, budget: Any = None) -> list[Any]:
        # While this process asks, another API process tops the job up to its window.
        with app.state.flow.db.session() as s:
            cands.add_candidates(s, job["id"], job["problem_id"], "triton",
                                 [({"other": "process", "i": i}, 1000 + i) for i in range(n)],
                                 app.state.flow.clock(), "tiles")
        got = propose(n, known, budget)
        raced.extend(p.trial_number for p in got)
        return got

    tuner.propose = racing
    c = _triton(grant)[0]
    driver.report(w, grant["lease_id"], c["id"], driver.fake_ok(5.0))
    assert raced, "the report did not top the job up"
    state = driver.job(job["id"])
    assert state["progress"]["outstanding"] == settings.window  # not window + what was raced
    assert tuner.abandoned == raced  # given back to the study, never stored
