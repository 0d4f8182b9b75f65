"""The hard-shape kernels on the shapes of ``docs/benchmarks/gemm_hard.json`` (bf16), through
the worker's own path (``workers.execute``: static check, fresh random inputs, a NaN-poisoned
output, the float64 reference, then timing), and the kernels directly for what that path does
not show: bitwise-equal results back to back (the fixed-order reductions), the skinny barrier's
refusal of a grid larger than the SMs, and the repair's scratch bound.

- alignment repair: ``triton_repair`` (tiled and stream-K inner kernels, B row-major or kept
  and K-major) and ``repaired`` (cuBLAS on the padded copies, on the views plan's and on the
  split plan's, where only A is copied and the K tail's product goes to C first; CUTLASS too,
  ``slow``: it builds an operation unless ``KS_CUTLASS_CACHE`` has it) on 999x2047x1537,
  4000x4000x4001, 511x1024x4097;
- stream-K (``triton_streamk``) on 192x6144x6144, 320x4096x12288 and the public
  1000x3000x2000, TMA and pointer loads;
- the skinny tier (``triton_skinny``) on 128x128x262144 and 32x512x98304, its seeds for this
  GPU's SM count, barrier, tagged and two launches."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernel_templates.errors import Unsupported
from kernel_templates.gemm import skinny, streamk
from kernel_templates.gemm.host import sm_count
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for, rel_error
from search.kinds.gemm import repair_space, skinny_space, streamk_space
from search.kinds.gemm.alignment import RepairPlan, b_layouts, split_applies, unaligned
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status
from workers.execute import execute

pytestmark = pytest.mark.gpu

OPTS = {"target_ms": 5.0, "warmup_ms": 2.0, "min_reps": 3, "max_reps": 50}
TOL = 1e-2  # bf16

UNALIGNED = [GemmProblem(999, 2047, 1537), GemmProblem(4000, 4000, 4001),
             GemmProblem(511, 1024, 4097)]
MID_M = [GemmProblem(192, 6144, 6144), GemmProblem(320, 4096, 12288),
         GemmProblem(1000, 3000, 2000)]
LONG_K = [GemmProblem(128, 128, 262144), GemmProblem(32, 512, 98304)]


def ids(p: GemmProblem) -> str:
    return f"{p.m}x{p.n}x{p.k}"


def measured(problem: GemmProblem, backend: str, config: dict[str, Any]) -> Measurement:
    got = Measurement.from_dict(execute(Candidate(problem, backend, config).to_dict(), OPTS))
    assert got.status == Status.OK, (backend, config, got.error)
    assert got.median_us and got.median_us > 0 and got.rel_error is not None
    return got


# -- alignment repair ----------------------------------------------------------------------------
@pytest.mark.parametrize("problem", UNALIGNED, ids=ids)
def test_repaired_cublas_is_correct(problem: GemmProblem) -> None:
    for layout in ("row", "kmajor"):
        measured(problem, "repaired", {"inner": "cublas", "b_layout": layout})
    if "C" not in unaligned(problem):  # cuBLAS on the views plan too
        for layout in b_layouts(problem, padded=False):
            measured(problem, "repaired", {"inner": "cublas", "b_layout": layout,
                                           "plan": "views"})


@pytest.mark.parametrize("problem", UNALIGNED[1:], ids=ids)
def test_repaired_cublas_on_the_split_plan_is_correct(problem: GemmProblem) -> None:
    # only A's rows unaligned: A's first k_al columns copied, the K tail's product written to C
    # in the same launch, then cuBLAS adds the aligned product (B read in place)
    assert split_applies(problem)
    config = {"inner": "cublas", "b_layout": "keep", "plan": "split"}
    got = measured(problem, "repaired", config)
    assert got.rel_error <= TOL
    plan = RepairPlan.split_of(problem)
    assert plan.tail == 1 and plan.b_buf is None
    from kernel_templates.registry import make_callable

    for seed in (41, 41, 42):  # back to back and fresh inputs, into NaN-poisoned outputs
        inp = make_inputs(problem, "cuda", seed)
        make_callable(Candidate(problem, "repaired", config), inp)()
        torch.cuda.synchronize()
        assert rel_error(inp.out, reference_for(inp)) <= TOL


@pytest.mark.parametrize("inner", repair_space.INNERS)
@pytest.mark.parametrize("problem", UNALIGNED, ids=ids)
def test_triton_repair_is_correct(problem: GemmProblem, inner: str) -> None:
    for config in repair_space.seeds(problem, inner)[:2]:  # the two B layouts
        measured(problem, "triton_repair", config)


@pytest.mark.slow
@pytest.mark.parametrize("problem", UNALIGNED[:1], ids=ids)
def test_repaired_cutlass_is_correct(problem: GemmProblem) -> None:
    from kernel_templates.gemm import cutlass as kc
    from search.kinds.gemm import cutlass_space
    from search.kinds.gemm.alignment import RepairPlan

    missing = kc.cutlass_available()
    if missing:
        pytest.skip(missing)
    inner = RepairPlan.of(problem, "kmajor", padded=True).inner
    ops = kc.ops_for(inner)
    seed = cutlass_space.seeds(inner, ops, n=1, gpu="H100_SXM")[0]
    built = kc.build([o for o in ops if o.name == seed["op"]])
    assert not built.errors, {k: str(v)[-1500:] for k, v in built.errors.items()}
    measured(problem, "repaired", {"inner": "cutlass", "b_layout": "kmajor", **seed})


def test_the_repair_refuses_scratch_over_its_share_of_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_templates.gemm import repair

    problem = UNALIGNED[0]
    monkeypatch.setattr(repair, "MAX_SCRATCH_SHARE", 1e-6)
    got = Measurement.from_dict(execute(Candidate(
        problem, "repaired", {"inner": "cublas", "b_layout": "row"}).to_dict(), OPTS))
    assert got.status == Status.UNSUPPORTED and "scratch" in (got.error or "")


# -- stream-K -----------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", MID_M, ids=ids)
def test_stream_k_seeds_are_correct(problem: GemmProblem) -> None:
    for config in streamk_space.seeds(problem)[:3]:
        measured(problem, "triton_streamk", config)


@pytest.mark.parametrize("loads", ["auto", "pointer"])
@pytest.mark.parametrize("problem", MID_M[:2], ids=ids)
def test_stream_k_is_bitwise_repeatable(problem: GemmProblem, loads: str) -> None:
    # the first seed these loads can run (stacked tiles need TMA)
    config = next({**s, "LOADS": loads} for s in streamk_space.seeds(problem)
                  if loads != "pointer" or s.get("STACK", 1) == 1)
    repeatable(problem, config)


@pytest.mark.parametrize(("order", "stack", "idle"), [("lockstep", 3, 4), ("rows", 2, 0),
                                                      ("columns", 2, 4), ("lockstep", 1, 0)])
def test_stacked_tiles_and_lockstep_are_right_and_repeatable_on_ragged_tiles(
        order: str, stack: int, idle: int) -> None:
    # 150 rows: one tall tile of 3 x 64 rows (the last m-tile mostly past m) or two of 2 x 64;
    # 4104 columns: a ragged last tile column
    problem = GemmProblem(150, 4104, 4096)
    config = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, num_warps=4, num_stages=5,
                  ORDER=order, STACK=stack, IDLE_SMS=idle)
    measured(problem, "triton_streamk", config)
    repeatable(problem, config)


def repeatable(problem: GemmProblem, config: dict[str, Any]) -> None:
    for seed in (21, 22):
        inp = make_inputs(problem, "cuda", seed)
        ref = reference_for(inp)
        again = torch.full_like(inp.out, float("nan"))
        for _ in range(3):  # launches back to back, each raising its flags to a new epoch
            streamk.matmul_streamk(inp.a, inp.b, config, out=inp.out)
        streamk.matmul_streamk(inp.a, inp.b, config, out=again)
        torch.cuda.synchronize()
        assert rel_error(inp.out, ref) <= TOL
        assert torch.equal(inp.out, again)


# -- the skinny tier ----------------------------------------------------------------------------
@pytest.mark.parametrize("problem", LONG_K, ids=ids)
def test_skinny_seeds_for_this_gpu_are_correct_and_repeatable(problem: GemmProblem) -> None:
    sms = sm_count(torch.device("cuda"))
    seeds = skinny_space.seeds(problem, sms)
    assert any(s["MODE"] == "barrier" for s in seeds)
    tagged = [s for s in seeds if s["MODE"] == "tagged"]
    assert tagged
    for config in seeds[:2] + tagged + [s for s in seeds if s["MODE"] == "two_launch"][:1]:
        measured(problem, "triton_skinny", config)
        inp = make_inputs(problem, "cuda", 31)
        again = torch.full_like(inp.out, float("nan"))
        skinny.matmul_skinny(inp.a, inp.b, config, out=inp.out)
        skinny.matmul_skinny(inp.a, inp.b, config, out=again)
        torch.cuda.synchronize()
        assert torch.equal(inp.out, again), config


@pytest.mark.parametrize("problem", LONG_K, ids=ids)
@pytest.mark.parametrize("tma", [0, 1])
def test_the_tagged_reduction_is_right_launch_after_launch(problem: GemmProblem,
                                                           tma: int) -> None:
    # back to back on the same and on fresh inputs: a word of an earlier launch (another
    # epoch) must never be summed, and the sum is bitwise the same each time
    bm = 32 if problem.m == 32 else 64
    config = dict(BLOCK_M=bm, BLOCK_N=64, BLOCK_K=128, SPLIT_K=16 if bm == 32 else 33,
                  num_warps=2 if bm == 32 else 4, num_stages=4, MODE="tagged", TMA=tma)
    first = None
    for seed in (51, 52, 51, 52, 51):
        inp = make_inputs(problem, "cuda", seed)
        skinny.matmul_skinny(inp.a, inp.b, config, out=inp.out)
        torch.cuda.synchronize()
        assert rel_error(inp.out, reference_for(inp)) <= TOL, seed
        if seed == 51:
            first = inp.out.clone() if first is None else first
            assert torch.equal(inp.out, first)


def test_the_skinny_barrier_refuses_a_grid_larger_than_the_sms() -> None:
    problem = LONG_K[0]
    sms = sm_count(torch.device("cuda"))
    config = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, SPLIT_K=256, num_warps=4,
                  num_stages=4, MODE="barrier", TMA=0)
    assert 4 * 256 > sms
    inp = make_inputs(problem, "cuda", 0)
    for mode in ("barrier", "tagged"):
        with pytest.raises(Unsupported, match="programs"):
            skinny.matmul_skinny(inp.a, inp.b, {**config, "MODE": mode}, out=inp.out)
