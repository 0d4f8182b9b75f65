"""A bf16 job whose policy allows fp8 e4m3, through the real service, HTTP and an interpreter
worker: the fp8 tier quantises, multiplies and dequantises inside each timed call, the worker
measures each candidate's error against the float64 product of the bf16 inputs, and the
service judges it against the job's bound. e4m3 on the stated inputs (normal entries) errs by
about 0.037 (``docs/benchmarks/fp8_error_cpu_2026-11-24.md``): under a 0.03 bound every lowered
candidate is a wrong_result with its error, under 0.05 they are correct. Nothing here is FAKE;
the CPU's timings say nothing about a GPU's."""

from __future__ import annotations

import pytest

from search.types import INTERPRETER_GPU
from service.client import KernelSearchClient
from service.embedded import EmbeddedServer
from service.local import run_tuning
from service.settings import ServiceSettings

pytestmark = pytest.mark.slow

PROBLEM = {"kind": "gemm", "m": 64, "n": 48, "k": 80, "dtype": "bf16"}


def _trials(database_url: str, problem_id: int) -> list[dict]:
    with EmbeddedServer(ServiceSettings(database_url=database_url)) as server:
        return KernelSearchClient(server.url).trials(problem_id, limit=200)["items"]


@pytest.mark.parametrize(("bound", "status"), [(0.03, "wrong_result"), (0.05, "ok")])
def test_a_bf16_job_lowered_to_fp8_on_the_cpu_worker(database_url: str, bound: float,
                                                     status: str) -> None:
    policy = {"force_custom": True, "allow": {"fp8_e4m3": {"max_rel_error": bound}}}
    settings = ServiceSettings(database_url=database_url, lease_seconds=60)
    result = run_tuning(PROBLEM, {"max_trials": 4}, database_url=database_url, interpret=True,
                        batch=2, settings=settings, poll_s=0.2, backends=["cublas", "triton"],
                        policy=policy)
    job = result.job
    assert job["status"] == "done" and result.gpu_model == INTERPRETER_GPU, job
    d = job["decision"]
    fp8 = next(t for t in d["tiers"] if t["tier"] == "fp8")
    assert fp8["trials"] >= 1, d["tiers"]
    lowered = [t for t in _trials(database_url, job["problem_id"])
               if t["precision"] == "fp8_e4m3"]
    assert len(lowered) == fp8["trials"]
    for t in lowered:
        assert t["config"]["PRECISION"] == "fp8_e4m3" and t["config"]["SCALES"] in ("row",
                                                                                   "tensor")
        assert t["status"] == status, t
        assert 0.02 < t["rel_error"] < 0.06  # e4m3's rounding of both operands
        assert t["median_us"] is not None  # timed either way: nothing measured is lost
    # the interpreter's fp8 path is slower than the CPU's bf16 matmul: bf16 is served
    assert d["precision"] == "bf16" and result.best["precision"] == "bf16"
