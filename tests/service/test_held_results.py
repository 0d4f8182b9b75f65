"""A worker alone cannot make a fake result the served one: reports outside its lease are
refused, and a result faster than the roofline allows is held until another worker confirms
it. FAKE workers post the numbers; the calibration is the recorded H100 one."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from db import calibrations
from db import candidates as cands
from search import decision
from service.planner import Planner
from service.settings import ServiceSettings

pytestmark = pytest.mark.uncalibrated

H100 = json.loads((Path(__file__).parents[1] / "data" / "h100_calibration.json").read_text())
GEMM = {"kind": "gemm", "m": 2048, "n": 2048, "k": 2048, "dtype": "bf16"}
QUERY = {"m": 2048, "n": 2048, "k": 2048, "dtype": "bf16", "gpu": H100["gpu"]}
#: the worker's software matches the calibration's, so no new calibration is asked for
ENV = {"driver": H100["env"]["driver"], "cuda": H100["env"]["cuda"],
       "torch": H100["env"]["torch"]}


@pytest.fixture
def settings(database_url: str, request: pytest.FixtureRequest) -> ServiceSettings:
    """Inline planning, unless a test asks for ``background`` (``indirect`` parametrization)."""
    return ServiceSettings(database_url=database_url, lease_seconds=60, window=4,
                           max_attempts=3, default_max_trials=8,
                           planning=getattr(request, "param", "inline"))


@pytest.fixture
def h100(app: Any) -> None:
    with app.state.flow.db.session() as s:
        calibrations.add_calibration(s, H100["gpu"], H100["bandwidth_gbs"],
                                     H100["peak_tflops"], H100["env"],
                                     datetime(2026, 1, 1, tzinfo=UTC))


def start(driver: Any) -> tuple[dict[str, Any], int, int, dict[str, Any]]:
    """A job on the H100, two workers; the first leases and reports 1.0 us for a Triton
    candidate (the roofline is 22 us) and honest times for the rest."""
    job = driver.submit({"max_trials": 4}, problem=GEMM, gpu=H100["gpu"])
    liar, honest = driver.register("liar", **ENV), driver.register("honest", **ENV)
    grant = driver.lease(liar, 8)
    fake = next(c for c in grant["candidates"] if c["backend"] == "triton")
    for c in grant["candidates"]:
        us = 1.0 if c is fake else (30.0 if c["backend"] == "cublas" else 40.0 + c["id"])
        got = driver.report(liar, grant["lease_id"], c["id"], driver.fake_ok(us))
        assert got["accepted"] == [c["id"]]  # stored, but held
    return job, liar, honest, fake


def test_an_implausible_result_is_held_and_never_served(h100: None, driver: Any,
                                                        client: Any) -> None:
    job, liar, honest, fake = start(driver)
    view = driver.job(job["id"])
    assert [h["candidate_id"] for h in view["held"]] == [fake["id"]]
    reason = view["held"][0]["reason"]
    assert "under 0.5 x the roofline's 22 us" in reason and "re-measurement" in reason
    best = client.get("/v1/best", params=QUERY).json()
    assert best["median_us"] == 30.0 and best["backend"] == "cublas"
    assert view["best"]["median_us"] != 1.0
    # the liar never gets its own held candidate back; another worker does
    again = [c["id"] for c in driver.lease(liar, 64)["candidates"]]
    assert fake["id"] not in again
    assert fake["id"] in [c["id"] for c in driver.lease(honest, 64)["candidates"]]


def test_a_held_result_stays_refused_when_another_worker_disagrees(h100: None, driver: Any,
                                                                   client: Any) -> None:
    job, liar, honest, fake = start(driver)
    grant = driver.lease(honest, 64)
    assert fake["id"] in [c["id"] for c in grant["candidates"]]
    driver.report(honest, grant["lease_id"], fake["id"], driver.fake_ok(41.0))
    held = driver.job(job["id"])["held"]
    assert [h["candidate_id"] for h in held] == [fake["id"]]
    assert held[0]["reason"].startswith(f"refused: worker {honest} re-measured 41 us")
    assert held[0]["median_us"] == 1.0  # the liar's number, kept as evidence, not served
    assert client.get("/v1/best", params=QUERY).json()["median_us"] == 30.0


def test_a_held_result_is_released_when_another_worker_confirms(h100: None, driver: Any,
                                                                client: Any) -> None:
    job, liar, honest, fake = start(driver)
    # asked while held (the answer is kept per process under the problem's generation) ...
    assert client.get("/v1/best", params=QUERY).json()["median_us"] == 30.0
    grant = driver.lease(honest, 64)
    driver.report(honest, grant["lease_id"], fake["id"], driver.fake_ok(1.05))
    assert driver.job(job["id"])["held"] == []
    # ... and asked again once released: the release changed the generation, no stale answer
    assert client.get("/v1/best", params=QUERY).json()["median_us"] == 1.0
    trials = client.get(f"/v1/problems/{job['problem_id']}/trials",
                        params={"limit": 500}).json()["items"]
    confirmed = [t for t in trials if t["candidate_id"] == fake["id"]]
    assert len(confirmed) == 1 and confirmed[0]["status"] == "ok"  # one measurement, now ok
    assert confirmed[0]["median_us"] == 1.0
    assert confirmed[0]["extra"]["recheck"] == {"worker_id": honest, "median_us": 1.05,
                                                "status": "ok"}


def test_reports_outside_the_workers_lease_are_refused(h100: None, driver: Any) -> None:
    driver.submit({"max_trials": 4}, problem=GEMM, gpu=H100["gpu"])
    a, b = driver.register("a", **ENV), driver.register("b", **ENV)
    grant = driver.lease(a, 2)
    cid = grant["candidates"][0]["id"]
    other = driver.report(b, grant["lease_id"], cid, driver.fake_ok(50.0))
    assert other["accepted"] == [] and "not leased to worker" in other["rejected"][0]["reason"]
    wrong = driver.report(a, "00000000-0000-0000-0000-000000000000", cid, driver.fake_ok(5.0))
    assert wrong["accepted"] == [] and "not leased" in wrong["rejected"][0]["reason"]
    assert driver.report(a, grant["lease_id"], cid, driver.fake_ok(50.0))["accepted"] == [cid]


def test_a_worker_cannot_report_held_itself(driver: Any) -> None:
    w = driver.register("w")
    r = driver.http.post(f"/v1/workers/{w}/report", json={"lease_id": "x", "results": [
        {"candidate_id": 1, "measurement": {"status": "held", "median_us": 1.0}}]})
    assert r.status_code == 422 and "status held is the service's own" in r.text


def test_a_job_with_a_refused_result_runs_to_a_decision_without_it(h100: None, driver: Any,
                                                                   client: Any) -> None:
    job, liar, honest, fake = start(driver)
    driver.run_all(honest)  # the honest worker re-measures the held candidate (41 us, say)
    final = driver.job(job["id"])
    assert final["status"] == "done" and final["decision"] is not None
    assert final["best"]["median_us"] > 1.0 and final["decision"]["median_us"] > 1.0
    assert [h["candidate_id"] for h in final["held"]] == [fake["id"]]
    assert final["held"][0]["reason"].startswith("refused")
    assert client.get("/v1/best", params=QUERY).json()["median_us"] > 1.0


def test_an_interpreter_calibration_holds_nothing(app: Any, driver: Any) -> None:
    """The interpreter's calibration times a small GEMM on the CPU: kernels beat it freely, so
    it is no ceiling to hold results against, whatever the model is called."""
    model = "cpu-interpreter-b"
    env = {"mode": "interpreter", "driver": "", "cuda": "", "torch": "fake"}
    with app.state.flow.db.session() as s:
        calibrations.add_calibration(s, model, 5.0, {"bf16": 0.05}, env,
                                     datetime(2026, 1, 1, tzinfo=UTC))
    job = driver.submit({"max_trials": 2}, problem=GEMM, gpu=model)
    w = driver.register("cpu", gpu=model, mode="interpreter", **{k: env[k] for k in ENV})
    grant = driver.lease(w, 8)
    assert grant["candidates"] and all(c["backend"] for c in grant["candidates"])
    for c in grant["candidates"]:
        driver.report(w, grant["lease_id"], c["id"], driver.fake_ok(1.0))
    assert driver.job(job["id"])["held"] == []


def plan(app: Any) -> None:
    """Under background planning, what the planner would do now (inline: nothing to do)."""
    if app.state.flow.background:
        Planner(app.state.flow).drain()


def run(app: Any, driver: Any, worker: int, median_of: Any) -> list[int]:
    """Lease and report until the worker is offered nothing (the planner planning between
    calls under background planning); returns the candidates it ran."""
    ran: list[int] = []
    for _ in range(50):
        plan(app)
        grant = driver.lease(worker, 8)
        if not grant["candidates"]:
            plan(app)
            grant = driver.lease(worker, 8)
        if not grant["candidates"]:
            return ran
        for c in grant["candidates"]:
            driver.report(worker, grant["lease_id"], c["id"], driver.answer(c, median_of))
            ran.append(c["id"])
    raise AssertionError("the worker was still offered candidates after 50 leases")


def held_job(app: Any, driver: Any, budget: dict[str, Any]) -> tuple[int, int, int, int]:
    """A job whose one worker reports 1.0 us for its first Triton candidate (held: the
    roofline is 22 us) and honest times for the rest, until it is offered nothing more;
    returns the job, the liar, another worker, and the held candidate."""
    job = driver.submit(budget, problem=GEMM, gpu=H100["gpu"])
    liar, honest = driver.register("liar", **ENV), driver.register("honest", **ENV)
    fake: list[int] = []

    def liar_times(c: dict[str, Any]) -> float:
        if c["backend"] == "triton" and not fake:
            fake.append(c["id"])
        return 1.0 if c["id"] in fake else (30.0 if c["backend"] == "cublas"
                                            else 40.0 + c["id"])

    ran = run(app, driver, liar, liar_times)
    assert fake and fake[0] in ran
    return job["id"], liar, honest, fake[0]


@pytest.mark.parametrize("settings", ["inline", "background"], indirect=True)
def test_a_job_does_not_finish_while_its_held_result_awaits_re_measurement(
        h100: None, app: Any, driver: Any, client: Any) -> None:
    job, liar, honest, fake = held_job(app, driver, {"max_trials": 4})
    view = driver.job(job)
    # its budget is spent, but the held kernel is the fastest: the job waits for a check
    assert view["status"] == "running" and view["stage"] == "recheck"
    assert [h["candidate_id"] for h in view["held"]] == [fake]
    assert f"re-measure held candidate {fake}" in view["waiting"]
    assert "KS_HELD_WAIT_SECONDS" in view["waiting"]
    ran = run(app, driver, honest, lambda c: 1.05 if c["id"] == fake else 35.0)
    assert fake in ran
    plan(app)
    final = driver.job(job)
    assert final["status"] == "done" and final["held"] == [] and final["waiting"] is None
    # confirmed, the held kernel is decided on (its verification rounds give the time)
    assert final["decision"]["chosen"] == "custom" and final["decision"]["median_us"] < 2.0
    assert client.get("/v1/best", params=QUERY).json()["median_us"] < 2.0


@pytest.mark.parametrize("ends", ["wait", "time budget"])
@pytest.mark.parametrize("settings", ["inline", "background"], indirect=True)
def test_a_held_result_no_worker_re_measures_ends_the_job_unconfirmed(
        h100: None, app: Any, driver: Any, client: Any, clock: Any, ends: str) -> None:
    """With no other worker to re-measure it, the job waits ``KS_HELD_WAIT_SECONDS`` after the
    result was held (its time budget, if sooner), then decides without it and says so."""
    budget = {"max_trials": 4} | ({"max_seconds": 120} if ends == "time budget" else {})
    job, liar, honest, fake = held_job(app, driver, budget)
    left = 120 if ends == "time budget" else app.state.flow.settings.held_wait_seconds
    assert left < 1000  # the wait is bounded by the setting, not the job's default budget

    def planned_view() -> dict[str, Any]:
        if app.state.flow.background:  # no request: the planner's own sweep ends the wait
            Planner(app.state.flow).step()
            plan(app)
        return driver.job(job)

    clock.advance(left - 1)
    waiting = planned_view()
    assert waiting["status"] == "running" and waiting["stage"] == "recheck"
    clock.advance(1)
    final = planned_view()
    assert final["status"] == "done" and final["waiting"] is None
    assert final["decision"]["median_us"] > 2.0 and final["best"]["median_us"] > 2.0
    assert [h["candidate_id"] for h in final["held"]] == [fake]
    reason = final["held"][0]["reason"]
    assert reason.startswith("held: 1 us is under 0.5 x the roofline's 22 us")
    assert ("unconfirmed: the job's time budget ran out first" if ends == "time budget" else
            "unconfirmed: no other worker re-measured it within 600 s (KS_HELD_WAIT_SECONDS)"
            ) in reason
    assert reason.endswith("so the job ended without it")
    assert client.get("/v1/best", params=QUERY).json()["median_us"] > 2.0
    assert fake not in [c["id"] for c in driver.lease(honest, 64)["candidates"]]


def test_a_stopped_search_keeps_its_held_candidate_queued(h100: None, app: Any,
                                                          driver: Any) -> None:
    """A search stopped with trials still queued (the CUTLASS search at verdict 1, say)
    cancels them, but not a candidate queued for the re-measurement of its held result."""
    job, liar, honest, fake = held_job(app, driver, {"max_trials": 4})
    flow = app.state.flow
    with flow.db.read_session() as s:
        tier = cands.get_candidate(s, fake).tier
    stop = decision.Plan(decision.Stage.CUSTOM, (decision.StopTier(tier, "stopped"),))
    flow.agent._act(flow.job(job), None, stop, {}, flow.clock())
    assert fake in [c["id"] for c in driver.lease(honest, 64)["candidates"]]


@pytest.mark.parametrize("settings", ["inline", "background"], indirect=True)
def test_a_cancelled_job_says_its_held_result_was_never_confirmed(
        h100: None, app: Any, driver: Any, client: Any) -> None:
    job, liar, honest, fake = held_job(app, driver, {"max_trials": 4})
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 200
    view = driver.job(job)
    assert view["status"] == "cancelled"
    assert [h["candidate_id"] for h in view["held"]] == [fake]
    reason = view["held"][0]["reason"]
    assert reason.startswith("held: 1 us is under 0.5 x the roofline's 22 us")
    assert reason.endswith("unconfirmed: the job was cancelled first, so the job ended "
                           "without it")
    assert client.get("/v1/best", params=QUERY).json()["median_us"] > 2.0
    assert fake not in [c["id"] for c in driver.lease(honest, 64)["candidates"]]
