"""Static feasibility of an attention configuration: reject it before it costs compile or GPU
time. Each rule returns the reason it rejects, recorded with the ``invalid`` trial."""

from __future__ import annotations

from typing import Any

from search.kinds.attention.space import DECODE, DECODE_MAX_ROWS, FLASH, packed_rows
from search.kinds.attention.spec import DTYPE_BYTES, AttentionProblem
from search.limits import DeviceLimits

__all__ = ["smem_bytes", "violations"]

#: fp32 registers per thread the accumulators may take before the kernel spills heavily.
_MAX_ACC_REGS = 256


def _pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


def _rows(problem: AttentionProblem, config: dict[str, Any], tier: str) -> int:
    """Query rows one program holds: ``BLOCK_M`` (flash) or the packed heads (decode)."""
    return int(config["BLOCK_M"]) if tier == FLASH else packed_rows(problem)


def smem_bytes(problem: AttentionProblem, config: dict[str, Any], tier: str) -> int:
    """Shared memory of one program: its query tile, and ``num_stages`` buffers of a key and a
    value tile (counted in full, as the GEMM rule does, to stay on the safe side of the
    compiler's own check; decode runs two stages)."""
    elt = DTYPE_BYTES[problem.dtype]
    stages = max(1, int(config.get("num_stages", 2)))
    rows, bn = _rows(problem, config, tier), int(config["BLOCK_N"])
    return (rows * problem.d + stages * 2 * bn * problem.d) * elt


def violations(problem: AttentionProblem, config: dict[str, Any], tier: str,
               limits: DeviceLimits) -> list[str]:
    """Every rule ``config`` of ``tier`` breaks for ``problem`` under ``limits`` (empty:
    feasible)."""
    keys = ("BLOCK_M", "BLOCK_N", "num_warps") if tier == FLASH else \
        ("NUM_SPLITS", "BLOCK_N", "num_warps")
    out = [f"{k}={config[k]} is not a power of two" for k in keys if not _pow2(int(config[k]))]
    if out:
        return out
    bn, warps = int(config["BLOCK_N"]), int(config["num_warps"])
    rows = _rows(problem, config, tier)
    if tier == DECODE:
        if rows > DECODE_MAX_ROWS:
            out.append(f"{problem.group} query heads x s_q={problem.s_q} pack {rows} rows into "
                       f"a program, over {DECODE_MAX_ROWS}")
        per_split = -(-problem.s_kv // int(config["NUM_SPLITS"]))
        if config["NUM_SPLITS"] > 1 and per_split < bn:
            out.append(f"NUM_SPLITS={config['NUM_SPLITS']} leaves {per_split} keys per split, "
                       f"under BLOCK_N={bn}")
    smem = smem_bytes(problem, config, tier)
    if smem > limits.smem_per_block:
        out.append(f"shared memory {smem} B (d={problem.d}, {rows}x{bn} blocks, "
                   f"{config.get('num_stages', 2)} stages) is over the device limit "
                   f"{limits.smem_per_block} B")
    # The output accumulator (rows x d) and the score tile (rows x BLOCK_N), both fp32, are
    # spread over the threads of the program.
    threads = 32 * warps
    regs = (rows * problem.d + rows * bn) // threads
    if regs > _MAX_ACC_REGS:
        out.append(f"accumulators {rows}x{problem.d} and {rows}x{bn} need {regs} fp32 "
                   f"registers per thread with num_warps={warps} (limit {_MAX_ACC_REGS})")
    if warps > limits.max_warps:
        out.append(f"num_warps={warps} is over {limits.max_warps}")
    # Under four score elements per thread, most warps of the program idle.
    if rows * bn < 4 * threads:
        out.append(f"a {rows}x{bn} score tile is too small for {warps} warps")
    return out
