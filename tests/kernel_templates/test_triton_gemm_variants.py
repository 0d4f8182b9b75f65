"""The Triton GEMM template's optional keys: PERSISTENT, WARP_SPECIALIZE, num_ctas,
INPUT_PRECISION, LOADS, the split-K reduction's and the persistent kernel's (FLATTEN,
TMA_STORE, WS_LOOP). Validation and the interpreter paths run on the CPU (the interpreter
ignores warp specialisation and clusters, and computes tf32 dots in full fp32); ``gpu`` cases
check the compiled kernels against the float64 reference on aligned and ragged shapes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm import triton as gemm
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import (
    TF32_TOLERANCE,
    reference_matmul,
    rel_error,
    tolerance,
    tolerance_for,
)
from kernel_templates.gemm.triton import check_config, matmul
from search.kinds.gemm import triton_space as triton_gemm
from search.kinds.gemm.spec import GemmProblem

LAY = {"r": "row", "c": "col"}


def small(**extra: Any) -> dict[str, Any]:
    return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, SPLIT_K=1, num_warps=4,
                num_stages=2, **extra)


def loads(config: dict[str, Any], tma: bool | None) -> dict[str, Any]:
    """``config`` with the ``LOADS`` key for ``tma`` (True: TMA, False: pointers, None: as
    given, else automatic)."""
    return config if tma is None else {**config, "LOADS": "tma" if tma else "pointer"}


def check(problem: GemmProblem, config: dict[str, Any], device: str, seed: int = 0,
          tma: bool | None = None) -> float:
    inp = make_inputs(problem, device, seed)
    assert torch.isnan(inp.out).all()  # poisoned: anything unwritten fails below
    assert matmul(inp.a, inp.b, loads(config, tma), out=inp.out) is inp.out
    err = rel_error(inp.out, reference_matmul(inp.a, inp.b))
    assert err <= tolerance_for(problem, config), (problem, config, err)
    return err


# -- check_config -------------------------------------------------------------------------------
def test_absent_keys_mean_the_defaults() -> None:
    # A config without the optional keys (one recorded before they existed) means the plain
    # kernel: check_config fills in the defaults the search space's complete configs carry.
    base = small()
    assert check_config(base) == triton_gemm.complete(base)
    assert set(check_config(base)) == set(gemm.CONFIG_KEYS) | set(gemm.OPTIONAL_KEYS)
    assert {k: check_config(base)[k] for k in gemm.CONFIG_KEYS} == base
    assert check_config(triton_gemm.complete(base)) == check_config(base)


def test_search_space_configs_are_complete() -> None:
    # What the search emits names every key, so a stored config fixes the kernel it ran.
    problem = GemmProblem(m=64, n=64, k=65536, dtype="bf16")
    for tier in triton_gemm.TIERS:
        for cfg in triton_gemm.seeds(problem, tier):
            assert set(cfg) == set(gemm.CONFIG_KEYS) | set(gemm.OPTIONAL_KEYS), tier
            assert check_config(cfg) == cfg


def test_splitk_defaults_follow_split_k() -> None:
    assert check_config(small())["SPLITK_MODE"] == "serial"
    many = check_config({**small(), "SPLIT_K": 2 * triton_gemm.SERIAL_MAX_SPLIT})
    assert many["SPLITK_MODE"] == "two_launch" and many["FANIN"] == 1
    assert check_config({**small(), "SPLIT_K": 64, "SPLITK_MODE": "serial"})["FANIN"] == 8


@pytest.mark.parametrize(("key", "values"), [
    ("PERSISTENT", [0, 1, True, False]),
    ("WARP_SPECIALIZE", [0, 1]),
    ("num_ctas", [1, 2]),
    ("INPUT_PRECISION", ["ieee", "tf32", "tf32x3"]),
    ("LOADS", ["auto", "tma", "pointer"]),
    ("SPLITK_MODE", ["serial", "two_launch"]),
    ("FLATTEN", [0, 1]),
    ("TMA_STORE", [0, 1]),
    ("WS_LOOP", ["k", "tiles"]),
])
def test_optional_keys_accepted(key: str, values: list[Any]) -> None:
    for v in values:
        cfg = check_config(small(**{key: v}))
        assert cfg[key] == v and type(cfg[key]) is (str if isinstance(v, str) else int)


@pytest.mark.parametrize(("extra", "words"), [
    (dict(PERSISTENT=2), "PERSISTENT"),
    (dict(PERSISTENT="1"), "PERSISTENT"),
    (dict(PERSISTENT=0.5), "PERSISTENT"),
    (dict(WARP_SPECIALIZE=-1), "WARP_SPECIALIZE"),
    (dict(num_ctas=4), "num_ctas"),
    (dict(num_ctas=0), "num_ctas"),
    (dict(INPUT_PRECISION="bf16x3"), "INPUT_PRECISION"),
    (dict(INPUT_PRECISION="TF32"), "INPUT_PRECISION"),
    (dict(PERSISTENT=1, SPLIT_K=2), "SPLIT_K=1"),
    (dict(num_ctas=2, SPLIT_K=4), "SPLIT_K=1"),
    (dict(LOADS="TMA"), "LOADS"),
    (dict(SPLITK_MODE="auto"), "SPLITK_MODE"),
    (dict(SPLITK_MODE="serial", FANIN=8, SPLIT_K=4), "FANIN"),
    (dict(SPLITK_MODE="two_launch", FANIN=2, SPLIT_K=4), "FANIN"),
    (dict(FLATTEN=2), "FLATTEN"),
    (dict(TMA_STORE="1"), "TMA_STORE"),
    (dict(WS_LOOP="both"), "WS_LOOP"),
    (dict(SPLIT_MODE="serial"), "unknown config keys"),
])
def test_bad_optional_values(extra: dict[str, Any], words: str) -> None:
    cfg = small(**{k: v for k, v in extra.items() if k != "SPLIT_K"})
    cfg["SPLIT_K"] = extra.get("SPLIT_K", 1)
    with pytest.raises(InvalidConfig, match=words):
        check_config(cfg)


def test_persistent_zero_allows_split_k() -> None:
    assert check_config({**small(PERSISTENT=0), "SPLIT_K": 4})["SPLIT_K"] == 4


def test_check_config_is_idempotent() -> None:
    cfg = small(PERSISTENT=1, WARP_SPECIALIZE=1, num_ctas=2, INPUT_PRECISION="tf32")
    assert check_config(check_config(cfg)) == check_config(cfg)


# -- launcher rules -----------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["tf32", "tf32x3"])
def test_reduced_precision_refused_for_16_bit_inputs(precision: str, device: str) -> None:
    inp = make_inputs(GemmProblem(m=16, n=32, k=32, dtype="fp16"), device, 0)
    with pytest.raises(InvalidConfig, match="INPUT_PRECISION"):
        matmul(inp.a, inp.b, small(INPUT_PRECISION=precision))


def test_explicit_defaults_are_bitwise_today(device: str) -> None:
    # Every optional key at its default gives the very same bits as no key at all.
    for dtype in ("fp16", "fp32"):
        inp = make_inputs(GemmProblem(m=33, n=65, k=97, dtype=dtype), device, 5)
        plain = matmul(inp.a, inp.b, small())
        explicit = matmul(inp.a, inp.b, small(PERSISTENT=0, WARP_SPECIALIZE=0, num_ctas=1,
                                              INPUT_PRECISION="ieee"))
        assert torch.equal(plain, explicit)


def test_persistent_refuses_what_tma_cannot_load(device: str) -> None:
    misaligned = make_inputs(GemmProblem(m=33, n=65, k=97, dtype="fp16"), device, 0)
    with pytest.raises(Unsupported, match="16-byte"):
        matmul(misaligned.a, misaligned.b, small(PERSISTENT=1))
    batched = make_inputs(GemmProblem(m=16, n=32, k=32, batch=2, dtype="fp16"), device, 0)
    with pytest.raises(Unsupported, match="batch"):
        matmul(batched.a, batched.b, small(PERSISTENT=1))
    inp = make_inputs(GemmProblem(m=16, n=32, k=32, dtype="fp16"), device, 0)
    with pytest.raises(Unsupported, match="LOADS='pointer'"):
        matmul(inp.a, inp.b, small(PERSISTENT=1, LOADS="pointer"))


def test_warp_specialize_needs_tma(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    # The interpreter takes the TMA kernel only when asked: unsupported there, not invalid.
    inp = make_inputs(GemmProblem(m=16, n=32, k=32, dtype="fp32"), device, 0)
    if device == "cpu":
        with pytest.raises(Unsupported, match="WARP_SPECIALIZE"):
            matmul(inp.a, inp.b, small(WARP_SPECIALIZE=1))
    # Pointer loads asked for explicitly: the key cannot apply.
    with pytest.raises((InvalidConfig, Unsupported), match="WARP_SPECIALIZE"):
        matmul(inp.a, inp.b, small(WARP_SPECIALIZE=1, LOADS="pointer"))


def test_hopper_keys_unsupported_before_hopper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gemm, "cc_major", lambda device: 8)
    cuda = torch.device("cuda")
    gemm._check_device(check_config(small()), cuda)  # nothing asked: fine on any GPU
    for extra in (dict(PERSISTENT=1), dict(WARP_SPECIALIZE=1), dict(num_ctas=2)):
        with pytest.raises(Unsupported, match="Hopper"):
            gemm._check_device(check_config(small(**extra)), cuda)
    gemm._check_device(check_config(small(PERSISTENT=1)), torch.device("cpu"))


# -- the persistent kernel in the interpreter ---------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize(("m", "n", "k"), [(40, 56, 88), (64, 64, 64), (8, 200, 24)])
@pytest.mark.parametrize("layouts", ["rr", "cc", "rc"])
def test_persistent(dtype: str, m: int, n: int, k: int, layouts: str, device: str) -> None:
    # 40x56x88 is ragged everywhere yet 16-byte aligned in either storage order, and has more
    # tiles (6) than the interpreter's 4 programs, so programs loop; 8x200x24 is one tile row.
    p = GemmProblem(m=m, n=n, k=k, dtype=dtype, layout_a=LAY[layouts[0]],
                    layout_b=LAY[layouts[1]])
    check(p, small(PERSISTENT=1), device, seed=m + n + k)


@pytest.mark.parametrize("extra", [
    dict(WARP_SPECIALIZE=1), dict(num_ctas=2), dict(GROUP_M=1), dict(GROUP_M=8),
    dict(INPUT_PRECISION="tf32"), dict(INPUT_PRECISION="tf32x3"),
])
def test_persistent_variants(extra: dict[str, Any], device: str) -> None:
    p = GemmProblem(m=72, n=96, k=40, dtype="fp32", layout_b="col")
    check(p, {**small(PERSISTENT=1), **extra}, device, seed=3)


def test_persistent_matches_tiled_bitwise_in_the_interpreter(device: str) -> None:
    if device != "cpu":
        pytest.skip("compiled kernels may order the K sum differently")
    inp = make_inputs(GemmProblem(m=40, n=56, k=88, dtype="fp32"), device, 11)
    assert torch.equal(matmul(inp.a, inp.b, small()), matmul(inp.a, inp.b, small(PERSISTENT=1)))


@pytest.mark.parametrize("tma_store", [True, False])
def test_persistent_store_paths(tma_store: bool, device: str) -> None:
    # n=50: C's fp16 rows (100 bytes) are not 16-byte aligned, so C is stored through pointers
    # even where TMA stores are on; n=56 takes the TMA store unless the key turns it off.
    for n in (50, 56):
        check(GemmProblem(m=40, n=n, k=88, dtype="fp16", layout_b="col"),
              small(PERSISTENT=1, TMA_STORE=int(tma_store)), device, seed=n)


def test_out_dtype_differs_persistent(device: str) -> None:
    check(GemmProblem(m=48, n=32, k=64, dtype="fp16", out_dtype="fp32"), small(PERSISTENT=1),
          device)


@pytest.mark.parametrize("layouts", ["rr", "cc"])
def test_tma_kernel_with_warp_specialize(layouts: str, device: str) -> None:
    p = GemmProblem(m=40, n=56, k=88, dtype="fp16", layout_a=LAY[layouts[0]],
                    layout_b=LAY[layouts[1]])
    check(p, small(WARP_SPECIALIZE=1), device, tma=True)
    check(p, {**small(WARP_SPECIALIZE=1), "SPLIT_K": 2}, device, tma=True)


def test_num_ctas_on_pointer_kernel(device: str) -> None:
    check(GemmProblem(m=33, n=65, k=97, dtype="fp32"), small(num_ctas=2), device)


def test_num_ctas_refused_with_column_major_a_through_tma(device: str) -> None:
    # Triton 3.6 computes num_ctas=2 wrong with a column-major A loaded through TMA (seen on an
    # H100); refused where TMA is required, the pointer kernel where TMA was only automatic.
    p = GemmProblem(m=40, n=56, k=88, dtype="fp16", layout_a="col")
    inp = make_inputs(p, device, 0)
    with pytest.raises(Unsupported, match="num_ctas"):
        matmul(inp.a, inp.b, small(num_ctas=2, PERSISTENT=1))
    with pytest.raises(Unsupported, match="num_ctas"):
        matmul(inp.a, inp.b, small(num_ctas=2, LOADS="tma"))
    check(p, small(num_ctas=2), device)
    check(GemmProblem(m=40, n=56, k=88, dtype="fp16", layout_b="col"),
          small(num_ctas=2, PERSISTENT=1), device)


def test_warp_specialize_on_the_tile_loop(device: str) -> None:
    check(GemmProblem(m=40, n=56, k=88, dtype="fp16"),
          small(PERSISTENT=1, WARP_SPECIALIZE=1, WS_LOOP="tiles"), device)


@pytest.mark.parametrize("precision", ["tf32", "tf32x3"])
def test_tf32_pointer_kernel(precision: str, device: str) -> None:
    check(GemmProblem(m=33, n=65, k=97, dtype="fp32", layout_a="col"),
          small(INPUT_PRECISION=precision), device)


# -- tolerance ----------------------------------------------------------------------------------
def test_tolerance_for() -> None:
    fp32 = GemmProblem(m=64, n=64, k=4096, dtype="fp32")
    assert tolerance_for(fp32) == tolerance(fp32)
    assert tolerance_for(fp32, {}) == tolerance(fp32)
    assert tolerance_for(fp32, {"INPUT_PRECISION": "ieee"}) == tolerance(fp32)
    assert tolerance_for(fp32, {"INPUT_PRECISION": "tf32x3"}) == tolerance(fp32)
    assert tolerance_for(fp32, {"INPUT_PRECISION": "tf32"}) == TF32_TOLERANCE
    assert 4e-3 < TF32_TOLERANCE < tolerance(GemmProblem(m=1, n=1, k=1, dtype="bf16"))
    bf16 = GemmProblem(m=64, n=64, k=4096, dtype="bf16")
    assert tolerance_for(bf16, {"INPUT_PRECISION": "tf32"}) == tolerance(bf16)


def test_execute_checks_with_tolerance_for(monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker's correctness check goes through the kind's tolerance (tolerance_for) with the
    # candidate's config.
    from dataclasses import replace

    from kernel_templates import registry
    from workers.execute import execute

    seen: list[Any] = []

    def spy(problem: GemmProblem, config: dict[str, Any] | None = None) -> float:
        seen.append(config)
        return 1.0

    gemm_kind = registry.kernel_kind("gemm")
    assert gemm_kind.tolerance is tolerance_for
    monkeypatch.setitem(registry.KINDS, "gemm", replace(gemm_kind, tolerance=spy))
    cand = {"backend": "triton", "config": small(INPUT_PRECISION="tf32"),
            "problem": GemmProblem(m=16, n=32, k=32, dtype="fp32").to_dict()}
    res = execute(cand, {"interpret": True, "seed": 1, "interpreter_reps": 1})
    assert res["status"] == "ok", res
    assert seen == [small(INPUT_PRECISION="tf32")]


# -- GPU: compiled kernels on real shapes -------------------------------------------------------
GPU_FAMILIES = {
    "persistent": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4,
                       num_stages=4, PERSISTENT=1),
    "persistent_ws": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1,
                          num_warps=8, num_stages=3, PERSISTENT=1, WARP_SPECIALIZE=1),
    "persistent_ws_small": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1,
                                num_warps=4, num_stages=4, PERSISTENT=1, WARP_SPECIALIZE=1),
    "persistent_ctas2": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1,
                             num_warps=8, num_stages=3, PERSISTENT=1, num_ctas=2),
    "tma_ws": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8,
                   num_stages=3, WARP_SPECIALIZE=1),
}
GPU_SHAPES = [(1000, 3000, 2000), (512, 512, 512), (16, 4096, 4096)]


@pytest.mark.gpu
@pytest.mark.parametrize("family", sorted(GPU_FAMILIES))
@pytest.mark.parametrize(("m", "n", "k"), GPU_SHAPES)
@pytest.mark.parametrize("layouts", ["rr", "cc"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_variants_gpu(family: str, m: int, n: int, k: int, layouts: str, dtype: str) -> None:
    p = GemmProblem(m=m, n=n, k=k, dtype=dtype, layout_a=LAY[layouts[0]],
                    layout_b=LAY[layouts[1]])
    if family == "persistent_ctas2" and layouts[0] == "c":
        with pytest.raises(Unsupported, match="num_ctas"):
            check(p, GPU_FAMILIES[family], "cuda")
        return
    err = check(p, GPU_FAMILIES[family], "cuda", seed=m + n + k)
    assert err < (5e-3 if dtype == "bf16" else 1e-3)


TF32_FAMILIES = {
    "persistent": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, SPLIT_K=1, num_warps=8,
                       num_stages=3, PERSISTENT=1),
    "persistent_ws": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, SPLIT_K=1,
                          num_warps=8, num_stages=3, PERSISTENT=1, WARP_SPECIALIZE=1),
    "tiled": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, SPLIT_K=1, num_warps=8,
                  num_stages=3),
}


@pytest.mark.gpu
@pytest.mark.parametrize("family", sorted(TF32_FAMILIES))
@pytest.mark.parametrize("precision", ["tf32", "tf32x3"])
@pytest.mark.parametrize(("m", "n", "k"), [(1000, 3000, 2000), (512, 512, 512)])
@pytest.mark.parametrize("layouts", ["rr", "cc"])
def test_fp32_reduced_precision_gpu(family: str, precision: str, m: int, n: int, k: int,
                                    layouts: str) -> None:
    p = GemmProblem(m=m, n=n, k=k, dtype="fp32", layout_a=LAY[layouts[0]],
                    layout_b=LAY[layouts[1]])
    cfg = {**TF32_FAMILIES[family], "INPUT_PRECISION": precision}
    err = check(p, cfg, "cuda", seed=m + k)
    if precision == "tf32":
        assert err > 1e-5  # really tf32: an ieee product would be ~1e-7
    else:
        assert err < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["pointer", "tma", "persistent"])
@pytest.mark.parametrize("layouts", ["rr", "rc", "cr", "cc"])
@pytest.mark.parametrize(("m", "n", "k"), [(512, 512, 512), (1000, 3000, 2000)])
def test_num_ctas_gpu(path: str, layouts: str, m: int, n: int, k: int) -> None:
    p = GemmProblem(m=m, n=n, k=k, dtype="bf16", layout_a=LAY[layouts[0]],
                    layout_b=LAY[layouts[1]])
    cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4,
               num_stages=3, num_ctas=2, **({"PERSISTENT": 1} if path == "persistent" else {}))
    if path == "persistent" and layouts[0] == "c":
        with pytest.raises(Unsupported, match="num_ctas"):
            check(p, cfg, "cuda")
        return
    # "tma" with a column-major A: automatic TMA gives way to the pointer kernel.
    err = check(p, cfg, "cuda", seed=m + n, tma=False if path == "pointer" else None)
    assert err < 5e-3


@pytest.mark.gpu
@pytest.mark.parametrize("ws_loop", ["k", "tiles"])
@pytest.mark.parametrize("layouts", ["rr", "cc"])
def test_warp_specialize_loops_gpu(ws_loop: str, layouts: str) -> None:
    p = GemmProblem(m=1000, n=3000, k=2000, dtype="bf16", layout_a=LAY[layouts[0]],
                    layout_b=LAY[layouts[1]])
    cfg = {**GPU_FAMILIES["persistent_ws"], "WS_LOOP": ws_loop}
    assert check(p, cfg, "cuda", seed=9) < 5e-3
