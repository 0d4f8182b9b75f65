"""The hard-shape backends in the registry (kernel_templates/gemm/hard_backends.py): registered
with what a worker needs, and the skinny split-K kernel reached as a search tier."""

from __future__ import annotations

import pytest
import torch

from kernel_templates import registry
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for, rel_error, tolerance
from search.kinds.gemm import GEMM, skinny_space
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate

NEW = ("repaired", "triton_repair", "triton_streamk", "triton_skinny")


def test_every_gemm_backend_of_the_kind_is_registered() -> None:
    assert set(registry.backends("gemm")) == set(GEMM.backends)
    for backend in NEW:
        assert registry.warms_up("gemm", backend) is (backend != "repaired")
    prep = registry.preparer("gemm", "repaired")
    assert prep is not None
    p = GemmProblem(999, 2047, 1537)
    cutlass = Candidate(p, "repaired", {"inner": "cutlass", "b_layout": "row", "op": "op_x",
                                        "raster": "heuristic", "swizzle": 1, "splits": 1})
    assert prep.unit(cutlass) == "op_x"
    assert prep.unit(Candidate(p, "repaired", {"inner": "cublas", "b_layout": "row"})) is None
    assert prep.build([Candidate(p, "repaired", {"inner": "cublas", "b_layout": "row"})]) == {}


@pytest.mark.parametrize("mode", skinny_space.MODES)
@pytest.mark.parametrize(("m", "n", "k"), [(33, 65, 2049), (16, 64, 4096)])
def test_the_skinny_tier_runs_its_configs(mode: str, m: int, n: int, k: int,
                                          device: str) -> None:
    p = GemmProblem(m, n, k, dtype="fp16")
    config = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, SPLIT_K=4, num_warps=4, num_stages=2,
                  MODE=mode, TMA=0)
    cand = Candidate(p, "triton_skinny", config)
    assert registry.static_violations(cand, "interpreter", 0) == []
    outs = []
    for _ in range(2):
        inp = make_inputs(p, device, 7)
        registry.make_callable(cand, inp)()
        assert rel_error(inp.out, reference_for(inp)) <= tolerance(p)
        outs.append(inp.out.clone())
    assert torch.equal(outs[0], outs[1])  # both searched modes reduce in a fixed order


def test_the_skinny_tiers_static_rules_reach_the_worker() -> None:
    p = GemmProblem(128, 128, 262144)
    wide = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=256, SPLIT_K=512, num_warps=8, num_stages=6,
                MODE="barrier", TMA=0)
    reasons = registry.static_violations(Candidate(p, "triton_skinny", wide), "cuda", 232_448)
    assert any("SPLIT_K=512 is over" in r for r in reasons)  # 16x16 tile, 512 shares
    assert any("too small for 8 warps" in r for r in reasons)
