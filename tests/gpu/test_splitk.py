"""Split-K on the GPU: the one-launch ("serial") reduction has programs of a tile meet through
counters, so a race shows up as a NaN, a large or moving error, or two calls on the same inputs
that differ. Each case runs on fresh random inputs into a NaN-poisoned output, twice per input
set (bitwise equal), and the counters are back at zero at the end. Each case runs in both
reduction modes (``SPLITK_MODE``: the one-launch ``serial`` and ``two_launch``; the defaults per
SPLIT_K are in ``docs/notes/kernels.md``, "One-launch split-K")."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernel_templates.gemm import triton as gemm
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_matmul, rel_error
from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_space import SPLITK_MODES

pytestmark = pytest.mark.gpu

REPS = 20


def cfg(bm: int, bn: int, bk: int, sk: int, w: int, s: int) -> dict[str, int]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=sk, num_warps=w,
                num_stages=s)


# (shape, config, loads): "auto" lets the template choose TMA, "pointer" forces pointer loads
CASES: list[tuple[tuple[int, int, int], dict[str, int], str]] = [
    ((16, 4096, 4096), cfg(16, 64, 128, 2, 4, 4), "auto"),
    ((16, 4096, 4096), cfg(16, 64, 128, 8, 4, 4), "auto"),
    ((16, 4096, 4096), cfg(16, 32, 128, 4, 4, 5), "pointer"),
    ((64, 64, 65536), cfg(64, 32, 128, 8, 4, 5), "auto"),
    ((64, 64, 65536), cfg(64, 32, 128, 64, 4, 5), "auto"),
    ((64, 64, 65536), cfg(64, 64, 128, 128, 4, 4), "auto"),
    ((64, 64, 65536), cfg(64, 64, 128, 64, 4, 4), "pointer"),
    ((1000, 3000, 2000), cfg(64, 64, 64, 4, 4, 4), "auto"),
    ((1000, 3000, 2000), cfg(64, 64, 64, 4, 4, 4), "pointer"),
    ((1000, 3000, 2000), cfg(128, 128, 64, 2, 8, 3), "auto"),
]


@pytest.mark.parametrize("mode", SPLITK_MODES)
@pytest.mark.parametrize(("shape", "config", "loads"), CASES)
def test_split_k_is_correct_and_repeatable(shape: tuple[int, int, int], config: dict[str, Any],
                                           loads: str, mode: str) -> None:
    m, n, k = shape
    config = {**config, "LOADS": loads, "SPLITK_MODE": mode}
    p = GemmProblem(m=m, n=n, k=k, dtype="bf16")
    errors = []
    for rep in range(REPS):
        inp = make_inputs(p, "cuda", 1000 + rep)  # the output comes poisoned with NaN
        ref = reference_matmul(inp.a, inp.b)
        gemm.matmul(inp.a, inp.b, config, out=inp.out)
        again = torch.full_like(inp.out, float("nan"))
        gemm.matmul(inp.a, inp.b, config, out=again)
        torch.cuda.synchronize()
        errors.append(rel_error(inp.out, ref))
        assert torch.equal(inp.out, again), f"rep {rep}: two calls on the same inputs differ"
    assert max(errors) < 5e-3, errors
    counters = gemm._COUNTERS.get(torch.device("cuda", torch.cuda.current_device()))
    assert counters is None or int(counters.count_nonzero()) == 0
