"""The re-run comparison (``scripts/bench/rerun.py``): each shape against run 9's verdict,
speed-up and noise. Decisions here are FAKE dicts in the stored shape; the numbers are
invented."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scripts.bench import rerun
from scripts.bench.__main__ import main

PINGPONG = ("cutlass3x_sm90_tensorop_gemm_e4m3_e4m3_f32_bf16_bf16_128x128x128_2x1x1_0_tnt_"
            "align16_warpspecialized_pingpong_fp8_fastaccum_epi_tma")


def job(verdict: str, backend: str, config: dict[str, Any], vs: float) -> dict[str, Any]:
    return {"wall_s": 3.0, "decision": {
        "verdict": verdict, "backend": backend, "config": config, "speedup_vs_cublas": vs,
        "rationale": "fake", "spend": {"library": {"gpu_s": 1.0}, "custom": {"trials": 4,
                                                                            "gpu_s": 2.0},
                                       "calibration": {"gpu_s": 9.0}}}}


BASELINE = {"rows": [
    {"index": i, "shape": s, "dtype": "bf16", "run9_verdict": v, "run9_vs_cublas": x,
     "run9_noise": 0.03}
    for i, s, v, x in [(0, "a", "library_sufficient", 1.0), (1, "b", "custom_wins", 1.10),
                       (2, "c", "custom_wins", 1.10), (3, "d", "library_sufficient", 1.08)]]}
BENCH = {"jobs": {"agent": {
    "0": job("library_sufficient", "cublas", {}, 1.0),
    "1": job("library_wins_after_search", "cublaslt", {"rank": 0, "split_k": 1}, 1.12),
    "2": job("custom_wins", "triton", {"BLOCK_M": 64}, 1.05),
    "3": job("library_sufficient", "cutlass", {"op": PINGPONG}, 1.081),
    "9": job("custom_wins", "triton", {}, 2.0)}}}  # not in the baseline: left out


def test_each_shape_is_judged_against_run_9() -> None:
    rows = {r["index"]: r for r in rerun.compare(BENCH, BASELINE)}
    assert sorted(rows) == [0, 1, 2, 3]
    assert rows[0]["line"] == "same"
    assert rows[1]["line"] == "verdict changed; faster"
    assert rows[1]["served"] == "cuBLASLt rank 0, unsplit"
    assert rows[2]["line"] == "worse" and rows[2]["now_over_run9"] == pytest.approx(1.05 / 1.10,
                                                                                     abs=1e-4)
    assert rows[3]["line"] == "same" and rows[3]["served"] == "CUTLASS 128x128x128 2x1x1 ping-pong"
    assert rows[0]["gpu_s"] == 3.0 and rows[0]["custom_trials"] == 4  # calibration left out


@pytest.mark.parametrize(("ratio", "now", "then", "expected"), [
    (0.96, "a", "a", "worse"), (0.98, "a", "a", "same (within noise)"), (1.0, "a", "a", "same"),
    (1.05, "a", "a", "better"), (1.05, "b", "a", "verdict changed; faster"),
    (0.99, "b", "a", "verdict changed; within noise"), (0.9, "b", "a", "worse")])
def test_the_line_rule(ratio: float, now: str, then: str, expected: str) -> None:
    assert rerun.line(ratio, 0.03, now, then) == expected


def test_the_command_writes_the_summary_and_fails_on_a_worse_shape(tmp_path) -> None:
    bench, base = tmp_path / "agent_bench.json", tmp_path / "base.json"
    bench.write_text(json.dumps(BENCH))
    base.write_text(json.dumps(BASELINE))
    out = tmp_path / "out"
    assert main(["rerun", "--run", str(bench), "--baseline", str(base), "--out", str(out)]) == 1
    rows = json.loads((out / "rerun.json").read_text())["rows"]
    assert [r["line"] for r in rows][2] == "worse"
    table = (out / "rerun.md").read_text()
    assert "| 2 | c | bf16 | custom_wins | custom_wins | Triton |" in table
    without_worse = {"jobs": {"agent": {k: v for k, v in BENCH["jobs"]["agent"].items()
                                        if k != "2"}}}
    bench.write_text(json.dumps(without_worse))
    assert main(["rerun", "--run", str(bench), "--baseline", str(base)]) == 0
