"""The alignment repair (kernel_templates/gemm/repair.py) and its backends ``repaired`` and
``triton_repair``.

CPU cases run in the Triton interpreter (small fp16/fp32 shapes: bf16 tl.dot is wrong there):
the fused copy into scratch buffers poisoned with NaN first (so every element, padding
included, must be written), for every layout of A and B, both plans and every B layout; then
the backends end to end on odd shapes (m, n, k all odd) against a float64 reference on random
inputs into NaN-poisoned outputs, back to back and on fresh inputs."""

from __future__ import annotations

import pytest
import torch

from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm import repair
from kernel_templates.gemm.hard_backends import check_repaired_config
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for, rel_error, tolerance_for
from kernel_templates.registry import check_supported, make_callable, static_violations
from search.kinds.gemm import repair_space
from search.kinds.gemm.alignment import RepairPlan, b_layouts
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate

LAYOUTS = [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")]


def _poisoned(s: repair.Scratch) -> repair.Scratch:
    for t in (s.a, s.b, s.c):
        if t is not None:
            t.fill_(float("nan"))
    return s


@pytest.mark.parametrize(("layout_a", "layout_b"), LAYOUTS)
@pytest.mark.parametrize("padded", [True, False])
def test_the_copy_writes_aligned_buffers_with_zero_padding(layout_a: str, layout_b: str,
                                                           padded: bool, device: str) -> None:
    p = GemmProblem(37, 45, 51, dtype="fp16", layout_a=layout_a, layout_b=layout_b)
    inp = make_inputs(p, device, 3)
    for b_layout in b_layouts(p, padded):
        plan = RepairPlan.of(p, b_layout, padded)
        s = _poisoned(repair.allocate(plan, inp.a.device, inp.a.dtype, inp.out.dtype))
        a_in, b_in = repair.repair(plan, inp.a, inp.b, s)
        assert tuple(a_in.shape) == (37, plan.k) and tuple(b_in.shape) == (plan.k, plan.n)
        # the values, exactly, where the operands are; zeros where the padded plan pads
        assert torch.equal(a_in[:, :51], inp.a) and torch.equal(b_in[:51, :45], inp.b)
        if padded:
            assert not a_in[:, 51:].any() and not b_in[51:, :].any()
            assert not b_in[:, 45:].any() and not torch.isnan(s.a).any()
            assert not torch.isnan(s.b).any()
        # rows of every copy start on 16 bytes
        for buf in (s.a, s.b):
            if buf is not None:
                assert (buf.stride(0) * buf.element_size()) % 16 == 0


def test_the_copy_back_writes_only_the_output_extent(device: str) -> None:
    padded = torch.randn(5, 24, device=device).to(torch.float16)
    out = torch.full((5, 19), float("nan"), dtype=torch.float16, device=device)
    repair.copy_back(padded, out)
    assert torch.equal(out, padded[:, :19])


@pytest.mark.parametrize("inner", repair_space.INNERS)
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize(("layout_a", "layout_b"), [("row", "row"), ("col", "col")])
def test_triton_repair_is_correct_on_odd_shapes(inner: str, dtype: str, layout_a: str,
                                                 layout_b: str, device: str) -> None:
    p = GemmProblem(33, 35, 37, dtype=dtype, layout_a=layout_a, layout_b=layout_b)
    small = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "num_stages": 2, "num_warps": 4}
    for seed in repair_space.seeds(p, inner)[:2]:  # B row-major (or kept) and K-major
        config = {**seed, **small, **({"SPLIT_K": 2} if inner == "tiles" else {})}
        cand = Candidate(p, "triton_repair", config)
        assert static_violations(cand, "interpreter", 0) == []
        outs = []
        for seed_in in (11, 11, 12):  # back to back on the same inputs, then fresh ones
            inp = make_inputs(p, device, seed_in)
            assert torch.isnan(inp.out).all()
            make_callable(cand, inp)()
            err = rel_error(inp.out, reference_for(inp))
            assert err <= tolerance_for(p, config), (config, err)
            outs.append(inp.out.clone())
        assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("b_layout", ["row", "kmajor"])
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_repaired_cublas_is_correct_on_odd_shapes(b_layout: str, dtype: str,
                                                  device: str) -> None:
    # On the CPU "cublas" is torch.matmul on the same padded copies: what is checked here is
    # the repair around it (padding, K-major B, the padded C copied back).
    p = GemmProblem(33, 35, 37, dtype=dtype)
    cand = Candidate(p, "repaired", {"inner": "cublas", "b_layout": b_layout})
    for seed_in in (1, 2):
        inp = make_inputs(p, device, seed_in)
        call = make_callable(cand, inp)
        _poisoned(call.scratch)
        call()
        assert rel_error(inp.out, reference_for(inp)) <= tolerance_for(p, None)
        assert call.scratch.c is not None and call.scratch.c.shape == (33, 40 if dtype ==
                                                                         "fp16" else 36)


@pytest.mark.parametrize("b_layout", ["keep", "kmajor"])
def test_repaired_cublas_on_the_views_plan_copies_only_a(b_layout: str, device: str) -> None:
    p = GemmProblem(33, 40, 37, dtype="fp16")  # only A's rows (k=37) are unaligned
    cand = Candidate(p, "repaired", {"inner": "cublas", "b_layout": b_layout, "plan": "views"})
    inp = make_inputs(p, device, 4)
    call = make_callable(cand, inp)
    assert call.scratch.c is None and (call.scratch.b is None) == (b_layout == "keep")
    call()
    assert rel_error(inp.out, reference_for(inp)) <= tolerance_for(p, None)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_the_split_launch_copies_a_and_writes_the_k_tail(dtype: str, device: str) -> None:
    p = GemmProblem(37, 40, 45, dtype=dtype)  # fp16: k_al 40, tail 5; fp32: k_al 44, tail 1
    plan = RepairPlan.split_of(p)
    k_al, tail = plan.k, plan.tail
    assert (k_al, tail) == ((40, 5) if dtype == "fp16" else (44, 1))
    inp = make_inputs(p, device, 5)
    s = _poisoned(repair.allocate(plan, inp.a.device, inp.a.dtype, inp.out.dtype))
    assert s.b is None and s.c is None and s.a.shape == (37, 64)
    a_in, b_in = repair.repair(plan, inp.a, inp.b, s, inp.out)
    assert torch.equal(a_in, inp.a[:, :k_al]) and not s.a[:, k_al:].any()
    assert b_in.data_ptr() == inp.b.data_ptr() and tuple(b_in.shape) == (k_al, 40)
    tail_product = inp.a[:, k_al:].double() @ inp.b[k_al:].double()
    assert rel_error(inp.out, tail_product) <= tolerance_for(p, None)
    with pytest.raises(ValueError, match="out"):
        repair.repair(plan, inp.a, inp.b, s)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_repaired_cublas_on_the_split_plan_adds_the_aligned_product(dtype: str,
                                                                    device: str) -> None:
    p = GemmProblem(33, 40, 37, dtype=dtype)  # only A's rows (k=37) are unaligned
    cand = Candidate(p, "repaired", {"inner": "cublas", "b_layout": "keep", "plan": "split"})
    for seed_in in (6, 6, 7):
        inp = make_inputs(p, device, seed_in)
        call = make_callable(cand, inp)
        assert call.plan.tail == 37 - call.plan.k > 0 and call.scratch.b is None
        _poisoned(call.scratch)
        call()
        assert rel_error(inp.out, reference_for(inp)) <= tolerance_for(p, None)
    for bad in (GemmProblem(33, 35, 37, dtype="fp16"),  # B's rows unaligned too
                GemmProblem(33, 40, 37, dtype="fp16", layout_a="col"),  # A's rows are m long
                GemmProblem(33, 40, 5, dtype="fp16")):  # no aligned step of K
        with pytest.raises(InvalidConfig, match="split plan"):
            make_callable(Candidate(bad, "repaired", cand.config), make_inputs(bad, "cpu", 0))


def test_repair_configs_and_problems_that_cannot_run_are_refused() -> None:
    with pytest.raises(InvalidConfig, match="inner"):
        check_repaired_config({"inner": "magma", "b_layout": "row"})
    with pytest.raises(InvalidConfig, match="b_layout"):
        check_repaired_config({"inner": "cublas", "b_layout": "diagonal"})
    with pytest.raises(InvalidConfig, match="lacks"):
        check_repaired_config({"inner": "cutlass", "b_layout": "row"})  # no op
    with pytest.raises(InvalidConfig, match="padded plan only"):
        check_repaired_config({"inner": "cutlass", "b_layout": "row", "plan": "views",
                               "op": "x", "raster": "heuristic", "swizzle": 1, "splits": 1})
    with pytest.raises(InvalidConfig, match="plan must be"):
        check_repaired_config({"inner": "cublas", "b_layout": "row", "plan": "sparse"})
    with pytest.raises(InvalidConfig, match="padded plan only"):
        check_repaired_config({"inner": "cutlass", "b_layout": "keep", "plan": "split",
                               "op": "x", "raster": "heuristic", "swizzle": 1, "splits": 1})
    with pytest.raises(InvalidConfig, match="keep"):
        check_repaired_config({"inner": "cublas", "b_layout": "row", "plan": "split"})
    aligned = GemmProblem(64, 64, 64, dtype="fp16")
    for backend in ("repaired", "triton_repair"):
        with pytest.raises(Unsupported, match="nothing to repair"):
            check_supported(backend, aligned)
        with pytest.raises(Unsupported, match="batch 1"):
            check_supported(backend, GemmProblem(33, 35, 37, batch=2, dtype="fp16"))
    p = GemmProblem(33, 35, 37, dtype="fp16")  # n=35: B's rows are unaligned too
    inp = make_inputs(p, "cpu", 0)
    assert b_layouts(p, padded=False) == ("row", "kmajor")
    row = {**repair_space.seeds(p, "tiles")[0], "B_LAYOUT": "row"}
    assert make_callable(Candidate(p, "triton_repair", row), inp).plan.copied == ("A", "B")
    with pytest.raises(InvalidConfig, match="b_layout"):  # an unaligned B cannot stay
        make_callable(Candidate(p, "triton_repair", {**row, "B_LAYOUT": "keep"}), inp)
    with pytest.raises(InvalidConfig, match="C in place"):  # n=35: C's rows are unaligned
        make_callable(Candidate(p, "repaired", {"inner": "cublas", "b_layout": "row",
                                                "plan": "views"}), inp)
    with pytest.raises(InvalidConfig, match="INNER"):
        make_callable(Candidate(p, "triton_repair", {**row, "INNER": "cublas"}), inp)
    if not torch.cuda.is_available():
        with pytest.raises(Unsupported, match="CUDA"):
            make_callable(Candidate(p, "repaired", {"inner": "cutlass", "b_layout": "row",
                                                    "op": "x", "raster": "heuristic",
                                                    "swizzle": 1, "splits": 1}), inp)
