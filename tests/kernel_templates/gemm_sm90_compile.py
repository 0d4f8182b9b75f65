"""Compile the new GEMM kernels for sm_90 without a GPU and print, as JSON, the global-memory
and atomic instructions of each case's PTX (run by ``test_sm90_compile`` in a process of its
own: the test session runs Triton in its interpreter, whose kernels cannot be compiled).

    python -m tests.kernel_templates.gemm_sm90_compile
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
from typing import Any

os.environ.pop("TRITON_INTERPRET", None)

STREAMK_INTS = ("EPOCH", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                "stride_cm", "stride_cn", "ITERS_PER_TILE", "Q", "E")
REPAIR_INTS = ("A_SR", "A_SC", "a_sld", "A_DR", "A_DC", "a_dld", "TILES_A", "B_SR", "B_SC",
               "b_sld", "B_DR", "B_DC", "b_dld")


def compile_ptx(fn: Any, types: dict[str, str], consts: dict[str, Any], aligned: list[str],
                **options: Any) -> str:
    """``fn``'s PTX for sm_90; ``aligned``: the arguments marked 16-divisible, as Triton's JIT
    marks 16-byte aligned pointers and integers divisible by 16."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {**types, **dict.fromkeys(consts, "constexpr")}
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn=fn, signature=sig, attrs=attrs,
                    constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]


def ops(ptx: str) -> dict[str, int]:
    """How often each global load/store, atomic and TMA/wgmma instruction appears."""
    pattern = r"\b(?:ld\.global|st\.global|atom|cp\.async\.bulk\.tensor|wgmma\.mma_async)[.\w]*"
    return dict(collections.Counter(re.findall(pattern, ptx)))


def cases() -> dict[str, dict[str, int]]:
    from kernel_templates.gemm import repair, streamk

    out: dict[str, dict[str, int]] = {}
    sk = streamk._streamk_kernel
    base = {"c_ptr": "*bf16", "ws_ptr": "*fp32", "flag_ptr": "*i32",
            **dict.fromkeys(STREAMK_INTS, "i32")}
    consts = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, TMA=True, A_COL=False,
                  B_COL=True, EVEN_K=True, EVEN_MN=False, INPUT_PRECISION="tf32",
                  SPIN=1 << 20, REVERSED=True)
    out["streamk_tma"] = ops(compile_ptx(
        sk, {"a": "tensordesc<bf16[128, 64]>", "b": "tensordesc<bf16[128, 64]>", **base},
        consts, ["c_ptr", "ws_ptr", "flag_ptr"], num_warps=8, num_stages=3))
    consts.update(TMA=False, B_COL=False, EVEN_K=False, BLOCK_M=64)
    out["streamk_pointer"] = ops(compile_ptx(
        sk, {"a": "*bf16", "b": "*bf16", **base}, consts,
        ["a", "b", "c_ptr", "ws_ptr", "flag_ptr", "stride_am", "stride_bk"],
        num_warps=4, num_stages=3))
    types = {**dict.fromkeys(("a_src", "a_dst", "b_src", "b_dst"), "*bf16"),
             **dict.fromkeys(REPAIR_INTS, "i32")}
    # A's source rows unaligned (k odd), its padded destination's leading dimension a multiple
    # of 8 only (the A_DIV hint); B's source (n = 4000) and destination as the JIT marks them
    for trans_b in (False, True):
        consts = dict(TRANS_A=False, TRANS_B=trans_b, BR=repair.COPY_BLOCK[0],
                      BC=repair.COPY_BLOCK[1], A_DIV=8, B_DIV=16)
        out[f"repair_trans_b_{int(trans_b)}"] = ops(compile_ptx(
            repair._repair_kernel, types, consts,
            ["a_src", "a_dst", "b_src", "b_dst", "b_sld", "B_SC", "b_dld", "B_DC"],
            num_warps=4))
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    print(json.dumps(cases()))
