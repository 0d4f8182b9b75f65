"""The attention benchmark's table comes from the job's own evidence (FAKE job dicts shaped as
``GET /v1/jobs/{id}`` answers; the numbers are made up)."""

from __future__ import annotations

from scripts.bench.attention import _problem, _row, _table

JOB = {
    "status": "done",
    "custom_best": {"backend": "triton", "median_us": 3900.0, "config": {"BLOCK_M": 128}},
    "decision": {
        "verdict": "library_wins_after_search", "chosen": "library", "bound": "compute",
        "baseline": "sdpa_cudnn", "speedup_vs_cublas": 1.0,
        "roofline": {"flops": 2_199_023_255_552, "bytes": 268_435_456},
        "library": {"backend": "sdpa_cudnn", "median_us": 3610.0},
        "custom": {"backend": "triton", "median_us": 3900.0},
        "library_trials": [
            {"backend": "sdpa_cudnn", "status": "ok", "median_us": 3610.0},
            {"backend": "sdpa_flash", "status": "ok", "median_us": 6200.0},
            {"backend": "flex", "status": "ok", "median_us": 4580.0},
            {"backend": "sdpa_efficient", "status": "unsupported", "median_us": None},
        ],
        "spend": {"calibration": {"gpu_s": 30.0}, "library": {"trials": 4, "gpu_s": 2.0},
                  "custom": {"trials": 24, "gpu_s": 9.5}, "verify": {"trials": 1, "gpu_s": 0.5}},
    },
}


def test_a_row_holds_every_library_backend_and_the_served_kernel() -> None:
    shape = {"batch": 8, "heads": 32, "kv_heads": 32, "s_q": 4096, "s_kv": 4096, "d": 128,
             "causal": False}
    problem = _problem(shape, "bf16")
    assert problem == {"kind": "attention", "dtype": "bf16", **shape}
    row = _row(problem, JOB, 95.0)
    assert row["library_us"] == {"sdpa_cudnn": 3610.0, "sdpa_flash": 6200.0, "flex": 4580.0}
    assert row["served_backend"] == "sdpa_cudnn" and row["triton_us"] == 3900.0
    assert round(row["served_rate"]) == round(2_199_023_255_552 / 3610e-6 / 1e12)
    assert row["gpu_s"] == 12.0 and row["custom_trials"] == 24
    table = _table([row])
    assert "| b8 h32/32 s4096x4096 d128 | compute | 4580.0 | 3610.0 | 6200.0 | 3900.0 |" in table
