"""``optuna-dashboard <database url>`` opens the service's Optuna studies: the studies live in
the service's own database (SQLite or Postgres), next to its tables. A job runs with the real
Optuna tuners and FAKE measurements; then the ``optuna-dashboard`` command serves that
database and its API lists the job's study with its trials."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.settings import ServiceSettings
from service.tuning import optuna_tuner
from tests.service.conftest import Driver

pytestmark = pytest.mark.slow
COMMAND = shutil.which("optuna-dashboard")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(COMMAND is None, reason="optuna-dashboard is not installed "
                                            "(pip install -e \".[ui]\")")
def test_optuna_dashboard_lists_the_services_studies(
        database_url: str, make_app: Callable[..., FastAPI], settings: ServiceSettings,
        secret_keeper: Any) -> None:
    http = secret_keeper(TestClient(make_app(settings, tuner_factory=optuna_tuner)))
    driver = Driver(http)
    job = driver.submit(budget={"max_trials": 4})
    driver.run_all(driver.register())
    done = driver.job(job["id"])
    assert done["status"] == "done" and done["progress"]["trials_done"] == 4
    key = done["problem_key"]

    port = _free_port()
    proc = subprocess.Popen([str(COMMAND), database_url, "--host", "127.0.0.1", "--port",
                             str(port), "--quiet"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        listed = _get(f"{base}/api/studies", proc)["study_summaries"]
        # one study per custom tier the job searched (triton-gemm|<tier>|<problem>|<gpu>)
        ours = [s for s in listed if s["study_name"].startswith("triton-gemm|")
                and s["study_name"].endswith(f"|{key}|{driver.GPU}")]
        assert ours, [s["study_name"] for s in listed]
        complete = [t for s in ours
                    for t in _get(f"{base}/api/studies/{s['study_id']}?after=0", proc)["trials"]
                    if t["state"] == "Complete"]
        assert len(complete) == 4  # the job's four custom trials, told to Optuna
        assert {p["name"] for p in complete[0]["params"]} >= {"BLOCK_M", "BLOCK_N"}
        assert httpx.get(f"{base}/dashboard/", timeout=10).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _get(url: str, proc: subprocess.Popen[bytes]) -> Any:
    deadline = time.monotonic() + 60
    while True:
        try:
            r = httpx.get(url, timeout=10)
            r.raise_for_status()
            return r.json()
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""
                raise AssertionError(f"optuna-dashboard did not answer {url}: {out}") from None
            time.sleep(0.3)
