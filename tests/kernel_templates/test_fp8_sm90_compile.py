"""The fp8 template's 2-CTA clusters compiled for sm_90 on the CPU (``fp8_sm90_compile``: one
configuration per child process, since an ``LLVM ERROR`` aborts it), against the rule that
refuses the tiles Triton 3.6 cannot compile (``search.kinds.gemm.cluster.fp8_cluster_refusal``).

When a Triton upgrade compiles the refused tile, ``test_a_refused_cluster_still_fails_to_compile``
fails: lift (or narrow) the rule, after checking the results on a GPU
(``tests/gpu/test_fp8_gpu.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernel_templates.errors import InvalidConfig
from kernel_templates.gemm.fp8_config import check_config
from search.kinds.gemm import fp8_space
from search.kinds.gemm.cluster import fp8_cluster_refusal
from search.kinds.gemm.spec import GemmProblem
from search.limits import DeviceLimits
from tests.kernel_templates.fp8_sm90_compile import compile_in_child, compile_panel_in_child

COMPILES = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
            / "fp8_cluster_compile_cpu_2026-11-24.json")
H100 = DeviceLimits()
FP8 = GemmProblem(m=4096, n=4096, k=4096, dtype="fp8_e4m3", layout_b="col")
BF16 = GemmProblem(m=4096, n=4096, k=4096)
#: A seed's tile in a cluster: Triton 3.6 stops with "Failed to find a valid layout".
REFUSED = dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3,
               PERSISTENT=1, num_ctas=2, FAST_ACC=1, TMA_STORE=1)
#: The tile the H100 served for fp8 4096^3, in a cluster: compiles.
ADMITTED = {**REFUSED, "BLOCK_M": 128, "BLOCK_N": 256}


def _compile(config: dict[str, Any]) -> tuple[int, str]:
    done = compile_in_child(config)
    if done.returncode and "ptxas" in done.stderr and "valid layout" not in done.stderr:
        pytest.skip(f"no CUDA toolchain in this Triton build: {done.stderr[-300:]}")
    return done.returncode, done.stderr


def test_a_refused_cluster_still_fails_to_compile() -> None:
    rc, err = _compile(REFUSED)
    assert rc != 0 and "Failed to find a valid layout" in err, (
        "Triton now compiles the fp8 template's 256-row tile in a 2-CTA cluster for sm_90: "
        "lift or narrow search.kinds.gemm.cluster.fp8_cluster_refusal once the GPU tests "
        f"show it right. rc={rc}, stderr tail: {err[-1500:]}")


def test_the_rule_admits_a_cluster_that_compiles() -> None:
    rc, err = _compile(ADMITTED)
    assert rc == 0, err[-3000:]
    assert fp8_cluster_refusal(ADMITTED, row_scales=False) is None
    assert fp8_space.violations(FP8, ADMITTED, H100) == []


def test_the_rule_refuses_what_does_not_compile_in_the_search_and_the_launcher() -> None:
    why = fp8_cluster_refusal(REFUSED, row_scales=False)
    assert why and "num_ctas=2" in why and "256x128" in why
    assert why in fp8_space.violations(FP8, REFUSED, H100)
    with pytest.raises(InvalidConfig, match="num_ctas=2 with a 256x128 tile"):
        check_config(REFUSED, lowered=False)
    # without the cluster the same tile is fine
    assert fp8_space.violations(FP8, {**REFUSED, "num_ctas": 1}, H100) == []


@pytest.mark.parametrize(("tile", "row_scales", "refused"), [
    ((256, 64, 8), False, True), ((128, 64, 4), False, True), ((128, 32, 4), True, True),
    ((128, 128, 4), True, True),  # per-row scales: an nvvm.mapa error instead
    ((128, 128, 4), False, False), ((128, 64, 8), True, False), ((64, 256, 4), True, False),
])
def test_the_rule_is_as_narrow_as_the_compiles(tile: tuple[int, int, int], row_scales: bool,
                                               refused: bool) -> None:
    bm, bn, warps = tile
    cfg = {**REFUSED, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps}
    assert (fp8_cluster_refusal(cfg, row_scales) is not None) is refused
    assert fp8_cluster_refusal({**cfg, "num_ctas": 1}, row_scales) is None
    lowered = fp8_space.complete({**cfg, "SCALES": "row" if row_scales else "tensor"}, True)
    assert any("num_ctas=2" in v for v in fp8_space.violations(BF16, lowered, H100)) is refused


def test_the_rule_matches_every_recorded_compile() -> None:
    rows = json.loads(COMPILES.read_text())["rows"]
    assert len(rows) > 100 and any(r["compiles"] for r in rows)
    wrong = [r for r in rows
             if (fp8_cluster_refusal(r["config"], r["row_scales"]) is None) != r["compiles"]]
    assert wrong == []


@pytest.mark.parametrize("stages", [1, 2])
def test_the_panel_quantisation_compiles_for_sm90_and_pipelines_its_walks(stages: int) -> None:
    """The panel quantisation (``Q_MODE="panel"``) at 16 rows x 256: compiles without
    spilling, and ``STAGES`` decides whether its loads go out as ``cp.async`` copies ahead of
    the chunk being reduced (2) or as plain 128-bit loads (1)."""
    cfg = {"BLOCK_R": 16, "BLOCK_K": 256, "STAGES": stages, "num_warps": 4}
    done = compile_panel_in_child(cfg)
    if done.returncode and "ptxas" in done.stderr:
        pytest.skip(f"no CUDA toolchain in this Triton build: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if stages == 1:
        assert got["cp_async"] == 0 and got["ld_global_v4"] > 0
    else:
        assert got["cp_async"] > 0
    assert got["shared"] <= H100.smem_per_block
    assert got.get("spill_stores") in (None, 0), got
