"""The ``cublaslt`` backend off the GPU: its configuration rules, how torch tensors map onto
cuBLASLt's column-major operands, its registration (CUDA only) and the library stage that
plans it. Its kernels run in ``tests/gpu/test_cublaslt.py``."""

from __future__ import annotations

import pytest
import torch

from kernel_templates import registry
from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm.cublaslt import (
    _OP_N,
    _OP_T,
    CLUSTERS,
    MAX_RANK,
    LtConfig,
    LtGemm,
    _operand_layout,
    check_config,
    describe,
    overrides,
)
from kernel_templates.gemm.cublaslt_tiles import tile_shape
from kernel_templates.gemm.inputs import make_inputs
from search.decision import Policy
from search.kinds.gemm import GEMM, library
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Device


@pytest.mark.parametrize("config, field", [
    ({}, "lacks"), ({"rank": 0, "tile": 3}, "unknown"), ({"rank": -1}, "rank"),
    ({"rank": MAX_RANK}, "rank"), ({"rank": True}, "rank"), ({"rank": 1.0}, "rank"),
    ({"rank": 0, "split_k": 0}, "split_k"), ({"rank": 0, "split_k": 65}, "split_k"),
    ({"rank": 0, "split_k": "2"}, "split_k"), ({"rank": 0, "cluster": "3x3"}, "cluster"),
    ({"rank": 0, "cluster": 2}, "cluster"), ({"rank": 0, "cluster": [2, 1]}, "cluster"),
    ({"rank": 0, "custom": -1}, "custom"),
    ({"rank": 0, "custom": 64}, "custom"), ({"rank": 0, "custom": True}, "custom")])
def test_a_bad_config_is_refused_naming_the_key(config: dict, field: str) -> None:
    with pytest.raises(InvalidConfig, match=field):
        check_config(config)


def test_good_configs() -> None:
    assert check_config({"rank": 3}) == (3, None)
    assert check_config({"rank": 0, "split_k": 1}) == (0, 1)
    assert check_config({"rank": MAX_RANK - 1, "split_k": 64}) == (MAX_RANK - 1, 64)
    assert check_config({"rank": 0, "cluster": "1x1", "custom": 1}) == (0, None)
    assert overrides({"rank": 0, "cluster": "2x1", "custom": 5}) == {"cluster": 3, "custom": 5}
    assert overrides({"rank": 1, "split_k": 2}) == {}
    assert CLUSTERS["1x1"] == 2 and CLUSTERS["auto"] == 0  # cublasLtClusterShape_t ids


def test_operands_map_onto_the_transposed_column_major_product() -> None:
    """C = A B row-major is C^T = B^T A^T column-major: a row-major operand is its own
    transpose stored column-major (op N, leading dimension its row stride), a column-major one
    is stored as it is (op T, leading dimension its column stride)."""
    for layout_a, layout_b in (("row", "row"), ("col", "row"), ("row", "col"), ("col", "col")):
        p = GemmProblem(5, 7, 9, layout_a=layout_a, layout_b=layout_b)
        s = make_inputs(p, "cpu", seed=1)
        op_b, rows_b, cols_b, ld_b = _operand_layout(s.b, p.k, p.n)
        op_a, rows_a, cols_a, ld_a = _operand_layout(s.a, p.m, p.k)
        if layout_b == "row":
            assert (op_b, rows_b, cols_b, ld_b) == (_OP_N, p.n, p.k, p.n)
        else:
            assert (op_b, rows_b, cols_b, ld_b) == (_OP_T, p.k, p.n, p.k)
        if layout_a == "row":
            assert (op_a, rows_a, cols_a, ld_a) == (_OP_N, p.k, p.m, p.k)
        else:
            assert (op_a, rows_a, cols_a, ld_a) == (_OP_T, p.m, p.k, p.m)
        # the mapping describes the same numbers: read back through it, each operand is its
        # transpose (op N) or itself (op T), element for element
        for t, (op, rows, cols, ld) in ((s.b, (op_b, rows_b, cols_b, ld_b)),
                                        (s.a, (op_a, rows_a, cols_a, ld_a))):
            flat = torch.as_strided(t, (cols, rows), (ld, 1)).t()  # column-major rows x cols
            assert torch.equal(flat, t.t() if op == _OP_N else t)
    batched = make_inputs(GemmProblem(4, 6, 8, batch=3), "cpu", seed=2)
    assert _operand_layout(batched.a, 4, 8) == (_OP_N, 8, 4, 8)
    with pytest.raises(Unsupported, match="row- or column-major"):
        _operand_layout(torch.empty(6, 8)[:, ::2], 6, 4)


def test_off_the_gpu_it_is_unsupported_and_not_offered() -> None:
    s = make_inputs(GemmProblem(8, 8, 8), "cpu", seed=0)
    with pytest.raises(Unsupported, match="CUDA"):
        LtGemm(s.a, s.b, s.out)
    with pytest.raises(Unsupported, match="CUDA"):
        registry.make_callable(Candidate(GemmProblem(8, 8, 8), "cublaslt", {"rank": 1}), s)
    found = registry.availability(Device(gpu_model="cpu", mode="interpreter"))
    assert "CUDA" in str(found[("gemm", "cublaslt")])
    h100 = Device(gpu_model="H100", mode="cuda", cc="9.0", smem_per_block=232_448)
    assert registry.availability(h100)[("gemm", "cublaslt")] is None


def test_it_refuses_fp8_and_a_converting_output() -> None:
    with pytest.raises(Unsupported, match="cublaslt"):
        registry.check_supported("cublaslt", GemmProblem(64, 64, 64, dtype="fp8_e4m3",
                                                         layout_b="col"))
    with pytest.raises(Unsupported, match="cublaslt"):
        registry.check_supported("cublaslt", GemmProblem(64, 64, 64, out_dtype="fp32"))
    registry.check_supported("cublaslt", GemmProblem(64, 64, 64))


def test_the_library_stage_plans_the_ranked_algorithms() -> None:
    p = GemmProblem(16, 4096, 4096)
    plan = GEMM.library_plan(p, Policy(), ["cublas", "cublaslt", "triton"], "H100",
                             lambda _: None, seeds=6)
    lt = [c for b, c in plan.configs if b == "cublaslt"]
    assert plan.configs[0] == ("cublas", {})  # cuBLAS's own pick stays the baseline, first
    assert lt == [*({"rank": r} for r in library.CUBLASLT_RANKS),
                  *({"rank": r, "split_k": 1} for r in library.CUBLASLT_UNSPLIT),
                  *library.CUBLASLT_REFIT]
    # the first two ranks with a 1x1 and a 2x1 cluster, each with its own custom option and 1
    assert {"rank": 0, "cluster": "1x1"} in lt and {"rank": 1, "cluster": "2x1", "custom": 1} in lt
    assert len(library.CUBLASLT_REFIT) == 8
    assert all(check_config(c) for c in lt)
    without = GEMM.library_plan(p, Policy(), ["cublas", "triton"], "H100", lambda _: None, 6)
    assert not any(b == "cublaslt" for b, _ in without.configs)
    fp8 = GEMM.library_plan(GemmProblem(64, 64, 64, dtype="fp8_e4m3", layout_b="col"),
                            Policy(), ["cublas", "cublaslt"], "H100", lambda _: None, 6)
    assert not any(b == "cublaslt" for b, _ in fp8.configs)
    assert "cublaslt" in GEMM.library_backends


def test_describe_says_what_the_algorithm_is() -> None:
    plain = describe(LtConfig(algo_id=66, tile=20, stages=35, cluster=3))
    assert plain == "algo 66, tile 20 (128x128), stages 35, cluster 2x1"
    refit = describe(LtConfig(algo_id=66, tile=400, stages=21, cluster=2, custom=1))
    assert refit == "algo 66, tile 400 (128x80), stages 21, cluster 1x1, custom option 1"
    assert "cluster 7" in describe(LtConfig(algo_id=66, cluster=7))  # no name: its id
    split = describe(LtConfig(algo_id=21, tile=17, stages=18, split_k=66, reduction=2,
                              swizzle=1))
    assert "split-K 66 (reduce in fp32)" in split and "swizzled" in split


def test_tile_ids_map_to_the_shapes_of_cublaslt_h() -> None:
    # values of cublasLtMatmulTile_t in cublasLt.h (CUDA 13)
    assert tile_shape(1) == (8, 8)
    assert tile_shape(20) == (128, 128)
    assert tile_shape(116) == (64, 192)
    assert tile_shape(400) == (128, 80)
    assert tile_shape(513) == (256, 256)
    assert tile_shape(0) is None and tile_shape(10_000) is None
