"""Compile the Triton fp8 GEMM template (``kernel_templates/gemm/fp8.py``) for sm_90 without a
GPU (``triton.compile`` with a CUDA target), one configuration per child process: a
configuration the compiler rejects may abort the process (an ``LLVM ERROR``), so only that
child goes down, and its stderr says why.

    python -m tests.kernel_templates.fp8_sm90_compile '{"BLOCK_M": 128, ...}' [true]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

SM90_TARGET = ("cuda", 90, 32)
INTS = ("M", "N", "K", "stride_cm", "stride_cn")


def compile_fp8(config: dict[str, Any], row_scales: bool = False, out_dtype: str = "bf16"
                ) -> Any:
    """The fp8 template under a complete ``config`` compiled for sm_90: per-tensor scales (an
    fp8 problem's) or per row and column (``row_scales``: a lowered candidate's), a bf16
    output, the problem's sizes runtime values (multiples of the tiles)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernel_templates.gemm import fp8

    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    fn = fp8._fp8_gemm_persistent_kernel if config["PERSISTENT"] else fp8._fp8_gemm_kernel
    tma_store = bool(config["TMA_STORE"])
    consts = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": config["GROUP_M"],
              "ROW_SCALES": row_scales, "EVEN_MN": True,
              "IMPRECISE": None if config["FAST_ACC"] else bk, "TMA_STORE": tma_store}
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


def compile_in_child(config: dict[str, Any], row_scales: bool = False, timeout: float = 300.0
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
    kernel = compile_fp8(json.loads(sys.argv[1]),
                         row_scales=len(sys.argv) > 2 and json.loads(sys.argv[2]))
    print(json.dumps({"shared": kernel.metadata.shared}))
