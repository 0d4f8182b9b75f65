"""Compile the Triton fp8 GEMM template (``kernel_templates/gemm/fp8.py``) for sm_90 without a
GPU (``triton.compile`` with a CUDA target), one configuration per child process: a
configuration the compiler rejects may abort the process (an ``LLVM ERROR``), so only that
child goes down, and its stderr says why.

    python -m tests.kernel_templates.fp8_sm90_compile '{"BLOCK_M": 128, ...}' [true]
    python -m tests.kernel_templates.fp8_sm90_compile panel '{"BLOCK_R": 16, ...}'

The second form compiles the panel quantisation of both operands
(``fp8_quant._pair_panel_kernel``, bf16 in, A's K stride and B^T's row stride 1) and prints
its shared memory and what its PTX does (``cp.async`` copies, 128-bit global loads), and,
where Triton's ptxas is at hand, its registers and spills.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

SM90_TARGET = ("cuda", 90, 32)
INTS = ("M", "N", "K", "SB_LD", "stride_cm", "stride_cn")


def compile_fp8(config: dict[str, Any], row_scales: bool | str = False,
                out_dtype: str = "bf16") -> Any:
    """The fp8 template under a complete ``config`` compiled for sm_90: per-tensor scales (an
    fp8 problem's), per row and column (``row_scales`` true: a lowered candidate's) or in
    blocks (``row_scales="block"``, applied in the main loop), a bf16 output, the problem's
    sizes runtime values (multiples of the tiles)."""
    block = row_scales == "block"
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernel_templates.gemm import fp8

    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    fn = fp8._fp8_gemm_persistent_kernel if config["PERSISTENT"] else fp8._fp8_gemm_kernel
    tma_store = bool(config["TMA_STORE"])
    consts = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": config["GROUP_M"],
              "ROW_SCALES": bool(row_scales) and not block, "BLOCK_SCALES": block,
              "EVEN_MN": True, "IMPRECISE": None if config["FAST_ACC"] or block else bk,
              "TMA_STORE": tma_store, "SB_ROWS": 128}
    types = {"a_desc": f"tensordesc<fp8e4nv[{bm}, {bk}]>",
             "b_desc": f"tensordesc<fp8e4nv[{bn}, {bk}]>", "c_ptr": f"*{out_dtype}",
             "sa_ptr": "*fp32", "sb_ptr": "*fp32", **dict.fromkeys(INTS, "i32")}
    if tma_store:
        types["c_desc"] = f"tensordesc<{out_dtype}[{bm}, {bn}]>"
    else:
        consts["c_desc"] = None
    sig = {n: types.get(n, "constexpr") for n in fn.arg_names}
    aligned = ("c_ptr", "sa_ptr", "sb_ptr", "M", "N", "K", "stride_cm")
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn=fn, signature=sig, attrs=attrs,
                    constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    options = {"num_warps": config["num_warps"], "num_stages": config["num_stages"],
               "num_ctas": config["num_ctas"]}
    return triton.compile(src, target=GPUTarget(*SM90_TARGET), options=options)


def compile_panel(config: dict[str, Any]) -> Any:
    """The pair panel quantisation kernel compiled for sm_90 under ``config`` (``BLOCK_R``,
    ``BLOCK_K``, ``STAGES``, ``num_warps``): bf16 operands, unit K stride for A and unit row
    stride for B^T (as ``lowered_matmul`` passes a row-major A and B), sizes and strides
    runtime multiples of 16 (as Triton specialises them at 4096^3)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernel_templates.gemm import fp8_quant

    fn = fp8_quant._pair_panel_kernel
    consts = {"BLOCK_R": config["BLOCK_R"], "BLOCK_K": config["BLOCK_K"],
              "ROUND_IN_FP32": False, "STAGES": config["STAGES"], "stride_ak": 1,
              "stride_br": 1}
    types = {"a_ptr": "*bf16", "b_ptr": "*bf16", "qa_ptr": "*fp8e4nv", "qb_ptr": "*fp8e4nv",
             "sa_ptr": "*fp32", "sb_ptr": "*fp32"}
    sig = {n: "constexpr" if n in consts else types.get(n, "i32") for n in fn.arg_names}
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]]
             for n in (*types, "RA", "RB", "K", "stride_ar", "stride_bk", "stride_qar",
                       "stride_qbr")}
    src = ASTSource(fn=fn, signature=sig, attrs=attrs,
                    constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    return triton.compile(src, target=GPUTarget(*SM90_TARGET),
                          options={"num_warps": config["num_warps"], "num_stages": 1})


def panel_figures(kernel: Any) -> dict[str, Any]:
    """What a compiled panel kernel does: shared memory, ``cp.async`` copies and 128-bit
    global loads in its PTX, and (``ptxas -v``, when Triton ships one) registers and spills."""
    import re
    import tempfile
    from pathlib import Path

    import triton

    ptx = kernel.asm["ptx"]
    out: dict[str, Any] = {"shared": kernel.metadata.shared, "cp_async": ptx.count("cp.async"),
                           "ld_global_v4": ptx.count("ld.global.v4")}
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if ptxas.exists():
        with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
            f.write(ptx)
            f.flush()
            done = subprocess.run([str(ptxas), "-v", "-arch=sm_90a", f.name, "-o", os.devnull],
                                  capture_output=True, text=True)
        regs = re.search(r"Used (\d+) registers", done.stderr)
        spills = re.search(r"(\d+) bytes spill stores", done.stderr)
        out["registers"] = int(regs.group(1)) if regs else None
        out["spill_stores"] = int(spills.group(1)) if spills else None
    return out


def compile_panel_in_child(config: dict[str, Any], timeout: float = 300.0
                           ) -> subprocess.CompletedProcess[str]:
    """``compile_panel`` in a child process without ``TRITON_INTERPRET``: return code 0 and
    ``panel_figures`` as JSON on stdout when it compiled; otherwise its stderr says why."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "tests.kernel_templates.fp8_sm90_compile",
                           "panel", json.dumps(config)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def compile_in_child(config: dict[str, Any], row_scales: bool | str = False,
                     timeout: float = 300.0
                     ) -> subprocess.CompletedProcess[str]:
    """Compile ``config`` in a child process without ``TRITON_INTERPRET``: return code 0 and
    ``{"shared": bytes}`` on stdout when it compiled; otherwise its stderr says why."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "tests.kernel_templates.fp8_sm90_compile",
                           json.dumps(config), json.dumps(row_scales)], capture_output=True,
                          text=True, timeout=timeout, env=env)


if __name__ == "__main__":
    os.environ.pop("TRITON_INTERPRET", None)
    sys.path.insert(0, os.getcwd())
    if sys.argv[1] == "panel":
        print(json.dumps(panel_figures(compile_panel(json.loads(sys.argv[2])))))
        sys.exit(0)
    kernel = compile_fp8(json.loads(sys.argv[1]),
                         row_scales=len(sys.argv) > 2 and json.loads(sys.argv[2]))
    print(json.dumps({"shared": kernel.metadata.shared}))
