"""A lease reads the queue a page at a time (``Flow._eligible``) and still reaches a job that
waits behind more than a page of jobs this worker cannot serve."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service import flow
from tests.service.conftest import Driver


def test_a_lease_reaches_a_job_behind_a_page_of_jobs_it_cannot_serve(
        client: TestClient, driver: Driver) -> None:
    for _ in range(flow._PAGE + 3):  # CUTLASS only: this worker offers cuBLAS and Triton
        driver.submit({"max_trials": 2}, backends=["cutlass"])
    servable = driver.submit({"max_trials": 2})
    worker = driver.register()
    grant = driver.lease(worker)
    assert grant["candidates"], "the lease stopped at the first page"
    assert driver.job(servable["id"])["status"] == "running"
