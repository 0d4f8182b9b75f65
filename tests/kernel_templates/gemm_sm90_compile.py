"""Compile the new GEMM kernels for sm_90 without a GPU and print, as JSON, the global-memory
and atomic instructions of each case's PTX (run by ``test_sm90_compile`` in a process of its
own: the test session runs Triton in its interpreter, whose kernels cannot be compiled).

    python -m tests.kernel_templates.gemm_sm90_compile
    python -m tests.kernel_templates.gemm_sm90_compile --seeds 192x6144x6144 32x512x98304

(the second form: the shared memory of the stream-K and skinny seeds of those shapes)
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
                "stride_cm", "stride_cn", "ITERS_PER_TILE", "Q", "E", "UNITS")
REPAIR_INTS = ("A_SR", "A_SC", "a_sld", "A_DR", "A_DC", "a_dld", "TILES_A", "B_SR", "B_SC",
               "b_sld", "B_DR", "B_DC", "b_dld")


def compile_sm90(fn: Any, types: dict[str, str], consts: dict[str, Any], aligned: list[str],
                 **options: Any) -> Any:
    """``fn`` compiled for sm_90 (``.asm["ptx"]``, ``.metadata.shared``: its shared memory in
    bytes); ``aligned``: the arguments marked 16-divisible, as Triton's JIT marks 16-byte
    aligned pointers and integers divisible by 16."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {**types, **dict.fromkeys(consts, "constexpr")}
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn=fn, signature=sig, attrs=attrs,
                    constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def compile_ptx(fn: Any, types: dict[str, str], consts: dict[str, Any], aligned: list[str],
                **options: Any) -> str:
    """``fn``'s PTX for sm_90 (as ``compile_sm90``)."""
    return compile_sm90(fn, types, consts, aligned, **options).asm["ptx"]


def ops(ptx: str) -> dict[str, int]:
    """How often each global load/store (volatile and relaxed ones too), atomic, TMA and
    tensor-core (wgmma, mma.sync) instruction appears."""
    pattern = (r"\b(?:ld\.global|st\.global|ld\.volatile\.global|st\.relaxed|atom"
               r"|cp\.async\.bulk\.tensor|wgmma\.mma_async|mma\.sync)[.\w]*")
    return dict(collections.Counter(re.findall(pattern, ptx)))


def cases() -> dict[str, dict[str, int]]:
    from kernel_templates.gemm import repair, streamk

    out: dict[str, dict[str, int]] = {}
    sk = streamk._streamk_kernel
    base = {"c_ptr": "*bf16", "ws_ptr": "*fp32", "flag_ptr": "*i32",
            **dict.fromkeys(STREAMK_INTS, "i32")}
    consts = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, COLUMNS=False,
                  LOCKSTEP=False, STACK=1, TMA=True, A_COL=False,
                  B_COL=True, EVEN_K=True, EVEN_MN=False, INPUT_PRECISION="tf32",
                  SPIN=1 << 20, FORWARD=False)
    out["streamk_tma"] = ops(compile_ptx(
        sk, {"a": "tensordesc<bf16[128, 64]>", "b": "tensordesc<bf16[128, 64]>", **base},
        consts, ["c_ptr", "ws_ptr", "flag_ptr"], num_warps=8, num_stages=3))
    # three stacked 64-row m-tiles in lockstep order, as the mid-m seeds run
    out["streamk_stacked"] = ops(compile_ptx(
        sk, {"a": "tensordesc<bf16[64, 64]>", "b": "tensordesc<bf16[64, 64]>", **base},
        {**consts, "BLOCK_M": 64, "BLOCK_N": 64, "GROUP_M": 1, "B_COL": False,
         "LOCKSTEP": True, "STACK": 3, "FORWARD": True},
        ["c_ptr", "ws_ptr", "flag_ptr"], num_warps=4, num_stages=6))
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
    for mode in ("barrier", "tagged"):
        out[f"skinny_{mode}"] = ops(skinny_compiled(dict(
            BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, SPLIT_K=33, num_warps=4, num_stages=5,
            MODE=mode, TMA=0)).asm["ptx"])
    # 32x512x98304's 32-row tile through TMA: as it is (mma.sync) and swapped (wgmma)
    for swap in (0, 1):
        out[f"skinny_tma_swap_{swap}"] = ops(skinny_tma_compiled(dict(
            BLOCK_M=32, BLOCK_N=64, BLOCK_K=256, SPLIT_K=16, num_warps=4, num_stages=3,
            MODE="barrier", TMA=1, SWAP=swap)).asm["ptx"])
    return out


def streamk_shared(config: dict[str, Any], tma: bool = True) -> int:
    """Shared memory (bytes) of the stream-K kernel under ``config`` for bf16 operands on
    sm_90 (TMA loads, or pointer loads of row-major operands)."""
    from kernel_templates.gemm import streamk

    cfg = streamk.check_streamk_config(config)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    base = {"c_ptr": "*bf16", "ws_ptr": "*fp32", "flag_ptr": "*i32",
            **dict.fromkeys(STREAMK_INTS, "i32")}
    lockstep = cfg["ORDER"] == "lockstep"
    consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"],
                  COLUMNS=cfg["ORDER"] == "columns", LOCKSTEP=lockstep, STACK=cfg["STACK"],
                  TMA=tma, A_COL=False, B_COL=False, EVEN_K=True, EVEN_MN=False,
                  INPUT_PRECISION="tf32", SPIN=1 << 20, FORWARD=lockstep)
    if tma:
        types = {"a": f"tensordesc<bf16[{bm}, {bk}]>", "b": f"tensordesc<bf16[{bk}, {bn}]>"}
        aligned = ["c_ptr", "ws_ptr", "flag_ptr"]
    else:
        types = {"a": "*bf16", "b": "*bf16"}
        aligned = ["a", "b", "c_ptr", "ws_ptr", "flag_ptr", "stride_am", "stride_bk"]
    return compile_sm90(streamk._streamk_kernel, {**types, **base}, consts, aligned,
                        num_warps=cfg["num_warps"],
                        num_stages=cfg["num_stages"]).metadata.shared


def _skinny_common(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str],
                                                    dict[str, Any]]:
    """``config`` checked, the argument types and the constants both skinny kernels take
    (bf16, the workspace and counter types and the reduction's share as the launcher sets
    them)."""
    import triton

    from kernel_templates.gemm import skinny

    cfg = skinny.check_skinny_config(config)
    tagged = cfg["MODE"] == "tagged"
    growing = cfg["MODE"] == "barrier" and skinny.GROWING_BARRIER
    types = {"c_ptr": "*bf16", "ws_ptr": "*i64" if tagged else "*fp32",
             "cnt_ptr": "*i64" if tagged or growing else "*i32",
             **dict.fromkeys(("EPOCH", "M", "N", "K", "K_PER_SPLIT", "stride_cm"), "i32")}
    split = cfg["SPLIT_K"]
    share = triton.cdiv(cfg["BLOCK_M"] * cfg["BLOCK_N"], split)
    block = triton.next_power_of_2(share)
    chunk = 1 << (max(1, min(split, 4096 // block)).bit_length() - 1)
    consts = dict(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                  SPLIT_K=split, TILES_N=4, MODE=skinny._MODE_ID[cfg["MODE"]],
                  SPIN=1 << 20, CHUNK=chunk, SHARE=share, SHARE_BLOCK=block,
                  K_BLOCK=triton.next_power_of_2(split), FENCE=True,
                  BARRIER_FENCE=False, GROWING=skinny.GROWING_BARRIER,
                  PAIRS=skinny.TAGGED_PAIRS, stride_cn=1)
    return cfg, types, consts


def skinny_compiled(config: dict[str, Any]) -> Any:
    """The skinny kernel's pointer path compiled under ``config`` (its ``MODE`` included) for
    bf16 row-major operands on sm_90."""
    from kernel_templates.gemm import skinny

    cfg, types, consts = _skinny_common(config)
    # unit strides are constants, as the JIT specializes an integer argument equal to 1
    types.update({"a_ptr": "*bf16", "b_ptr": "*bf16", "stride_am": "i32", "stride_bk": "i32"})
    consts.update(EVEN_K=True, EVEN_MN=True, INPUT_PRECISION="tf32", stride_ak=1,
                  stride_bn=1)
    aligned = ["a_ptr", "b_ptr", "c_ptr", "ws_ptr", "cnt_ptr", "stride_am", "stride_bk",
               "K_PER_SPLIT"]
    return compile_sm90(skinny._skinny_kernel, types, consts, aligned,
                        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


def skinny_tma_compiled(config: dict[str, Any]) -> Any:
    """The skinny kernel's TMA path (``SWAP`` as ``config`` says) compiled under ``config`` for
    bf16 row-major operands on sm_90."""
    from kernel_templates.gemm import skinny

    cfg, types, consts = _skinny_common(config)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    types.update({"a_desc": f"tensordesc<bf16[{bm}, {bk}]>",
                  "b_desc": f"tensordesc<bf16[{bk}, {bn}]>"})
    consts.update(A_COL=False, B_COL=False, SWAP=bool(cfg["SWAP"]))
    return compile_sm90(skinny._skinny_tma_kernel, types, consts,
                        ["c_ptr", "ws_ptr", "cnt_ptr"], num_warps=cfg["num_warps"],
                        num_stages=cfg["num_stages"])


def skinny_shared(config: dict[str, Any]) -> int:
    """Shared memory (bytes) of ``config``'s kernel: the TMA path where ``TMA`` is 1, else the
    pointer path."""
    if config.get("TMA", 1):
        return skinny_tma_compiled(config).metadata.shared
    return skinny_compiled(config).metadata.shared


def seed_shared(shapes: list[tuple[int, int, int]]) -> dict[str, int]:
    """Shared memory of every stream-K and skinny seed (bf16) of ``shapes`` whose tier applies
    on 132 SMs, keyed ``"tier m x n x k #i"``."""
    from search.kinds.gemm import skinny_space, streamk_space
    from search.kinds.gemm.spec import GemmProblem

    out: dict[str, int] = {}
    for m, n, k in shapes:
        p = GemmProblem(m, n, k, dtype="bf16")
        if streamk_space.applies(p, 132)[0]:
            for i, s in enumerate(streamk_space.seeds(p)):
                out[f"stream_k {m}x{n}x{k} #{i}"] = streamk_shared(s)
        if skinny_space.applies(p, 132)[0]:
            for i, s in enumerate(skinny_space.seeds(p, 132)):
                out[f"skinny {m}x{n}x{k} #{i}"] = skinny_shared(s)
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    if sys.argv[1:2] == ["--seeds"]:
        shapes = [tuple(int(x) for x in a.split("x")) for a in sys.argv[2:]]
        print(json.dumps(seed_shared(shapes)))  # type: ignore[arg-type]
    else:
        print(json.dumps(cases()))
