"""The precision benchmark (``scripts/bench/precision.py``): its targets, its report, and a
smoke run on the CPU (the interpreter's numbers say nothing about a GPU; the run proves the
jobs, the contenders and the report fit together). Rows in the target tests are FAKE."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from scripts.bench import precision as bench

BOUNDS = {"fp8<=0.03": 0.03, "fp8<=0.05": 0.05}


def rows(triton_us: float, served_05: tuple[float, str, float],
         served_03: tuple[float, str, float] = (177.0, "bf16", 1.6e-3)) -> list[dict[str, Any]]:
    """FAKE side-by-side rows: cuBLAS bf16 at 177 us, torch._scaled_mm at 108 us."""
    return [
        {"name": "bf16 cuBLAS", "precision": "bf16", "us": 177.0, "rel_error": 1.6e-3},
        {"name": "torch._scaled_mm", "precision": "fp8_e4m3", "us": 108.0},
        {"name": "Triton fp8 template", "precision": "fp8_e4m3", "us": triton_us},
        {"name": "served bf16 exact (cublas)", "precision": "bf16", "us": 177.0},
        {"name": "served bf16 fp8<=0.03 (cublas)", "precision": served_03[1],
         "us": served_03[0], "rel_error": served_03[2]},
        {"name": "served bf16 fp8<=0.05 (triton)", "precision": served_05[1],
         "us": served_05[0], "rel_error": served_05[2]},
    ]


def test_the_targets_of_a_4096_cube() -> None:
    got = bench.targets((4096, 4096, 4096), rows(112.0, (140.0, "fp8_e4m3", 0.037)), BOUNDS)
    by = {t["target"].split(":")[0].split(" >=")[0]: t for t in got}
    assert by["Triton fp8"]["ratio"] == pytest.approx(108 / 112) and by["Triton fp8"]["met"]
    assert by["bf16 fp8<=0.05"]["ratio"] == pytest.approx(177 / 140)
    assert by["bf16 fp8<=0.05"]["met"] and by["bf16 fp8<=0.05"]["precision"] == "fp8_e4m3"
    # 3%: the library stayed (e4m3 errs 3.7% on these inputs), 1.0x: not met, honestly
    assert not by["bf16 fp8<=0.03"]["met"]
    assert by["exact mode serves the input precision"]["met"]


@pytest.mark.parametrize(("triton_us", "served", "fp8_met", "bf16_met"), [
    (120.0, (140.0, "fp8_e4m3", 0.037), False, True),   # Triton under 0.95x of _scaled_mm
    (110.0, (160.0, "fp8_e4m3", 0.037), True, False),   # 1.106x: under 1.15x
    (110.0, (140.0, "fp8_e4m3", 0.051), True, False),   # fast enough, error over the bound
])
def test_a_target_is_met_only_when_every_part_is(triton_us: float,
                                                 served: tuple[float, str, float],
                                                 fp8_met: bool, bf16_met: bool) -> None:
    got = bench.targets((4096, 4096, 4096), rows(triton_us, served), BOUNDS)
    assert got[0]["met"] is fp8_met
    assert next(t for t in got if "fp8<=0.05" in t["target"])["met"] is bf16_met


def test_shapes_parse_and_the_report_lists_every_contender() -> None:
    assert bench.parse_shapes("4096x4096x4096, 8192X8192X8192") == [(4096, 4096, 4096),
                                                                   (8192, 8192, 8192)]
    shape = {"shape": "4096x4096x4096", "rows": rows(112.0, (140.0, "fp8_e4m3", 0.037)),
             "targets": bench.targets((4096, 4096, 4096),
                                      rows(112.0, (140.0, "fp8_e4m3", 0.037)), BOUNDS)}
    text = bench.render({"meta": {"gpu": "GPU (FAKE)", "torch": "t", "cuda": "c",
                                  "triton": "x", "date": "d", "trials": 48, "rounds": 5,
                                  "inputs": "normal"}, "shapes": [shape]})
    assert "| served bf16 fp8<=0.05 (triton) | fp8_e4m3 | 140.0 |" in text
    assert "| bf16 fp8<=0.05: >= 1.15x bf16 cuBLAS, error <= 0.05 | 1.264 | fp8_e4m3 | 0.037 " \
        "| yes |" in text


def test_max_rel_error_gives_one_bf16_job_per_bound() -> None:
    ap = argparse.ArgumentParser()
    bench.add_arguments(ap)
    args = ap.parse_args(["--out", "x", "--max-rel-error", "0.03, 0.05"])
    assert args.max_rel_error == BOUNDS
    assert ap.parse_args(["--out", "x"]).max_rel_error == BOUNDS  # the 3% and 5%
    assert ap.parse_args(["--out", "x", "--bounds", "0.1"]).max_rel_error == {"fp8<=0.1": 0.1}


@pytest.mark.parametrize(("text", "why"), [("0.03,x", "is not a number"),
                                           ("0", "in (0, 1]"), ("-0.03", "in (0, 1]"),
                                           ("1.5", "in (0, 1]"), (",", "at least one")])
def test_a_bad_bound_is_refused_naming_the_option(text: str, why: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--max-rel-error: .*" + re.escape(why)):
        bench.parse_bounds(text)


def test_the_served_precision_and_error_under_each_bound_side_by_side() -> None:
    got = bench.served_by_bound(rows(112.0, (140.0, "fp8_e4m3", 0.037)), BOUNDS)
    assert [(b["policy"], b["backend"], b["precision"], b["within"]) for b in got] == [
        ("exact", "cublas", "bf16", None), ("fp8<=0.03", "cublas", "bf16", True),
        ("fp8<=0.05", "triton", "fp8_e4m3", True)]
    assert got[2]["vs_cublas"] == pytest.approx(177 / 140) and got[2]["rel_error"] == 0.037
    shape = {"shape": "4096x4096x4096", "rows": rows(112.0, (140.0, "fp8_e4m3", 0.037))}
    text = bench.render({"meta": {"gpu": "GPU (FAKE)", "torch": "t", "cuda": "c",
                                  "triton": "x", "date": "d", "trials": 48, "rounds": 5,
                                  "inputs": "normal", "bounds": BOUNDS}, "shapes": [shape]})
    assert "| fp8<=0.03 | cublas | bf16 | 177.0 | 1.000 | 1.60e-03 | yes |" in text
    assert "| fp8<=0.05 | triton | fp8_e4m3 | 140.0 | 1.264 | 3.70e-02 | yes |" in text


@pytest.mark.slow
def test_a_smoke_run_on_the_cpu(tmp_path: Path) -> None:
    args = argparse.Namespace(out=tmp_path, shapes="64x48x96",
                              max_rel_error=bench.parse_bounds("0.05"), trials=2,
                              rounds=2, backends="cublas,triton", cutlass_trials=0,
                              cutlass_compile_s=0.0, job_s=600.0, db=None, interpret=True)
    assert bench.run(args) == 0
    report = json.loads((tmp_path / "bench_precision.json").read_text())
    (shape,) = report["shapes"]
    assert set(shape["jobs"]) == {"fp8", "exact", "fp8<=0.05"}
    assert all(j["status"] == "done" for j in shape["jobs"].values())
    names = {r["name"]: r for r in shape["rows"]}
    for name in ("bf16 cuBLAS", "Triton fp8 template", "bf16 quantised + torch._scaled_mm "
                                                       "rowwise"):
        assert name in names
    assert names["Triton fp8 template"]["rel_error"] <= 1e-2  # checked before timing
    # the row-wise quantised product errs as e4m3 does on these inputs
    quantised = names["bf16 quantised + torch._scaled_mm rowwise"]
    assert "error" in quantised or 0.02 < quantised["rel_error"] < 0.06
    assert (tmp_path / "bench_precision.md").read_text().startswith("Precision side by side")
