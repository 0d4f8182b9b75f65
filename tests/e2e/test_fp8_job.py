"""An fp8 e4m3 job through the real service, HTTP and worker: calibration (with the fp8 peak
where ``torch._scaled_mm`` runs), the library candidates with their scales, the fp8 tier's
Triton fp8 template, and the decision with its precision. On the CPU the library is
``torch._scaled_mm``'s CPU kernel (torch 2.13 has one) and the template runs in the
interpreter; on an H100 it is cuBLASLt, the CUTLASS fp8 kernels and the compiled template."""

from __future__ import annotations

import pytest
import torch

from search.types import INTERPRETER_GPU
from service.local import run_tuning
from service.settings import ServiceSettings

pytestmark = pytest.mark.slow

PROBLEM = {"kind": "gemm", "m": 64, "n": 48, "k": 96, "dtype": "fp8_e4m3", "layout_b": "col"}
#: Forced custom stage: the library's first verdict depends on the machine's load; forced, the
#: fp8 tier always runs.
FORCE = {"force_custom": True}


def _scaled_mm_runs_on_cpu() -> bool:
    one = torch.ones(())
    z = torch.zeros(16, 16).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(z, z.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        return False
    return True


def _check_decision(job: dict, backends: set[str]) -> dict:
    assert job["status"] == "done", job
    d = job["decision"]
    assert d["precision"] == "fp8_e4m3", d  # the input precision: nothing lowered
    fp8 = next(t for t in d["tiers"] if t["tier"] == "fp8")
    assert fp8["trials"] > 0 and fp8["best_us"] is not None, fp8  # the template ran right
    assert job["custom_best"]["backend"] == "triton"
    assert job["custom_best"]["rel_error"] <= 1e-2
    ran = {t["backend"] for t in d["library_trials"]}
    assert ran == backends, d["library_trials"]
    assert all(t["status"] == "ok" for t in d["library_trials"]), d["library_trials"]
    return d


def test_fp8_job_on_the_cpu_worker(database_url: str) -> None:
    if not _scaled_mm_runs_on_cpu():
        pytest.skip("this torch has no CPU torch._scaled_mm: tests/service/test_fp8.py covers "
                    "the service with FAKE measurements")
    settings = ServiceSettings(database_url=database_url, lease_seconds=60)
    result = run_tuning(PROBLEM, {"max_trials": 4}, database_url=database_url, interpret=True,
                        batch=2, settings=settings, poll_s=0.2, backends=["cublas", "triton"],
                        policy=FORCE)
    d = _check_decision(result.job, {"cublas"})
    assert result.gpu_model == INTERPRETER_GPU
    assert d["spend"]["calibration"]["gpu_s"] > 0  # the CPU calibration ran ...
    assert d["attainable_us"] is None  # ... and is no roofline (it measures no ceilings)
    assert "torch CPU matmul takes" in d["rationale"]
    # Which wins on a CPU is a timing, not a property: torch's CPU fp8 matmul (tens of ms under
    # load) can fall behind the interpreter's template. The served kernel is the decision's.
    assert d["chosen"] in ("library", "custom")
    best = result.best
    assert best is not None
    assert best["backend"] == ("cublas" if d["chosen"] == "library" else "triton")
    assert best["problem_key"] == "gemm:b1:m64:n48:k96:fp8_e4m3:bf16:fp32:rc"


@pytest.mark.gpu
def test_fp8_job_on_the_gpu_worker(database_url: str) -> None:
    problem = {**PROBLEM, "m": 1000, "n": 3008, "k": 2048}
    settings = ServiceSettings(database_url=database_url, lease_seconds=600,
                               cutlass_candidates=2)
    result = run_tuning(problem, {"max_trials": 4}, database_url=database_url, interpret=False,
                        batch=4, settings=settings, poll_s=0.5,
                        backends=["cublas", "cutlass", "triton"], candidate_timeout_s=600,
                        policy={**FORCE, "cutlass_trials": 0})  # the seeds only: fewer nvcc
    offered = {"cublas", "cutlass"} if torch.cuda.get_device_capability()[0] == 9 else {"cublas"}
    d = _check_decision(result.job, offered)
    assert d["attainable_us"] > 0 and d["efficiency_library"] > 0.05  # the fp8 peak is there
