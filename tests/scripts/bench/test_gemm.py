"""The GEMM benchmark's report (``scripts/bench/gemm_report.py``): what is re-measured side by
side, the served kernel's numbers, the issue's targets per shape class, the table; and the
whole command once on the interpreter. Decisions here are FAKE dicts in the stored shape; the
numbers are invented."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scripts.bench import gemm_report
from scripts.bench.__main__ import main

OP = {"op": "cutlass3x_sm90_x", "raster": "heuristic", "swizzle": 1, "splits": 1}
REPAIRED = {"inner": "cublas", "b_layout": "kmajor"}


def decision(backend: str, config: dict[str, Any], attainable_us: float = 20.0
             ) -> dict[str, Any]:
    return {"backend": backend, "config": config, "attainable_us": attainable_us,
            "library_trials": [
                {"backend": "cublas", "config": {}, "status": "ok", "median_us": 73.0},
                {"backend": "cutlass", "config": OP, "status": "ok", "median_us": 80.0},
                {"backend": "cutlass", "config": {**OP, "swizzle": 2}, "status": "ok",
                 "median_us": 78.0},
                {"backend": "cutlass", "config": {**OP, "swizzle": 4}, "status": "wrong_result",
                 "median_us": None},
                {"backend": "repaired", "config": REPAIRED, "status": "ok", "median_us": 30.0}]}


def test_the_side_by_side_names_cublas_the_best_cutlass_op_and_the_served_kernel() -> None:
    named = gemm_report.contenders(decision("repaired", REPAIRED))
    assert named == {"cublas": ("cublas", {}), "cutlass": ("cutlass", {**OP, "swizzle": 2}),
                     "served": ("repaired", REPAIRED)}
    # a served kernel that is one of the first two is measured once
    assert list(gemm_report.contenders(decision("cublas", {}))) == ["cublas", "cutlass"]
    assert list(gemm_report.contenders(decision("cutlass", {**OP, "swizzle": 2}))) == [
        "cublas", "cutlass"]
    assert gemm_report.contenders(None) == {"cublas": ("cublas", {})}


def test_the_served_row_is_its_speedup_and_roofline_share() -> None:
    d = decision("repaired", REPAIRED, attainable_us=20.0)
    row = gemm_report.served_row(d, {"cublas": {"us": 73.0}, "cutlass": {"us": 78.0},
                                     "served": {"us": 25.0}})
    assert row["served_us"] == 25.0 and row["served_vs_cublas"] == pytest.approx(73 / 25)
    assert row["served_roofline_share"] == pytest.approx(0.8)
    cublas = gemm_report.served_row(decision("cublas", {}, 80.0), {"cublas": {"us": 73.0}})
    assert cublas["served_vs_cublas"] == 1.0 and cublas["served_roofline_share"] == 1.0
    assert cublas["served_roofline_share_raw"] == pytest.approx(80 / 73)
    assert gemm_report.served_row({}, {}) == {}


def test_the_served_library_call_names_what_it_ran() -> None:
    row = {"served_backend": "cublaslt", "served_config": {"rank": 0, "cluster": "1x1"}}
    lt = {"describe": "algo 66, tile 400 (128x80), stages 21, cluster 1x1"}
    trials = [{"backend": "cublaslt", "config": {"rank": 0}, "extra": {"resolved": {"x": 1}}},
              {"backend": "cublaslt", "config": {"cluster": "1x1", "rank": 0},
               "extra": {"resolved": lt}},
              {"backend": "cublas", "config": {}, "extra": {}}]
    assert gemm_report.served_resolved(row, trials) == lt["describe"]
    assert gemm_report.served_resolved(row, trials[:1]) is None
    assert gemm_report.served_resolved({"served_backend": "cublas", "served_config": {}},
                                       trials) is None


@pytest.mark.parametrize(("cls", "speedup", "share", "met"), [
    ("unaligned k and n, mid-size", 2.1, 0.3, True),
    ("unaligned k, compute-bound", 1.9, 0.95, False),
    ("long k, tiny output", 1.3, 0.5, True),
    ("long k, skinny output", 1.1, 0.86, True),
    ("mid m, long k, too few tiles for the SMs", 1.1, 0.8, False),
    ("decode GEMV, memory-bound", 1.0, 0.86, True),
    ("decode GEMV, long k", 3.0, 0.7, False),
])
def test_each_class_gets_the_issues_target(cls: str, speedup: float, share: float,
                                           met: bool) -> None:
    got = gemm_report.target(cls, {"served_vs_cublas": speedup, "served_roofline_share": share})
    assert got["met"] is met and got["target"]
    assert gemm_report.target("square, compute-bound", {"served_vs_cublas": 1.0}) == {}


def test_the_table_has_a_row_per_shape() -> None:
    meta = {"gpu": "H100 (FAKE)", "sm_count": 132, "policy": "agent", "trials": 64,
            "rounds": 5, "backends": ["cublas"], "calibration": {"bandwidth_gbs": 3000.0}}
    rows = [{"shape": "999x2047x1537", "class": "unaligned", "verdict": "custom_wins",
             "served_backend": "triton_repair", "cublas_us": 73.0, "served_us": 25.0,
             "served_vs_cublas": 2.92, "served_roofline_share": 0.8, "trials_custom": 20,
             "tuning_s": 61.0, "target": "served >= 2.0x cuBLAS", "met": True},
            {"shape": "2x16384x4096", "class": "decode", "reason": "not started: past the 420 s"
             " deadline"}]
    text = gemm_report.render(meta, rows)
    assert "| 999x2047x1537 | unaligned | custom_wins | triton_repair | 73.00 | — | 25.00 | " \
           "2.920 | 80% |" in text
    assert "| 2x16384x4096 | decode | not served: not started: past the 420 s deadline |" in text


@pytest.mark.slow
def test_the_command_runs_a_shape_on_the_interpreter(tmp_path) -> None:
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps({"shapes": [
        {"m": 24, "n": 40, "k": 36, "dtype": "fp16", "class": "unaligned k (CPU smoke)"}]}))
    out = tmp_path / "out"
    assert main(["gemm", "--shapes", str(shapes), "--policy", "agent", "--trials", "1",
                 "--no-peer", "--backends", "cublas,repaired,triton_repair",
                 "--out", str(out)]) == 0
    report = json.loads((out / "bench_gemm.json").read_text())
    row = report["rows"][0]
    assert row["job_status"] == "done" and row["cublas_us"] > 0
    assert row["served_backend"] in ("cublas", "repaired", "triton_repair")
    assert row["target"] == "served >= 2.0x cuBLAS" and "met" in row
    assert "| 24x40x36 |" in (out / "bench_gemm.md").read_text()
    trials = json.loads((out / "measurements.json").read_text())["problems"][0]["trials"]
    assert {t["backend"] for t in trials} >= {"cublas", "repaired"}
