"""The attention templates compiled for sm_90 on the CPU (no GPU needed; ``sm90_compile``):
the static rules' shared-memory figures are the compiler's, and the warp-specialisation refusal
pins what Triton 3.6 does with ``WS=1`` on Hopper, so the search keeps refusing it until an
upgrade changes it (then these tests fail and say so)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import triton

from search.kinds.attention.constraints import WS_REFUSED, smem_bytes, violations
from search.kinds.attention.spec import AttentionProblem
from search.limits import limits_for
from tests.kernel_templates.sm90_compile import compile_many

pytestmark = pytest.mark.skipif(not triton.__version__.startswith("3.6"),
                                reason="pins Triton 3.6's code generation for sm_90")

PREFILL = AttentionProblem(batch=8, heads=32, kv_heads=32, s_q=4096, s_kv=4096, d=128,
                           dtype="bf16")
DECODE = AttentionProblem(batch=64, heads=32, kv_heads=8, s_q=1, s_kv=8192, d=128,
                          dtype="bf16")
H100 = limits_for("cuda", 232_448, "9.0")


def flash_cfg(bm: int, bn: int, warps: int, stages: int, **opts: int) -> dict[str, int]:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages, **opts}


FLASH = [flash_cfg(128, 64, 8, 3), flash_cfg(128, 128, 8, 3, TMA=1),
         flash_cfg(128, 64, 8, 3, TMA=1, PERSISTENT=1)]
DECODES = [{"NUM_SPLITS": 1, "BLOCK_N": 256, "num_warps": 4, "num_stages": 2},
           {"NUM_SPLITS": 4, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3}]
WS_PAIR = [flash_cfg(128, 64, 8, 3, TMA=1), flash_cfg(128, 64, 8, 3, TMA=1, WS=1)]


@pytest.fixture(scope="module")
def compiled() -> list[dict[str, Any]]:
    jobs = ([("flash", c) for c in FLASH] + [("decode", c) for c in DECODES]
            + [("flash", c) for c in WS_PAIR])
    run = compile_many(jobs)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("i", range(len(FLASH)))
def test_flash_shared_memory_is_the_compilers(compiled: list[dict[str, Any]], i: int) -> None:
    assert smem_bytes(PREFILL, FLASH[i], "flash") == compiled[i]["shared"]


@pytest.mark.parametrize("i", range(len(DECODES)))
def test_decode_shared_memory_is_the_compilers(compiled: list[dict[str, Any]], i: int) -> None:
    assert smem_bytes(DECODE, DECODES[i], "decode") == compiled[len(FLASH) + i]["shared"]


def test_the_best_h100_tile_is_not_refused() -> None:
    """128x128 tiles with 3 stages through TMA: the fastest flash config measured on the H100
    (docs/benchmarks/attention_h100_*.md) fits, and the same tile with TMA and the persistent
    schedule does not (the compiler asked 263,168 B there)."""
    assert violations(PREFILL, flash_cfg(128, 128, 8, 3, TMA=1), "flash", H100) == []
    assert any("shared memory" in r for r in
               violations(PREFILL, flash_cfg(128, 128, 8, 3, TMA=1, PERSISTENT=1), "flash",
                          H100))


def test_ws_generates_the_same_code_on_sm90(compiled: list[dict[str, Any]]) -> None:
    """With 8 warps, ``WS=1`` compiles to exactly the PTX of ``WS=0``: nothing to search."""
    plain, ws = compiled[-2], compiled[-1]
    assert ws["ptx_sha"] == plain["ptx_sha"]
    assert WS_REFUSED in violations(PREFILL, flash_cfg(128, 64, 8, 3, WS=1), "flash", H100)


def test_ws_with_four_warps_aborts_the_compiler() -> None:
    """With 4 warps the compiler dies on an assertion (the whole process, not an exception):
    the reason the worker must never be handed ``WS=1``; the same tile without it compiles."""
    run = compile_many([("flash", flash_cfg(128, 64, 4, 3, WS=1))])
    assert run.returncode != 0
    assert "Assertion" in run.stderr, run.stderr[-2000:]
    plain = compile_many([("flash", flash_cfg(128, 64, 4, 3))])
    assert plain.returncode == 0, plain.stderr[-2000:]
