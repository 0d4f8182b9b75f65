"""Split-K on the GPU: the one-launch ("serial") reduction has programs of a tile meet through
counters, so a race shows up as a NaN, a large or moving error, or two calls on the same inputs
that differ. Each case runs on fresh random inputs into a NaN-poisoned output, twice per input
set (bitwise equal), and the counters are back at zero at the end. The modes are the template's
defaults for each SPLIT_K (``docs/notes/kernels.md``, "One-launch split-K")."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernel_templates.gemm import triton as gemm
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_matmul, rel_error
from search.kinds.gemm.spec import GemmProblem

pytestmark = pytest.mark.gpu

REPS = 20


def cfg(bm: int, bn: int, bk: int, sk: int, w: int, s: int) -> dict[str, int]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=sk, num_warps=w,
                num_stages=s)


# (shape, config, tma): tma None lets the template choose, False forces pointer loads
CASES: list[tuple[tuple[int, int, int], dict[str, int], bool | None]] = [
    ((16, 4096, 4096), cfg(16, 64, 128, 2, 4, 4), None),
    ((16, 4096, 4096), cfg(16, 64, 128, 8, 4, 4), None),
    ((16, 4096, 4096), cfg(16, 32, 128, 4, 4, 5), False),
    ((64, 64, 65536), cfg(64, 32, 128, 8, 4, 5), None),
    ((64, 64, 65536), cfg(64, 32, 128, 64, 4, 5), None),
    ((64, 64, 65536), cfg(64, 64, 128, 128, 4, 4), None),
    ((64, 64, 65536), cfg(64, 64, 128, 64, 4, 4), False),
    ((1000, 3000, 2000), cfg(64, 64, 64, 4, 4, 4), None),
    ((1000, 3000, 2000), cfg(64, 64, 64, 4, 4, 4), False),
    ((1000, 3000, 2000), cfg(128, 128, 64, 2, 8, 3), None),
]


@pytest.mark.parametrize(("shape", "config", "tma"), CASES)
def test_split_k_is_correct_and_repeatable(shape: tuple[int, int, int], config: dict[str, Any],
                                           tma: bool | None) -> None:
    m, n, k = shape
    p = GemmProblem(m=m, n=n, k=k, dtype="bf16")
    errors = []
    for rep in range(REPS):
        inp = make_inputs(p, "cuda", 1000 + rep)  # the output comes poisoned with NaN
        ref = reference_matmul(inp.a, inp.b)
        gemm.matmul(inp.a, inp.b, config, out=inp.out, tma=tma)
        again = torch.full_like(inp.out, float("nan"))
        gemm.matmul(inp.a, inp.b, config, out=again, tma=tma)
        torch.cuda.synchronize()
        errors.append(rel_error(inp.out, ref))
        assert torch.equal(inp.out, again), f"rep {rep}: two calls on the same inputs differ"
    assert max(errors) < 5e-3, errors
    counters = gemm._COUNTERS.get(torch.device("cuda", torch.cuda.current_device()))
    assert counters is None or int(counters.count_nonzero()) == 0
