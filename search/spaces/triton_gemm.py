"""Search space of the tiled Triton GEMM (``kernel_templates/triton/gemm.py``).

A configuration is a plain dict with the template's meta-parameters::

    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1,
     "num_warps": 8, "num_stages": 3}

Each dimension is a small typed fragment (power-of-two or enum); the static constraints in
``search.constraints`` reject what cannot compile or cannot help before anything reaches a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search.types import GemmProblem

PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "num_warps", "num_stages")


@dataclass(frozen=True)
class Choice:
    """One dimension: a name and the values it may take (ordered, small first)."""

    name: str
    values: tuple[int, ...]


def _up_to(values: tuple[int, ...], size: int) -> tuple[int, ...]:
    """The values no larger than ``size`` rounded up to a power of two (at least the smallest):
    a tile twice the problem's extent would only compute padding."""
    bound = 1 << max(0, size - 1).bit_length()
    return tuple(v for v in values if v <= bound) or values[:1]


def space(problem: GemmProblem) -> tuple[Choice, ...]:
    """The dimensions for ``problem``: tiles no larger than the problem, split-K only where K is
    long enough to split."""
    split_k = tuple(s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s == 1 or problem.k // s >= 256)
    return (
        Choice("BLOCK_M", _up_to((16, 32, 64, 128, 256), problem.m)),
        Choice("BLOCK_N", _up_to((32, 64, 128, 256), problem.n)),
        Choice("BLOCK_K", _up_to((32, 64, 128, 256), problem.k)),
        Choice("GROUP_M", (1, 4, 8, 16)),
        Choice("SPLIT_K", split_k),
        Choice("num_warps", (2, 4, 8)),
        Choice("num_stages", (2, 3, 4, 5, 6)),
    )


def seeds(problem: GemmProblem) -> list[dict[str, Any]]:
    """Known-good starting points (from the Triton matmul tutorial's configs and from the
    measurements under ``tests/data``): big tiles for big problems, split-K for skinny ones."""
    big = [
        dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8,
             num_stages=3),
        dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8,
             num_stages=4),
        dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8,
             num_stages=3),
        dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4,
             num_stages=4),
    ]
    # Measured best on an H100 (docs/notes/kernels.md): split 2 for 16xN, split 64 for long K.
    skinny = [
        dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=2, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=64, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=2, num_warps=4,
             num_stages=3),
        dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=128, GROUP_M=1, SPLIT_K=64, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, GROUP_M=1, SPLIT_K=2, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=64, num_warps=4,
             num_stages=3),
        dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=16, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4,
             num_stages=3),
    ]
    tiles_mn = (problem.m // 128 + 1) * (problem.n // 128 + 1)
    skinny_first = problem.m <= 128 or tiles_mn < 64
    ordered = skinny + big if skinny_first else big + skinny
    legal = {c.name: set(c.values) for c in space(problem)}
    return [s for s in ordered if all(s[p] in legal[p] for p in PARAMS)]
