"""Static feasibility of an attention configuration: reject it before it costs compile or GPU
time. Each rule returns the reason it rejects, recorded with the ``invalid`` trial. The worker's
own static check (``kernel_templates/attention/triton_config.py``) applies these same rules.

Shared memory, as Triton 3.6 allocates it for sm_90 (``smem_bytes`` is checked against the
compiler's own figures in ``tests/kernel_templates/test_attention_sm90.py``): flash holds the
query tile and ``num_stages`` buffers of a key and a value tile, with ``TMA`` 1 KiB of
barriers more, and with ``TMA`` and ``PERSISTENT`` a staging tile of the output too; decode
holds its packed query tile, ``num_stages - 1`` key/value buffers (at least one) and, when
pipelined, the probabilities ``P`` for the second product.
"""

from __future__ import annotations

from typing import Any

from search.kinds.attention.space import DECODE, DECODE_MAX_ROWS, FLASH, packed_rows
from search.kinds.attention.spec import DTYPE_BYTES, AttentionProblem
from search.limits import DeviceLimits

__all__ = ["WS_REFUSED", "smem_bytes", "tma_tiling", "violations"]

#: fp32 registers per thread the accumulators may take before the kernel spills heavily.
_MAX_ACC_REGS = 256
#: Why ``WS=1`` is refused on CUDA devices (Triton 3.6, sm_90; pinned by
#: ``tests/kernel_templates/test_attention_ws.py``): warp specialisation of this loop is
#: Blackwell-only there, so with 8 warps the PTX is byte-identical to ``WS=0`` (a trial would
#: measure a duplicate), and with 4 warps the compiler aborts the process.
WS_REFUSED = ("WS=1: Triton 3.6 does not warp-specialise this loop on sm_90 (the code is "
              "identical to WS=0) and aborts the compiler with num_warps=4")


def _pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


def _rows(problem: AttentionProblem, config: dict[str, Any], tier: str) -> int:
    """Query rows one program holds: ``BLOCK_M`` (flash) or the packed heads (decode)."""
    return int(config["BLOCK_M"]) if tier == FLASH else packed_rows(problem)


def smem_bytes(problem: AttentionProblem, config: dict[str, Any], tier: str) -> int:
    """Shared memory of one program (the module docstring has the accounting; decode runs
    ``num_stages`` 2 unless its config says otherwise)."""
    elt = DTYPE_BYTES[problem.dtype]
    stages = max(1, int(config.get("num_stages", 2)))
    rows, bn, d = _rows(problem, config, tier), int(config["BLOCK_N"]), problem.d
    if tier == DECODE:
        return (rows * d + max(1, stages - 1) * 2 * bn * d + (rows * bn if stages > 1 else 0)
                ) * elt
    need = (rows * d + stages * 2 * bn * d) * elt
    if int(config.get("TMA", 0)):
        need += 1024
        if int(config.get("PERSISTENT", 0)):
            need += rows * d * elt
    return need


def tma_tiling(problem: AttentionProblem, block_m: int, block_n: int) -> str | None:
    """Why ``TMA=1`` cannot tile ``problem`` with these blocks (``None``: it can): the
    descriptors flatten the heads, so a tile must never cross into the next head's rows."""
    if problem.s_q % block_m or problem.s_kv % block_n:
        return (f"TMA=1 needs s_q % BLOCK_M == 0 and s_kv % BLOCK_N == 0 (a tile never "
                f"crosses into the next head); s_q={problem.s_q}, s_kv={problem.s_kv}, "
                f"BLOCK_M={block_m}, BLOCK_N={block_n}")
    return None


def _tma_rule(problem: AttentionProblem, config: dict[str, Any], limits: DeviceLimits
              ) -> list[str]:
    if not int(config.get("TMA", 0)):
        return []
    out = []
    if not limits.tma and limits.cc:
        out.append(f"TMA=1 needs sm_90 or newer; this device is cc {limits.cc}")
    tiling = tma_tiling(problem, int(config["BLOCK_M"]), int(config["BLOCK_N"]))
    return out + ([tiling] if tiling else [])


def violations(problem: AttentionProblem, config: dict[str, Any], tier: str,
               limits: DeviceLimits, mode: str = "") -> list[str]:
    """Every rule ``config`` of ``tier`` breaks for ``problem`` under ``limits`` (empty:
    feasible); ``mode`` is the worker's device mode where known (``"cuda"``)."""
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
    else:
        out += _tma_rule(problem, config, limits)
        if int(config.get("WS", 0)) and (limits.cc or mode == "cuda"):
            out.append(WS_REFUSED)
    smem = smem_bytes(problem, config, tier)
    if smem > limits.smem_per_block:
        out.append(f"shared memory {smem} B (d={problem.d}, {rows}x{bn} blocks, "
                   f"{config.get('num_stages', 2)} stages) is over the device limit "
                   f"{limits.smem_per_block} B")
    # The output accumulator (rows x d) and the score tile (rows x BLOCK_N), both fp32, are
    # spread over the threads of the program (registers: no limit on the interpreter).
    threads = 32 * warps
    regs = (rows * problem.d + rows * bn) // threads
    if regs > _MAX_ACC_REGS and mode != "interpreter":
        out.append(f"accumulators {rows}x{problem.d} and {rows}x{bn} need {regs} fp32 "
                   f"registers per thread with num_warps={warps} (limit {_MAX_ACC_REGS})")
    if warps > limits.max_warps:
        out.append(f"num_warps={warps} is over {limits.max_warps}")
    # Under four score elements per thread, most warps of the program idle.
    if rows * bn < 4 * threads:
        out.append(f"a {rows}x{bn} score tile is too small for {warps} warps")
    return out
