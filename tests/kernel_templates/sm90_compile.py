"""Compile the attention templates for sm_90 without a GPU (``triton.compile`` with a CUDA
target; Triton's own ptxas): what the compiler makes of a configuration, for CPU tests that pin
the static rules to the compiler's figures.

Tests call ``compile_many`` (or run this module as a script): the compiles run in a child
process without ``TRITON_INTERPRET`` (the test session runs the interpreter), and a
configuration that aborts the compiler takes only that child down.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

SM90 = GPUTarget("cuda", 90, 32)


def _compile(fn: Any, ptrs: dict[str, str], consts: dict[str, Any], floats: tuple[str, ...],
             num_warps: int, num_stages: int) -> Any:
    sig: dict[str, str] = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in ptrs:
            sig[name] = ptrs[name]
        else:
            sig[name] = "fp32" if name in floats else "i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if sig[n] != "constexpr" and sig[n] != "fp32" and not sig[n].startswith("tensordesc")}
    return triton.compile(ASTSource(fn, sig, consts, attrs), target=SM90,
                          options={"num_warps": num_warps, "num_stages": num_stages})


def flash(config: dict[str, Any], d: int = 128, causal: bool = False) -> Any:
    """The flash template compiled for sm_90, bf16 (the problem's ints are runtime values)."""
    from kernel_templates.attention import triton as flash_mod

    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    tma = bool(config.get("TMA", 0))
    ptrs = ({n: f"tensordesc<bf16[{bm if n in ('Q', 'Out') else bn}, {d}]>"
             for n in ("Q", "K", "V", "Out")} if tma else
            {n: "*bf16" for n in ("Q", "K", "V", "Out")})
    consts = {"D": d, "BLOCK_M": bm, "BLOCK_N": bn, "CAUSAL": causal, "PRECISION": "tf32",
              "TMA": tma, "WS": bool(config.get("WS", 0)),
              "PERSISTENT": bool(config.get("PERSISTENT", 0))}
    return _compile(flash_mod._flash_fwd_kernel, ptrs, consts, ("qk_scale",),
                    config["num_warps"], config["num_stages"])


def decode(config: dict[str, Any], rows: int = 16, d: int = 128) -> Any:
    """The decode template's split kernel compiled for sm_90, bf16, ``rows`` packed rows."""
    from kernel_templates.attention import decode as decode_mod

    ptrs = {**{n: "*bf16" for n in ("Q", "K", "V", "Out")},
            **{n: "*fp32" for n in ("M_ws", "L_ws", "A_ws")}}
    consts = {"D": d, "BLOCK_M": rows, "BLOCK_N": config["BLOCK_N"], "CAUSAL": False,
              "PRECISION": "tf32", "DIRECT": config["NUM_SPLITS"] == 1}
    return _compile(decode_mod._decode_split_kernel, ptrs, consts, ("qk_scale",),
                    config["num_warps"], config.get("num_stages", 2))


def compile_many(jobs: list[tuple[str, dict[str, Any]]], timeout: float = 600.0
                 ) -> subprocess.CompletedProcess[str]:
    """Compile ``(template, config)`` pairs (``"flash"`` or ``"decode"``) in a child process;
    its stdout is a JSON list of ``{"shared": bytes, "ptx_sha": hex}``, one per pair."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "tests.kernel_templates.sm90_compile",
                           json.dumps(jobs)], capture_output=True, text=True, timeout=timeout,
                          env=env)


def _main(jobs: list[tuple[str, dict[str, Any]]]) -> None:
    out = []
    for template, config in jobs:
        kernel = flash(config) if template == "flash" else decode(config)
        out.append({"shared": kernel.metadata.shared,
                    "ptx_sha": hashlib.sha256(kernel.asm["ptx"].encode()).hexdigest()})
    print(json.dumps(out))


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
