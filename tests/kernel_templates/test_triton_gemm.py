"""Contract checks of the Triton GEMM template: ragged shapes, layouts, batch, split-K, dtypes,
every output element written, fresh random inputs. CPU cases run in the interpreter (tiny
shapes, small tiles); ``gpu`` cases run bf16 on real shapes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm import triton as gemm
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_matmul, rel_error, tolerance
from kernel_templates.gemm.triton import bytes_moved, flops, matmul
from search.kinds.gemm import triton_space as triton_gemm
from search.kinds.gemm.spec import GemmProblem


def small(split_k: int = 1, group_m: int = 2, bk: int = 16) -> dict[str, int]:
    return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=bk, GROUP_M=group_m, SPLIT_K=split_k,
                num_warps=4, num_stages=2)


def loads(config: dict[str, Any], tma: bool | None) -> dict[str, Any]:
    """``config`` with the ``LOADS`` key for ``tma`` (True: TMA, False: pointers, None: as
    given, else automatic)."""
    return config if tma is None else {**config, "LOADS": "tma" if tma else "pointer"}


def check(problem: GemmProblem, config: dict[str, Any], device: str, seed: int = 0,
          tma: bool | None = None) -> float:
    inp = make_inputs(problem, device, seed)
    assert torch.isnan(inp.out).all()  # poisoned: anything unwritten fails below
    res = matmul(inp.a, inp.b, loads(config, tma), out=inp.out)
    assert res is inp.out
    err = rel_error(inp.out, reference_matmul(inp.a, inp.b))
    assert err <= tolerance(problem), (problem, config, err)
    return err


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize(("m", "n", "k"), [(64, 48, 80), (33, 65, 97)])
@pytest.mark.parametrize("layouts", ["rr", "cc", "rc"])
def test_ragged_shapes_and_layouts(dtype: str, m: int, n: int, k: int, layouts: str,
                                   device: str) -> None:
    lay = {"r": "row", "c": "col"}
    p = GemmProblem(m=m, n=n, k=k, dtype=dtype, layout_a=lay[layouts[0]],
                    layout_b=lay[layouts[1]])
    check(p, small(), device)


@pytest.mark.parametrize("split_k", [1, 2, 4])
@pytest.mark.parametrize(("m", "n", "k"), [(33, 65, 97), (32, 64, 128)])
def test_split_k(split_k: int, m: int, n: int, k: int, device: str) -> None:
    # (32, 64, 128) with BLOCK_K=16 is the EVEN_K/EVEN_MN path: no masks at all.
    check(GemmProblem(m=m, n=n, k=k, dtype="fp16"), small(split_k), device, seed=split_k)


@pytest.fixture(params=["serial", "serial_fanin2", "two_launch"])
def splitk_mode(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Each split-K reduction (config keys): one launch (flat, and two-level with groups of 2),
    two launches."""
    mode = request.param
    if mode == "serial_fanin2":
        return {"SPLITK_MODE": "serial", "FANIN": 2}
    return {"SPLITK_MODE": mode}


def counters_are_zero(device: str) -> bool:
    buf = gemm._COUNTERS.get(torch.device(device))
    return buf is None or not buf.any().item()


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("split_k", [2, 4, 8])
@pytest.mark.parametrize(("m", "n", "k"), [(33, 65, 97), (64, 64, 256)])
def test_split_k_modes(dtype: str, split_k: int, m: int, n: int, k: int,
                       splitk_mode: dict[str, Any], device: str) -> None:
    # Two consecutive calls on fresh inputs, both right: the first left its counters at zero.
    p = GemmProblem(m=m, n=n, k=k, dtype=dtype)
    check(p, {**small(split_k), **splitk_mode}, device, seed=split_k)
    assert counters_are_zero(device)
    check(p, {**small(split_k), **splitk_mode}, device, seed=split_k + 100)
    assert counters_are_zero(device)


@pytest.mark.parametrize("split_k", [2, 4])
def test_split_k_modes_batch_and_tma(split_k: int, splitk_mode: dict[str, Any],
                                     device: str) -> None:
    check(GemmProblem(m=20, n=40, k=72, batch=2, dtype="fp32", layout_b="col"),
          {**small(split_k), **splitk_mode}, device)
    check(GemmProblem(m=40, n=56, k=88, dtype="fp16", layout_a="col"),
          {**small(split_k), **splitk_mode}, device, tma=True)
    assert counters_are_zero(device)


def test_split_k_modes_agree_and_are_deterministic(device: str) -> None:
    inp = make_inputs(GemmProblem(m=17, n=33, k=260, dtype="fp32"), device, 3)
    outs = {}
    for mode, fanin in [("serial", None), ("serial", 2), ("two_launch", None)]:
        cfg = {**small(8), "SPLITK_MODE": mode, **({} if fanin is None else {"FANIN": fanin})}
        first = matmul(inp.a, inp.b, cfg).clone()
        assert torch.equal(first, matmul(inp.a, inp.b, cfg))
        outs[mode, fanin] = first
    ref = reference_matmul(inp.a, inp.b)
    for out in outs.values():
        assert rel_error(out, ref) <= 1e-5


def test_fanin() -> None:
    assert [triton_gemm.fanin(s, "serial") for s in (2, 8, 16, 32, 64, 128)] == [2, 8, 16, 8,
                                                                                8, 16]
    assert triton_gemm.fanin(4, "two_launch") == 1 and triton_gemm.fanin(1, "serial") == 1


def test_auto_mode_picks_serial_for_few_slices(monkeypatch: pytest.MonkeyPatch,
                                               device: str) -> None:
    # No SPLITK_MODE (a recorded config): serial up to SERIAL_MAX_SPLIT slices (counters used,
    # left at zero), two launches beyond (no counters touched).
    monkeypatch.setattr(gemm, "_COUNTERS", {})
    p = GemmProblem(m=33, n=65, k=300, dtype="fp32")
    check(p, small(triton_gemm.SERIAL_MAX_SPLIT * 2), device)
    assert not gemm._COUNTERS
    check(p, small(triton_gemm.SERIAL_MAX_SPLIT), device)
    assert gemm._COUNTERS and counters_are_zero(device)


def test_unknown_splitk_mode(device: str) -> None:
    inp = make_inputs(GemmProblem(m=16, n=32, k=64, dtype="fp32"), device, 0)
    with pytest.raises(InvalidConfig, match="SPLITK_MODE"):
        matmul(inp.a, inp.b, {**small(2), "SPLITK_MODE": "atomic"})


@pytest.mark.parametrize("split_k", [1, 2])
def test_batch(split_k: int, device: str) -> None:
    p = GemmProblem(m=20, n=40, k=72, batch=2, dtype="fp32", layout_b="col")
    check(p, small(split_k), device)


@pytest.mark.parametrize("layouts", ["rr", "cc", "rc"])
@pytest.mark.parametrize("split_k", [1, 4])
def test_tma_path(layouts: str, split_k: int, device: str) -> None:
    # 40x56x88 is ragged in every dimension yet 16-byte aligned in both storage orders.
    lay = {"r": "row", "c": "col"}
    p = GemmProblem(m=40, n=56, k=88, dtype="fp16", layout_a=lay[layouts[0]],
                    layout_b=lay[layouts[1]])
    check(p, small(split_k), device, tma=True)


def test_tma_refused_when_misaligned(device: str) -> None:
    inp = make_inputs(GemmProblem(m=33, n=65, k=97, dtype="fp16"), device, 0)
    with pytest.raises(Unsupported):
        matmul(inp.a, inp.b, loads(small(), True))


def test_split_k_is_deterministic(device: str) -> None:
    inp = make_inputs(GemmProblem(m=17, n=33, k=130, dtype="fp32"), device, 7)
    first = matmul(inp.a, inp.b, small(4)).clone()
    assert torch.equal(first, matmul(inp.a, inp.b, small(4)))


def test_out_dtype_differs_from_inputs(device: str) -> None:
    check(GemmProblem(m=16, n=32, k=48, dtype="fp16", out_dtype="fp32"), small(2), device)


def test_allocates_output_and_2d_shape(device: str) -> None:
    inp = make_inputs(GemmProblem(m=16, n=32, k=32, dtype="fp32"), device, 1)
    c = matmul(inp.a, inp.b, small())
    assert c.shape == (16, 32) and c.dtype == torch.float32
    assert rel_error(c, reference_matmul(inp.a, inp.b)) < 1e-5


def test_rejects_bad_inputs(device: str) -> None:
    a = torch.randn(16, 32, device=device)
    with pytest.raises(ValueError):
        matmul(a, torch.randn(16, 32, device=device), small())
    with pytest.raises(TypeError):
        matmul(a, torch.randn(32, 16, device=device, dtype=torch.float16), small())
    with pytest.raises(InvalidConfig):
        matmul(a, torch.randn(32, 16, device=device), {**small(), "BLOCK_M": 24})
    with pytest.raises(InvalidConfig):
        matmul(a, torch.randn(32, 16, device=device), {"BLOCK_M": 16})
    with pytest.raises(Unsupported):
        matmul(a.to(torch.float64), torch.randn(32, 16, device=device, dtype=torch.float64),
               small())


def test_flops_and_bytes() -> None:
    assert flops(2, 3, 4) == 48
    assert bytes_moved(2, 3, 4, 2, 2) == (8 + 12 + 6) * 2
    assert bytes_moved(2, 3, 4, 2, 2, split_k=2) == (8 + 12 + 6) * 2 + 2 * 4 * 2 * 6


# -- GPU: bf16 on real shapes, every config family, both layouts -------------------------------
FAMILIES = {
    "plain": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=8,
                  num_stages=3),
    "grouped": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8,
                    num_stages=3),
    "splitk": dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=8, num_warps=4,
                   num_stages=4),
    "splitk_skinny": dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=4,
                          num_warps=4, num_stages=4),
}
GPU_SHAPES = [(1000, 3000, 2000), (16, 4096, 4096), (64, 64, 65536), (4096, 4096, 4096)]


@pytest.mark.gpu
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize(("m", "n", "k"), GPU_SHAPES)
@pytest.mark.parametrize("layouts", [("row", "row"), ("col", "col")])
@pytest.mark.parametrize("tma", [None, False])
def test_bf16_gpu(family: str, m: int, n: int, k: int, layouts: tuple[str, str],
                  tma: bool | None) -> None:
    p = GemmProblem(m=m, n=n, k=k, dtype="bf16", layout_a=layouts[0], layout_b=layouts[1])
    err = check(p, FAMILIES[family], "cuda", seed=m + n + k, tma=tma)
    assert err < 5e-3  # bf16 output rounding alone is about 1.5e-3
