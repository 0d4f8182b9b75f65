"""An attention job through the real service, real HTTP and a real worker on the CPU: the
library side is PyTorch's math SDPA backend (the only one a CPU worker offers), the custom side
the Triton flash-attention template in the interpreter. Nothing is faked."""

from __future__ import annotations

import pytest

from search.types import INTERPRETER_GPU
from service.local import run_tuning
from service.settings import ServiceSettings

pytestmark = pytest.mark.slow

PROBLEM = {"kind": "attention", "batch": 1, "heads": 2, "kv_heads": 1, "s_q": 32, "s_kv": 48,
           "d": 16, "causal": True, "dtype": "fp16"}


def test_attention_job_end_to_end(database_url: str) -> None:
    settings = ServiceSettings(database_url=database_url, lease_seconds=60)
    # Forced custom stage: on a CPU the library's verdict depends on the machine's load, and
    # this test is about the whole path running for the second kind.
    result = run_tuning(PROBLEM, {"max_trials": 2}, database_url=database_url, interpret=True,
                        batch=2, settings=settings, poll_s=0.2, policy={"force_custom": True})
    job = result.job
    assert job["status"] == "done", job
    assert job["problem_key"].startswith("attention:b1:h2:kv1:q32:k48:d16:causal:fp16:")
    assert result.gpu_model == INTERPRETER_GPU == job["gpu"]
    assert job["library_best"]["backend"] == "sdpa_math"
    assert job["custom_best"]["backend"] == "triton"
    assert set(job["custom_best"]["config"]) >= {"BLOCK_M", "BLOCK_N", "num_warps",
                                                 "num_stages"}
    decision = job["decision"]
    assert decision["verdict"] in ("custom_wins", "library_wins_after_search")
    assert decision["baseline"] == "sdpa_cudnn" and decision["speedup_vs_cublas"] is None
    assert decision["spend"]["custom"]["trials"] == 2
    assert decision["attainable_us"] is None  # the CPU's calibration is no roofline
    assert "torch CPU math SDPA takes" in decision["rationale"]
    assert any(t["tier"] == "decode" and "s_q=32 > 16" in t["reason"]
               for t in decision["tiers"])
    best = result.best
    assert best is not None and best["gpu"] == INTERPRETER_GPU
    assert best["backend"] == job["best"]["backend"]
