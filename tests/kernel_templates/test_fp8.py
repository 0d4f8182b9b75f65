"""fp8 e4m3 with per-tensor scales: inputs, the dequantised float64 reference, the tolerance,
and the two library backends through the registry (``cublas``: ``torch._scaled_mm``;
``cutlass``: the CUTLASS kernel with alpha = scale_a * scale_b on the device). The Triton fp8
template has its own tests (``test_fp8_template.py``). The GPU tests run ``torch._scaled_mm`` and
CUTLASS for real on sm_90."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kernel_templates.errors import Unsupported
from kernel_templates.gemm.inputs import FP8_SPREAD, make_inputs
from kernel_templates.gemm.reference import (
    FP8_TOLERANCE,
    reference_for,
    reference_matmul,
    rel_error,
    tolerance,
)
from kernel_templates.registry import check_supported, make_callable
from search.kinds.gemm.spec import GemmProblem, check_served
from search.types import Candidate, ProblemError

F8 = torch.float8_e4m3fn
P = GemmProblem(m=40, n=48, k=96, dtype="fp8_e4m3", layout_b="col")


def _scaled_mm_runs(device: str) -> bool:
    one = torch.ones((), device=device)
    z = torch.zeros(16, 16, device=device).to(F8)
    try:
        torch._scaled_mm(z, z.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        return False
    return True


def test_fp8_inputs_are_random_tn_and_carry_scales_that_are_not_one() -> None:
    inp = make_inputs(P, "cpu", 5)
    assert inp.a.dtype == inp.b.dtype == F8 and inp.out.dtype == torch.bfloat16
    assert inp.a.shape == (40, 96) and inp.a.stride() == (96, 1)  # row-major A
    assert inp.b.shape == (96, 48) and inp.b.stride() == (1, 96)  # column-major B
    assert torch.isnan(inp.out).all()
    for t in (inp.a, inp.b):
        assert (t.float() != 0).float().mean() > 0.95  # random normals, not zeros
    assert inp.a.float().std() == pytest.approx(FP8_SPREAD[0], rel=0.2)
    assert inp.scale_a is not None and inp.scale_b is not None
    sa, sb = float(inp.scale_a), float(inp.scale_b)
    assert inp.scale_a.dtype == torch.float32 and inp.scale_a.numel() == 1
    assert sa != 1.0 and sb != 1.0 and sa != sb
    assert not torch.equal(inp.a.float(), make_inputs(P, "cpu", 6).a.float())
    # the dequantised product is about N(0, 1), as the other dtypes' are
    assert 0.5 < float(reference_for(inp).std()) < 2.0


def test_other_dtypes_carry_no_scales() -> None:
    inp = make_inputs(GemmProblem(m=8, n=8, k=8, dtype="bf16"), "cpu", 0)
    assert inp.scale_a is None and inp.scale_b is None


def test_the_reference_is_the_dequantised_product_in_float64() -> None:
    inp = make_inputs(P, "cpu", 1)
    ref = reference_for(inp)
    assert ref.dtype == torch.float64
    want = (inp.a.double() * float(inp.scale_a)) @ (inp.b.double() * float(inp.scale_b))
    assert torch.allclose(ref, want, rtol=1e-12, atol=0)
    # without the scales the "product" is off by a factor: far over the tolerance
    assert rel_error(reference_matmul(inp.a, inp.b), ref) > 0.5


def test_fp8_tolerance_whatever_the_output() -> None:
    for out in ("bf16", "fp16", "fp32"):
        p = GemmProblem(m=64, n=64, k=64, dtype="fp8_e4m3", out_dtype=out, layout_b="col")
        assert tolerance(p) == FP8_TOLERANCE == 1e-2


def test_served_rules_name_the_field() -> None:
    check_served(P)
    cases = {"layout_b": dict(layout_b="row"), "layout_a": dict(layout_a="col"),
             "batch": dict(batch=3), "k": dict(k=100), "n": dict(n=100)}
    for field, over in cases.items():
        bad = replace(P, **over)
        with pytest.raises(ProblemError) as err:
            check_served(bad)
        assert err.value.field == field


def test_triton_serves_fp8_through_its_fp8_template_within_the_served_rules() -> None:
    check_supported("triton", P)  # kernel_templates/gemm/fp8.py (tests: test_fp8_template.py)
    with pytest.raises(Unsupported, match="triton fp8 template cannot serve"):
        check_supported("triton", GemmProblem(m=32, n=32, k=32, dtype="fp8_e4m3"))


def test_cublas_refuses_an_fp8_layout_scaled_mm_cannot_run() -> None:
    with pytest.raises(Unsupported, match="layout_b"):
        check_supported("cublas", GemmProblem(m=32, n=32, k=32, dtype="fp8_e4m3"))
    check_supported("cublas", P)
    check_supported("cublas", GemmProblem(m=32, n=32, k=32, dtype="fp8_e4m3", out_dtype="fp32",
                                          layout_b="col"))


def test_cutlass_fp8_needs_a_cuda_tensor() -> None:
    pytest.importorskip("cutlass_library")
    check_supported("cutlass", P)
    inp = make_inputs(P, "cpu", 0)
    cfg = {"op": "x", "raster": "heuristic", "swizzle": 1, "splits": 1}
    with pytest.raises(Unsupported, match="CUDA GPU"):
        make_callable(Candidate(problem=P, backend="cutlass", config=cfg), inp)


@pytest.mark.parametrize("out", ["bf16", "fp16", "fp32"])
def test_cublas_fp8_is_scaled_mm_with_the_scales(out: str, device: str) -> None:
    if not _scaled_mm_runs(device):
        pytest.skip(f"torch._scaled_mm does not run on this {device}")
    p = GemmProblem(m=40, n=48, k=96, dtype="fp8_e4m3", out_dtype=out, layout_b="col")
    inp = make_inputs(p, device, 2)
    make_callable(Candidate(problem=p, backend="cublas"), inp)()
    assert inp.out.dtype == {"bf16": torch.bfloat16, "fp16": torch.float16,
                             "fp32": torch.float32}[out]
    ref = reference_for(inp)
    assert rel_error(inp.out, ref) <= tolerance(p)
    # the scales are applied: the same call with both scales 1 is far off
    one = torch.ones((), device=device)
    unscaled = torch._scaled_mm(inp.a, inp.b, scale_a=one, scale_b=one, out_dtype=torch.float32)
    assert rel_error(unscaled, ref) > 0.5


def test_wrong_scale_handling_fails_the_check() -> None:
    """What ``workers.execute.checked_calls`` would see from a kernel that swaps or drops a
    scale: a wrong result, not a pass."""
    inp = make_inputs(P, "cpu", 4)
    ref = reference_for(inp)
    sa, sb = inp.scale_a, inp.scale_b
    assert sa is not None and sb is not None
    for wrong in ((sa, sa), (sb, sb), (sa, None), (None, None)):
        assert rel_error(reference_matmul(inp.a, inp.b, *wrong), ref) > tolerance(P)


# -- GPU --------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1000, 3008, 2048), (16, 4096, 8192)])
def test_gpu_scaled_mm_through_the_registry(shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    p = GemmProblem(m=m, n=n, k=k, dtype="fp8_e4m3", layout_b="col")
    inp = make_inputs(p, "cuda", 7)
    make_callable(Candidate(problem=p, backend="cublas"), inp)()
    torch.cuda.synchronize()
    assert rel_error(inp.out, reference_for(inp)) <= tolerance(p)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("out", ["bf16", "fp16", "fp32"])
def test_gpu_cutlass_fp8_through_the_registry_matches_scaled_mm(out: str) -> None:
    pytest.importorskip("cutlass_library")
    from kernel_templates.gemm import cutlass as kc
    from search.kinds.gemm.cutlass_space import seeds

    p = GemmProblem(m=1000, n=3008, k=2048, dtype="fp8_e4m3", out_dtype=out, layout_b="col")
    configs = seeds(p, kc.ops_for(p), n=2)
    assert configs, "no CUTLASS fp8 seed configurations"
    lib = make_inputs(p, "cuda", 3)
    make_callable(Candidate(problem=p, backend="cublas"), lib)()
    torch.cuda.synchronize()
    lib_err = rel_error(lib.out, reference_for(lib))
    assert lib_err <= tolerance(p)
    for config in configs:
        inp = make_inputs(p, "cuda", 3)
        make_callable(Candidate(problem=p, backend="cutlass", config=config), inp)()
        torch.cuda.synchronize()
        err = rel_error(inp.out, reference_for(inp))
        assert err <= tolerance(p), (config, err, lib_err)
