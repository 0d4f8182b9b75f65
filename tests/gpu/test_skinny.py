"""The skinny split-K kernel on the two memory-bound public shapes, beside ``gemm.py``'s best
configurations (``docs/notes/kernels.md``): two fresh input sets, each product written into a
NaN-poisoned output twice back to back, compared with the float64 reference; the deterministic
modes (``barrier``, ``two_launch``) give bitwise-equal results, and the skinny counters and
accumulators are zero afterwards."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernel_templates.gemm import skinny
from kernel_templates.gemm import triton as gemm
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_matmul, rel_error
from search.kinds.gemm.spec import GemmProblem
from tests.kernel_templates.skinny_check import clean

pytestmark = pytest.mark.gpu

TOL = 1e-2  # bf16 (kernel_templates.gemm.reference.BASE_TOLERANCE)


def sk(bm: int, bn: int, bk: int, split: int, w: int, s: int, mode: str = "barrier",
       tma: int = 1, swap: int = 0) -> dict[str, Any]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split, num_warps=w, num_stages=s,
                MODE=mode, TMA=tma, SWAP=swap)


def gm(bm: int, bn: int, bk: int, split: int, w: int, s: int) -> dict[str, int]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=split, num_warps=w,
                num_stages=s)


CASES: list[tuple[tuple[int, int, int], str, dict[str, Any]]] = [
    *(((16, 4096, 4096), "gemm", c) for c in (gm(16, 32, 256, 1, 4, 4), gm(16, 64, 128, 2, 4, 4),
                                              gm(16, 64, 256, 2, 4, 3))),
    *(((64, 64, 65536), "gemm", c) for c in (gm(64, 32, 128, 64, 4, 5),
                                             gm(64, 64, 128, 64, 4, 4),
                                             gm(64, 32, 256, 64, 4, 3))),
    *(((16, 4096, 4096), "skinny", c) for c in (
        sk(16, 32, 256, 1, 4, 4, tma=0), sk(16, 64, 128, 2, 4, 4, tma=0),
        sk(16, 64, 256, 2, 4, 3, tma=0), sk(16, 64, 128, 2, 4, 4),
        sk(16, 128, 128, 4, 4, 4, tma=0), sk(16, 256, 64, 8, 4, 5, tma=0),
        sk(16, 256, 64, 8, 4, 4), sk(16, 128, 128, 4, 4, 4, "atomic"),
        sk(16, 64, 128, 2, 4, 4, "two_launch", tma=0))),
    *(((64, 64, 65536), "skinny", c) for c in (
        sk(64, 64, 128, 128, 4, 4, tma=0), sk(64, 64, 64, 128, 4, 6, tma=0),
        sk(64, 32, 128, 64, 4, 5, tma=0), sk(64, 32, 64, 64, 4, 8, tma=0),
        sk(64, 64, 128, 128, 4, 4), sk(64, 32, 128, 64, 4, 5), sk(32, 64, 128, 64, 4, 5, tma=0),
        sk(64, 64, 128, 128, 8, 3, tma=0), sk(64, 64, 128, 128, 4, 4, "atomic", tma=0),
        sk(64, 64, 128, 256, 4, 3, "atomic"), sk(64, 64, 128, 128, 4, 4, "two_launch", tma=0))),
    # the swapped K loop (wgmma on the B tile): 16- and 32-row tiles, each reduction
    *(((16, 4096, 4096), "skinny", c) for c in (
        sk(16, 64, 128, 2, 4, 4, swap=1), sk(16, 128, 64, 4, 4, 5, "tagged", swap=1))),
    *(((64, 64, 65536), "skinny", c) for c in (
        sk(32, 64, 256, 64, 4, 3, swap=1), sk(32, 64, 128, 64, 4, 4, "tagged", swap=1),
        sk(32, 64, 128, 64, 4, 4, "two_launch", swap=1))),
    *(((32, 512, 98304), "skinny", c) for c in (
        sk(32, 64, 256, 16, 4, 3, swap=1), sk(32, 64, 128, 16, 4, 4, "tagged", swap=1))),
]


@pytest.mark.parametrize(("shape", "kind", "config"), CASES)
def test_skinny_and_gemm_are_correct_and_repeatable(shape: tuple[int, int, int], kind: str,
                                                    config: dict[str, Any]) -> None:
    m, n, k = shape
    problem = GemmProblem(m=m, n=n, k=k, dtype="bf16")
    run = skinny.matmul_skinny if kind == "skinny" else gemm.matmul
    deterministic = kind == "skinny" and config["MODE"] != "atomic"
    for seed in (11, 12):
        inp = make_inputs(problem, "cuda", seed)
        ref = reference_matmul(inp.a, inp.b)
        again = torch.full_like(inp.out, float("nan"))
        run(inp.a, inp.b, config, out=inp.out)
        run(inp.a, inp.b, config, out=again)  # back to back on the stream
        torch.cuda.synchronize()
        assert rel_error(inp.out, ref) <= TOL and rel_error(again, ref) <= TOL
        if deterministic:
            assert torch.equal(inp.out, again)
    assert clean("cuda")


@pytest.mark.parametrize("mode", ["tagged", "barrier"])
@pytest.mark.parametrize("swap", [0, 1])
def test_a_captured_graph_replays_right_on_new_inputs(mode: str, swap: int) -> None:
    # 32x512x98304's served tiles; each replay on freshly copied inputs must give their product
    # (a replayed epoch would let the tagged readers take the previous replay's partials)
    problem = GemmProblem(m=32, n=512, k=98304, dtype="bf16")
    config = sk(32, 64, 128, 16, 4 if swap else 2, 4, mode, swap=swap)
    inp = make_inputs(problem, "cuda", 21)
    skinny.matmul_skinny(inp.a, inp.b, config, out=inp.out)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        skinny.matmul_skinny(inp.a, inp.b, config, out=inp.out)
    for seed in (22, 23, 24):
        fresh = make_inputs(problem, "cuda", seed)
        inp.a.copy_(fresh.a)
        inp.b.copy_(fresh.b)
        inp.out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_error(inp.out, reference_matmul(fresh.a, fresh.b)) <= TOL, seed
    assert clean("cuda")
