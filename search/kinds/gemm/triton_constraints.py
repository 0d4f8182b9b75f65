"""Static feasibility: reject a configuration before it costs compile or GPU time.

Each rule returns a reason string when it rejects, so a rejected configuration is recorded as
``invalid`` with the rule that rejected it.
"""

from __future__ import annotations

from typing import Any

from search.kinds.gemm.cluster import cluster_violations
from search.kinds.gemm.spec import DTYPE_BYTES, GemmProblem
from search.limits import DeviceLimits


def _pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


def smem_bytes(problem: GemmProblem, config: dict[str, Any]) -> int:
    """Shared memory of the software pipeline: ``num_stages`` buffers of an A and a B tile."""
    elt = DTYPE_BYTES[problem.dtype]
    # Triton keeps num_stages - 1 tiles in flight plus the one being consumed; count num_stages
    # buffers to stay on the safe side of the compiler's own check.
    return config["num_stages"] * (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * elt


def violations(problem: GemmProblem, config: dict[str, Any], limits: DeviceLimits) -> list[str]:
    """Every rule ``config`` breaks for ``problem`` under ``limits`` (empty: feasible)."""
    out: list[str] = []
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps"):
        if not _pow2(int(config[name])):
            out.append(f"{name}={config[name]} is not a power of two")
    if out:
        return out
    bm, bn, bk, sk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["SPLIT_K"]
    # A tile much larger than the problem only wastes work; allow one step of padding.
    if bm > 16 and bm >= 2 * _ceil_pow2(problem.m):
        out.append(f"BLOCK_M={bm} is over twice m={problem.m} rounded up to a power of two")
    if bn > 32 and bn >= 2 * _ceil_pow2(problem.n):
        out.append(f"BLOCK_N={bn} is over twice n={problem.n} rounded up to a power of two")
    k_per_split = -(-problem.k // sk)
    if sk > 1 and k_per_split < bk:
        out.append(f"SPLIT_K={sk} leaves {k_per_split} of k per split, under BLOCK_K={bk}")
    if bk > 32 and bk >= 2 * _ceil_pow2(problem.k):
        out.append(f"BLOCK_K={bk} is over twice k={problem.k} rounded up to a power of two")
    smem = smem_bytes(problem, config)
    if smem > limits.smem_per_block:
        out.append(f"shared memory {smem} B for {config['num_stages']} stages is over the "
                   f"device limit {limits.smem_per_block} B")
    # Registers: the fp32 accumulator is spread over the threads of the block; past ~256 fp32
    # registers per thread for it alone the kernel spills heavily.
    threads = 32 * config["num_warps"]
    if bm * bn / threads > 256:
        out.append(f"accumulator {bm}x{bn} needs {bm * bn // threads} fp32 registers per thread "
                   f"with num_warps={config['num_warps']} (limit 256)")
    if config["num_warps"] > limits.max_warps:
        out.append(f"num_warps={config['num_warps']} is over {limits.max_warps}")
    # Under four output elements per thread, most warps of the block idle.
    if bm * bn < 4 * threads:
        out.append(f"tile {bm}x{bn} is too small for {config['num_warps']} warps")
    # 2-CTA clusters: where Triton computes them right (search.kinds.gemm.cluster); the
    # persistent kernel and LOADS="tma" load A through TMA, the automatic loads fall back to
    # pointers for a column-major A
    tma_a = bool(config.get("PERSISTENT", 0)) or config.get("LOADS") == "tma"
    out += cluster_violations(problem, config, tma_a=tma_a)
    if int(config.get("num_ctas", 1)) > 1 and sk != 1:
        out.append(f"num_ctas={config['num_ctas']} needs SPLIT_K=1, got SPLIT_K={sk}")
    return out


def _ceil_pow2(x: int) -> int:
    p = 1
    while p < x:
        p *= 2
    return p
