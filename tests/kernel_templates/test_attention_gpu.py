"""Attention kernels on a CUDA GPU (``gpu`` tests, skipped elsewhere): every backend, bf16
included, against the reference through the worker's check, at prefill shapes with grouped
queries (b2 h8/kv2 s_q 256 s_kv 384, d 64 and 128, causal or not, plus a square causal one)
and at a decode shape (s_q 1, s_kv 8192)."""

from __future__ import annotations

from typing import Any

import pytest

from kernel_templates.errors import Unsupported
from search.kinds.attention.spec import AttentionProblem
from tests.kernel_templates.attention_check import run_checked

pytestmark = pytest.mark.gpu

LIBRARY = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "sdpa_math", "flex")
FLASH_CONFIGS = [{"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2},
                 {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}]
#: Where a library backend may refuse the problem (torch's reason is then the skip's reason):
#: an explicit mask (causal with s_q != s_kv) that cuDNN may not take.


def refusal_expected(backend: str, p: AttentionProblem) -> bool:
    """The refusals torch 2.11 made on an H100 (2026-11-24): the efficient backend takes no
    grouped-query heads; flash none with the bottom-right mask of s_q != s_kv; cuDNN may refuse
    that mask. A refusal is ``Unsupported`` (the candidate's status), never a wrong result;
    any other refusal fails the test."""
    gqa = p.kv_heads != p.heads
    bottom_right = p.causal and p.s_q != p.s_kv
    return ((backend == "sdpa_efficient" and gqa) or (backend == "sdpa_flash" and gqa
                                                       and bottom_right)
            or (backend == "sdpa_cudnn" and bottom_right))


def prefill(d: int, causal: bool, dtype: str = "bf16", s_q: int = 256, s_kv: int = 384
            ) -> AttentionProblem:
    return AttentionProblem(batch=2, heads=8, kv_heads=2, s_q=s_q, s_kv=s_kv, d=d,
                            causal=causal, dtype=dtype)


SHAPES = [(256, 384), (256, 256)]


@pytest.mark.parametrize(("s_q", "s_kv"), SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("backend", LIBRARY)
def test_library_backends_bf16(backend: str, d: int, causal: bool, s_q: int, s_kv: int
                               ) -> None:
    p = prefill(d, causal, s_q=s_q, s_kv=s_kv)
    try:
        err, tol = run_checked(p, backend, {}, "cuda")
    except Unsupported as exc:
        if refusal_expected(backend, p):
            pytest.skip(str(exc))
        raise
    assert err <= tol, (backend, p.describe(), err)


@pytest.mark.parametrize("config", FLASH_CONFIGS)
@pytest.mark.parametrize(("s_q", "s_kv"), SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_triton_flash(dtype: str, d: int, causal: bool, s_q: int, s_kv: int,
                      config: dict[str, Any]) -> None:
    p = prefill(d, causal, dtype, s_q=s_q, s_kv=s_kv)
    err, tol = run_checked(p, "triton", config, "cuda")
    assert err <= tol / 2, (p.describe(), config, err)


HOPPER_CONFIGS = [{"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "TMA": 1},
                  {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "WS": 1},
                  {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2,
                   "PERSISTENT": 1},
                  {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2, "TMA": 1,
                   "PERSISTENT": 1}]


@pytest.mark.parametrize("config", HOPPER_CONFIGS)
@pytest.mark.parametrize(("s_q", "s_kv"), SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_triton_flash_hopper_options(causal: bool, s_q: int, s_kv: int,
                                     config: dict[str, Any]) -> None:
    """TMA descriptors, warp specialisation and the persistent schedule, bf16 d128 with
    grouped queries, through the worker's check."""
    p = prefill(128, causal, "bf16", s_q=s_q, s_kv=s_kv)
    err, tol = run_checked(p, "triton", config, "cuda")
    assert err <= tol / 2, (p.describe(), config, err)


def decode(causal: bool) -> AttentionProblem:
    return AttentionProblem(batch=2, heads=8, kv_heads=2, s_q=1, s_kv=8192, d=128,
                            causal=causal, dtype="bf16")


@pytest.mark.parametrize("config", [{"NUM_SPLITS": 1, "BLOCK_N": 64, "num_warps": 4},
                                    {"NUM_SPLITS": 16, "BLOCK_N": 64, "num_warps": 4},
                                    {"NUM_SPLITS": 37, "BLOCK_N": 128, "num_warps": 8,
                                     "num_stages": 3}])
@pytest.mark.parametrize("causal", [False, True])
def test_triton_decode(causal: bool, config: dict[str, Any]) -> None:
    err, tol = run_checked(decode(causal), "triton_decode", config, "cuda")
    assert err <= tol / 2, (config, err)


@pytest.mark.parametrize("backend", [*LIBRARY, "triton"])
def test_decode_shape_on_the_other_backends(backend: str) -> None:
    config = ({"BLOCK_M": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
              if backend == "triton" else {})
    try:
        err, tol = run_checked(decode(False), backend, config, "cuda")
    except Unsupported as exc:
        if refusal_expected(backend, decode(False)):
            pytest.skip(str(exc))
        raise
    assert err <= tol, (backend, err)
