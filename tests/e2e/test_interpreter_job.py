"""A whole job through the real service, real HTTP and a real worker on the Triton interpreter.

Nothing is faked: the service runs under uvicorn on a loopback port, the worker leases over
HTTP, runs each candidate in its spawned child (TRITON_INTERPRET=1) and reports; the job's best
configuration must then be served by GET /v1/best. Runs against SQLite and Postgres.
"""

from __future__ import annotations

import pytest

from search.types import INTERPRETER_GPU
from service.local import run_tuning
from service.settings import ServiceSettings

pytestmark = pytest.mark.slow


def test_interpreter_job_end_to_end(database_url: str) -> None:
    problem = {"kind": "gemm", "m": 64, "n": 48, "k": 80, "dtype": "fp16"}
    settings = ServiceSettings(database_url=database_url, lease_seconds=60)
    seen: list[dict] = []
    # Forced custom stage: on a CPU the library's verdict depends on the machine's load, and
    # this test is about the whole path (calibration, library, search, decision) running.
    force = {"force_custom": True}
    result = run_tuning(problem, {"max_trials": 3}, database_url=database_url, interpret=True,
                        batch=2, settings=settings, on_progress=seen.append, poll_s=0.2,
                        policy=force)
    job = result.job
    assert job["status"] == "done", job
    assert job["progress"]["trials_done"] == 3
    decision = job["decision"]
    assert decision["verdict"] in ("custom_wins", "library_wins_after_search")
    assert decision["spend"]["calibration"]["gpu_s"] > 0  # a real (CPU) calibration ran
    assert decision["spend"]["custom"]["trials"] == 3
    # the CPU's calibration checks the path but measures no ceilings: no roofline, said so
    assert decision["attainable_us"] is None and decision["roofline"] is None
    assert "no roofline (cpu-interpreter is the CPU" in decision["rationale"]
    assert "torch CPU matmul takes" in decision["rationale"]
    assert result.gpu_model == INTERPRETER_GPU == job["gpu"]
    assert job["library_best"]["backend"] == "cublas"
    assert job["custom_best"]["backend"] == "triton"
    # the job's best is the decision's pick (on the CPU a tie in the verification may keep
    # cuBLAS although Triton was faster in the search)
    picked = job["custom_best"] if decision["chosen"] == "custom" else job["library_best"]
    assert job["best"]["candidate_id"] == picked["candidate_id"]
    assert seen and seen[-1]["status"] == "done"
    best = result.best
    assert best is not None and best["gpu"] == INTERPRETER_GPU
    assert best["backend"] == job["best"]["backend"]
    assert best["median_us"] == pytest.approx(job["best"]["median_us"])

    # A second job for the same shape reuses the problem row and never re-measures a config.
    again = run_tuning(problem, {"max_trials": 2}, database_url=database_url, interpret=True,
                       batch=2, settings=settings, poll_s=0.2, policy=force)
    assert again.job["status"] == "done"
    assert again.job["problem_id"] == job["problem_id"]
    cfgs = [c for c in (job["custom_best"]["config"], again.job["custom_best"]["config"])]
    assert all(set(c) >= {"BLOCK_M", "SPLIT_K"} for c in cfgs)
