"""Named worker tokens (``KS_WORKER_TOKENS``): a worker keeps the token identity it registered
with, and with more than one identity a held result is confirmed only by a worker of another
identity, so one token holder cannot confirm its own fake result under a second worker name.
FAKE workers post the numbers; the calibration is the recorded H100 one."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from db import calibrations
from service.planner import Planner
from service.settings import ServiceSettings
from tests.service.conftest import Driver

H100 = json.loads((Path(__file__).parents[1] / "data" / "h100_calibration.json").read_text())
GEMM = {"kind": "gemm", "m": 2048, "n": 2048, "k": 2048, "dtype": "bf16"}
QUERY = {"m": 2048, "n": 2048, "k": 2048, "dtype": "bf16", "gpu": H100["gpu"]}
#: the worker's software matches the calibration's, so no new calibration is asked for
ENV = {"driver": H100["env"]["driver"], "cuda": H100["env"]["cuda"],
       "torch": H100["env"]["torch"]}
X, Y, SINGLE = "host-x-token-0123456789", "host-y-token-0123456789", "single-token-0123456789"
TWO = f"hostx:{X},hosty:{Y}"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


Clients = Callable[..., dict[str, Driver]]


@pytest.fixture
def fleet(make_app: Callable[..., FastAPI], database_url: str,
          secret_keeper: Callable[[TestClient], TestClient]) -> Clients:
    """An app with the given worker tokens (calibrated H100) and a driver per token (by the
    token): its worker calls carry that token; all share the kept worker secrets."""
    def make(planning: str = "inline", **tokens: Any) -> dict[str, Driver]:
        app = make_app(ServiceSettings(database_url=database_url, lease_seconds=60, window=4,
                                       max_attempts=3, default_max_trials=8,
                                       planning=planning, **tokens))
        with app.state.flow.db.session() as s:
            if calibrations.latest(s, H100["gpu"]) is None:
                calibrations.add_calibration(s, H100["gpu"], H100["bandwidth_gbs"],
                                             H100["peak_tflops"], H100["env"],
                                             datetime(2026, 1, 1, tzinfo=UTC))
        secrets = ([X, Y] if "worker_tokens" in tokens else []) + (
            [tokens["worker_token"]] if "worker_token" in tokens else [])
        return {t: Driver(secret_keeper(TestClient(app, headers=bearer(t)))) for t in secrets}
    return make


def lease(d: Driver, worker: int, n: int) -> dict[str, Any]:
    """A lease; under background planning the planner plans what was stored before, and
    what a lease that got nothing bound, as its own process would."""
    flow = d.http.app.state.flow  # type: ignore[attr-defined]
    if not flow.background:
        return d.lease(worker, n)
    Planner(flow).drain()
    grant = d.lease(worker, n)
    if not grant["candidates"]:
        Planner(flow).drain()
        grant = d.lease(worker, n)
    return grant


def start(liar: Driver) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """A job on the H100; the worker ``liar`` leases and reports 1.0 us for a Triton candidate
    (the roofline is 22 us, so it is held) and honest times for the rest."""
    job = liar.submit({"max_trials": 8}, problem=GEMM, gpu=H100["gpu"])
    worker = liar.register("liar", **ENV)
    grant = lease(liar, worker, 8)
    fake = next(c for c in grant["candidates"] if c["backend"] == "triton")
    for c in grant["candidates"]:
        us = 1.0 if c is fake else (30.0 if c["backend"] == "cublas" else 40.0 + c["id"])
        assert liar.report(worker, grant["lease_id"], c["id"],
                           liar.fake_ok(us))["accepted"] == [c["id"]]
    return job, worker, fake


@pytest.mark.parametrize("planning", ["inline", "background"])
def test_a_second_worker_of_the_same_token_cannot_confirm(fleet: Clients,
                                                          planning: str) -> None:
    drivers = fleet(planning, worker_tokens=TWO)
    x, y = drivers[X], drivers[Y]
    job, _, fake = start(x)
    held = x.job(job["id"])["held"]
    assert [h["candidate_id"] for h in held] == [fake["id"]]
    assert "re-measurement by a worker of another token identity" in held[0]["reason"]
    accomplice = x.register("accomplice", **ENV)  # the same token holder, another name
    assert fake["id"] not in [c["id"] for c in lease(x, accomplice, 64)["candidates"]]
    assert x.http.get("/v1/best", params=QUERY).json()["median_us"] == 30.0
    honest = y.register("honest", **ENV)
    grant = lease(y, honest, 64)
    assert fake["id"] in [c["id"] for c in grant["candidates"]]
    y.report(honest, grant["lease_id"], fake["id"], y.fake_ok(1.05))
    if planning == "background":
        Planner(y.http.app.state.flow).drain()  # type: ignore[attr-defined]
    assert y.job(job["id"])["held"] == []
    assert y.http.get("/v1/best", params=QUERY).json()["median_us"] == 1.0


def test_a_same_token_re_measurement_leased_earlier_is_refused_and_requeued(
        fleet: Clients) -> None:
    """A re-check leased while one token served every worker, reported after the service
    restarted with a token per host, confirms nothing: the candidate goes back for the other
    identity."""
    before = fleet(worker_token=SINGLE)[SINGLE]
    job, _, fake = start(before)
    accomplice = before.register("accomplice", **ENV)
    grant = before.lease(accomplice, 64)
    assert fake["id"] in [c["id"] for c in grant["candidates"]]
    after = fleet(worker_token=SINGLE, worker_tokens=TWO)  # the same database
    x, y = after[X], after[Y]
    got = after[SINGLE].report(accomplice, grant["lease_id"], fake["id"],
                               before.fake_ok(1.02))
    assert got["accepted"] == []
    reason = got["rejected"][0]["reason"]
    assert "token identity 'default'" in reason and "another identity" in reason
    assert [h["candidate_id"] for h in x.job(job["id"])["held"]] == [fake["id"]]
    honest = y.register("honest", **ENV)
    assert fake["id"] in [c["id"] for c in y.lease(honest, 64)["candidates"]]


def test_one_token_keeps_any_other_worker_as_confirmer(fleet: Clients) -> None:
    only = fleet(worker_token=SINGLE)[SINGLE]
    job, _, fake = start(only)
    other = only.register("other", **ENV)
    grant = only.lease(other, 64)
    assert fake["id"] in [c["id"] for c in grant["candidates"]]
    only.report(other, grant["lease_id"], fake["id"], only.fake_ok(1.05))
    assert only.job(job["id"])["held"] == []


def test_a_worker_calls_only_with_the_token_it_registered_with(fleet: Clients) -> None:
    drivers = fleet(worker_tokens=TWO)
    x, y = drivers[X], drivers[Y]
    x.submit(problem=GEMM, gpu=H100["gpu"])
    worker = x.register("box-x", **ENV)
    y.register("box-y", **ENV)  # both tokens register
    calls = [("lease", {"max_candidates": 1}), ("leases/abc/renew", None),
             ("report", {"lease_id": "abc", "results": []})]
    for path, body in calls:
        r = y.http.post(f"/v1/workers/{worker}/{path}", json=body)
        assert r.status_code == 403, (path, r.text)
        assert "registered with the worker token 'hostx'" in r.json()["detail"]
    r = y.http.post("/v1/workers/register",
                    json={"name": "box-x", "device": Driver.device(**ENV)})
    assert r.status_code == 403 and "worker token 'hostx', not 'hosty'" in r.json()["detail"]
    assert x.lease(worker, 1)["candidates"]
    r = x.http.post("/v1/workers/register", json={"name": "w", "device": Driver.device()},
                    headers=bearer("not-a-worker-token-0123"))
    assert r.status_code == 401 and "KS_WORKER_TOKENS" in r.json()["detail"]


@pytest.mark.parametrize(("value", "rule"), [
    ("hostx", "entry 1: expected name:token"),
    (f":{X}", "entry 1: the name must be"),
    ("hostx:", "entry 1 (hostx): the token must be at least 16"),
    (f"hostx:{X}:admin", "entry 1: expected name:token"),
    (f"hostx:{X},hostx:{Y}", "entry 2: the name 'hostx' is listed twice"),
    (f"hostx:{X},hosty:{X}", "'hostx' and 'hosty' have the same token"),
    (f"default:{X}", "the name 'default' is KS_WORKER_TOKEN's"),
    (f"hostx:{SINGLE}", "an entry has KS_WORKER_TOKEN's token")])
def test_bad_worker_tokens_are_refused_at_start_naming_the_setting(
        monkeypatch: pytest.MonkeyPatch, value: str, rule: str) -> None:
    monkeypatch.setenv("KS_WORKER_TOKEN", SINGLE)
    monkeypatch.setenv("KS_WORKER_TOKENS", value)
    with pytest.raises(ValidationError) as err:
        ServiceSettings()
    assert "KS_WORKER_TOKENS" in str(err.value) and rule in str(err.value)
    assert X not in str(err.value) and SINGLE not in str(err.value)


def test_worker_tokens_are_kept_as_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KS_WORKER_TOKENS", TWO)
    settings = ServiceSettings()
    assert [t.name for t in settings.worker_identities] == ["hostx", "hosty"]
    assert X not in repr(settings) and X not in str(settings.model_dump())


@pytest.mark.parametrize(("tokens", "warned"), [
    ({}, True), ({"worker_token": SINGLE}, True), ({"worker_tokens": TWO}, False),
    ({"worker_token": SINGLE, "worker_tokens": f"hostx:{X}"}, False)])
def test_start_up_says_when_one_token_holder_can_confirm_its_own(
        make_app: Any, database_url: str, caplog: pytest.LogCaptureFixture,
        tokens: dict[str, str], warned: bool) -> None:
    with caplog.at_level(logging.INFO, logger="kernelsearch.auth"):
        make_app(ServiceSettings(database_url=database_url, **tokens))
    assert ("collusion protection needs a token per host (KS_WORKER_TOKENS)"
            in caplog.text) is warned
    assert ("confirmed only by a worker of another identity" in caplog.text) is not warned
