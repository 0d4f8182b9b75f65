"""Contract checks of the skinny split-K template (kernel_templates/gemm/skinny.py).

CPU cases run in the Triton interpreter (tiny shapes, fp16/fp32: bf16 tl.dot is wrong there):
every mode and split against a float64 reference on random inputs into NaN-poisoned outputs,
back-to-back calls, counters left at zero, and the barrier's bounded spin (the interpreter runs
programs one after another, so a forced barrier must give up and write NaN, never hang).
``gpu`` cases run bf16 on the real shapes."""

from __future__ import annotations

import pytest
import torch

from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm import skinny
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_matmul, rel_error, tolerance
from kernel_templates.gemm.skinny import check_skinny_config, matmul_skinny
from search.kinds.gemm.spec import GemmProblem
from tests.kernel_templates.skinny_check import clean


def cfg(split_k: int = 2, mode: str = "barrier", bm: int = 16, bn: int = 32, bk: int = 16,
        **kw: int) -> dict:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split_k, num_warps=4, num_stages=2,
                MODE=mode, **kw)


def check(problem: GemmProblem, config: dict, device: str, seed: int = 0) -> torch.Tensor:
    inp = make_inputs(problem, device, seed)
    assert torch.isnan(inp.out).all()
    res = matmul_skinny(inp.a, inp.b, config, out=inp.out)
    assert res is inp.out
    err = rel_error(inp.out, reference_matmul(inp.a, inp.b))
    assert err <= tolerance(problem), (problem, config, err)
    assert clean(device)
    return inp.out.clone()


@pytest.mark.parametrize("mode", skinny.MODES)
@pytest.mark.parametrize("split_k", [1, 2, 4])
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize(("m", "n", "k"), [(16, 64, 256), (33, 65, 97)])
def test_modes(mode: str, split_k: int, dtype: str, m: int, n: int, k: int,
               device: str) -> None:
    # (16, 64, 256) is the even path (no masks); (33, 65, 97) ragged in M, N and K, where the
    # last K slice is short (97 = 3 slices of 32 + 1) or empty.
    p = GemmProblem(m=m, n=n, k=k, dtype=dtype)
    first = check(p, cfg(split_k, mode), device, seed=split_k)
    again = check(p, cfg(split_k, mode), device, seed=split_k)  # back to back, same inputs
    if mode != "atomic":
        assert torch.equal(first, again)  # fixed summation order
    check(p, cfg(split_k, mode), device, seed=split_k + 100)  # and on fresh inputs


@pytest.mark.parametrize("mode", skinny.MODES)
def test_layouts_and_long_k(mode: str, device: str) -> None:
    # Column-major operands; a long K cut in 8 with the share-wise reduction in chunks.
    for la, lb in (("col", "col"), ("row", "col"), ("col", "row")):
        p = GemmProblem(m=32, n=32, k=300, dtype="fp16", layout_a=la, layout_b=lb)
        check(p, cfg(4, mode), device, seed=7)
    p = GemmProblem(m=16, n=32, k=1024, dtype="fp32")
    check(p, cfg(8, mode, bk=32), device, seed=3)


@pytest.mark.parametrize("mode", skinny.MODES)
@pytest.mark.parametrize(("m", "n", "k", "split_k", "dtype"), [
    (16, 64, 256, 3, "fp16"), (33, 65, 97, 5, "fp32"), (32, 32, 1000, 33, "fp16"),
    (16, 32, 4096, 7, "fp32"),
])
def test_splits_of_any_count(mode: str, m: int, n: int, k: int, split_k: int, dtype: str,
                             device: str) -> None:
    # Splits that are no power of two (grids that fill 132 SMs: 4 tiles x 33): shares of
    # ceil(tile / SPLIT_K) elements, the last cut short; K slices whose last ones are shorter
    # or empty (k=1000 in 33: slices of 32, the last 8; 97 in 5: slices of 32, the last empty)
    p = GemmProblem(m=m, n=n, k=k, dtype=dtype)
    config = cfg(split_k, mode, bk=16 if k < 1000 else 32)
    first = check(p, config, device, seed=split_k)
    if mode != "atomic":
        assert torch.equal(first, check(p, config, device, seed=split_k))


def test_modes_agree_bitwise(device: str) -> None:
    # "barrier" falls back to "two_launch" in the interpreter; on a GPU both run the same sum.
    p = GemmProblem(m=48, n=64, k=200, dtype="fp16")
    outs = [check(p, cfg(4, mode), device, seed=5) for mode in ("barrier", "two_launch")]
    assert torch.equal(outs[0], outs[1])


def test_out_dtype_and_new_output(device: str) -> None:
    p = GemmProblem(m=16, n=32, k=64, dtype="fp16")
    inp = make_inputs(p, device, 1)
    ref = reference_matmul(inp.a, inp.b)
    res = matmul_skinny(inp.a, inp.b, cfg(2))
    assert res.dtype == torch.float16 and res.shape == (16, 32)
    assert rel_error(res, ref) <= tolerance(p)
    out32 = torch.full((16, 32), float("nan"), dtype=torch.float32, device=device)
    matmul_skinny(inp.a, inp.b, cfg(2, "atomic"), out=out32)
    assert rel_error(out32, ref) <= tolerance(p)


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter-only: programs run in turn")
def test_forced_barrier_in_interpreter_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # Programs run one after another: all but the last wait in vain, give up after SPIN_LIMIT
    # polls and write NaN into their share; the arrival count ends on a multiple of the grid,
    # and the next normal call is right. A bounded spin: this test finishing is the no-hang check.
    monkeypatch.setattr(skinny, "INTERPRETER_BARRIER", True)
    monkeypatch.setattr(skinny, "SPIN_LIMIT", 3)
    monkeypatch.setattr(skinny, "_ARRIVALS", {})
    p = GemmProblem(m=32, n=32, k=64, dtype="fp16")
    for launch in (1, 2):
        inp = make_inputs(p, "cpu", launch)
        matmul_skinny(inp.a, inp.b, cfg(2), out=inp.out)
        # 2 tiles x 2 slices = 4 programs, each owning 256 of the 1024 outputs; 3 gave up.
        # The second launch counts on from the first's 4 arrivals: its barrier opens at 8, not
        # at once on the count the first launch left.
        assert int(torch.isnan(inp.out).sum()) == 3 * 256
        assert int(skinny._ARRIVALS[torch.device("cpu")][4]) == 4 * launch
        assert clean("cpu")
    monkeypatch.setattr(skinny, "INTERPRETER_BARRIER", False)
    check(p, cfg(2), "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter-only: programs run in turn")
def test_forced_tagged_wait_in_interpreter_takes_only_its_own_launch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Programs run one after another: a program of K slice 0 waits in vain for slice 1 of its
    # own tile (the later program) and writes NaN into its share; the slice-1 programs find
    # both partials. The second call must not take the first call's partials, still in the
    # workspace, for its own: they carry the earlier epoch. A bounded spin: no hang.
    monkeypatch.setattr(skinny, "INTERPRETER_BARRIER", True)
    monkeypatch.setattr(skinny, "SPIN_LIMIT", 3)
    p = GemmProblem(m=32, n=32, k=64, dtype="fp16")
    for seed in (0, 1):
        before = skinny._EPOCH.get(torch.device("cpu"), 0)
        inp = make_inputs(p, "cpu", seed)
        matmul_skinny(inp.a, inp.b, cfg(2, "tagged"), out=inp.out)
        assert skinny._EPOCH[torch.device("cpu")] == before + 1
        # 2 tiles x 2 slices = 4 programs, each owning 256 of the 1024 outputs: the two of
        # slice 0 gave up, the two of slice 1 summed both partials
        nan = torch.isnan(inp.out)
        assert int(nan.sum()) == 2 * 256
        ref = reference_matmul(inp.a, inp.b)
        assert rel_error(inp.out[~nan], ref[~nan]) <= tolerance(p)
    monkeypatch.setattr(skinny, "INTERPRETER_BARRIER", False)
    check(p, cfg(2, "tagged"), "cpu")


def test_the_tagged_mode_runs_as_the_barrier_under_graph_capture(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A captured graph would replay one epoch, so under capture the tagged mode launches the
    # barrier. Forced in the interpreter (programs in turn, bounded waits), the two leave
    # different NaN patterns: the barrier 3 of 4 shares, the tagged mode 2 of 4.
    monkeypatch.setattr(skinny, "INTERPRETER_BARRIER", True)
    monkeypatch.setattr(skinny, "SPIN_LIMIT", 3)
    p = GemmProblem(m=32, n=32, k=64, dtype="fp16")
    dev = torch.device("cpu")
    for capturing, nan_shares, epochs in ((True, 3, 0), (False, 2, 1)):
        monkeypatch.setattr(skinny, "_capturing", lambda device, c=capturing: c)
        before = skinny._EPOCH.get(dev, 0)
        inp = make_inputs(p, "cpu", 3)
        matmul_skinny(inp.a, inp.b, cfg(2, "tagged"), out=inp.out)
        assert int(torch.isnan(inp.out).sum()) == nan_shares * 256
        assert skinny._EPOCH.get(dev, 0) == before + epochs


def test_barrier_grid_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    # On a GPU a barrier (or tagged) grid larger than the SM count is refused, never launched.
    monkeypatch.setattr(skinny, "_interpreting", lambda device: False)
    monkeypatch.setattr(skinny, "_sm_count", lambda device: 3)
    a = torch.randn(32, 64, dtype=torch.float16)
    b = torch.randn(64, 32, dtype=torch.float16)
    for mode in ("barrier", "tagged"):
        with pytest.raises(Unsupported, match="at most 3 programs"):
            matmul_skinny(a, b, cfg(2, mode))  # 2 tiles x 2 slices


@pytest.mark.parametrize("bad", [
    {"BLOCK_M": 24}, {"SPLIT_K": 0}, {"BLOCK_K": 8}, {"num_stages": 0}, {"MODE": "serial"},
    {"TMA": 2}, {"GROUP_M": 8}, {"SPLIT_K": 1024}, {"SWAP": 2}, {"SWAP": 1, "TMA": 0},
])
def test_invalid_configs(bad: dict) -> None:
    with pytest.raises(InvalidConfig):
        check_skinny_config({**cfg(2), **bad})
    with pytest.raises(InvalidConfig, match="lacks"):
        check_skinny_config({"BLOCK_M": 16})


def test_config_defaults() -> None:
    c = check_skinny_config({k: v for k, v in cfg(2).items() if k != "MODE"})
    assert c["MODE"] == "barrier" and c["TMA"] == 1 and c["SWAP"] == 0


def test_swap_needs_tma() -> None:
    with pytest.raises(InvalidConfig, match="SWAP=1 .* TMA=1"):
        check_skinny_config(cfg(2, SWAP=1, TMA=0))
    # the interpreter (CPU tensors) has no TMA path: a swapped config is refused, not run
    # unswapped
    a = torch.randn(32, 64, dtype=torch.float16)
    b = torch.randn(64, 64, dtype=torch.float16)
    with pytest.raises(Unsupported, match="SWAP=1 needs TMA loads"):
        matmul_skinny(a, b, cfg(2, "two_launch", 32, 64, SWAP=1))


def test_bad_inputs() -> None:
    a = torch.randn(16, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match="compose"):
        matmul_skinny(a, torch.randn(16, 32, dtype=torch.float16), cfg(2))
    with pytest.raises(TypeError):
        matmul_skinny(a, torch.randn(32, 16, dtype=torch.float32), cfg(2))
    with pytest.raises(Unsupported):
        matmul_skinny(a.to(torch.int8), torch.randn(32, 16).to(torch.int8), cfg(2))
    with pytest.raises(ValueError, match="contiguous"):
        matmul_skinny(a, torch.randn(32, 16, dtype=torch.float16), cfg(2),
                      out=torch.empty(16, 8, dtype=torch.float16))


# -- GPU (bf16, real shapes) ------------------------------------------------------------------

GPU_CASES = [
    ((16, 4096, 4096), cfg(8, "barrier", 16, 256, 64, TMA=1)),
    ((16, 4096, 4096), cfg(4, "atomic", 16, 128, 128)),
    ((16, 4096, 4096), cfg(2, "barrier", 16, 64, 128, TMA=0)),
    ((64, 64, 65536), cfg(128, "barrier", 64, 64, 128)),
    ((64, 64, 65536), cfg(128, "barrier", 64, 64, 128, TMA=0)),
    ((64, 64, 65536), cfg(64, "barrier", 64, 32, 128)),
    ((64, 64, 65536), cfg(256, "atomic", 64, 64, 128)),
    ((64, 64, 65536), cfg(128, "two_launch", 64, 64, 128)),
    ((48, 1000, 20000), cfg(8, "barrier", 16, 128, 64)),  # grid 3*8*8 = 192 > SMs: refused
    ((48, 1000, 20000), cfg(4, "barrier", 16, 128, 64)),  # ragged M, N, K; grid 96
    ((48, 1000, 20000), cfg(4, "barrier", 16, 256, 64, TMA=0)),
    ((48, 1000, 20000), cfg(16, "atomic", 64, 64, 128)),
    # swapped (wgmma on the B tile): ragged M and K, B in both layouts
    ((48, 1000, 20000), cfg(4, "barrier", 16, 64, 128, TMA=1, SWAP=1)),
    ((48, 1000, 20000), cfg(4, "tagged", 32, 128, 64, TMA=1, SWAP=1)),
    ((48, 1000, 20000), cfg(4, "two_launch", 16, 64, 128, TMA=1, SWAP=1)),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("shape", "config"), GPU_CASES)
@pytest.mark.parametrize("layout_b", ["row", "col"])
def test_gpu_shapes(shape: tuple[int, int, int], config: dict, layout_b: str) -> None:
    m, n, k = shape
    p = GemmProblem(m=m, n=n, k=k, dtype="bf16", layout_b=layout_b)
    if config["MODE"] == "barrier" and skinny.grid_size(m, n, config) > (
            torch.cuda.get_device_properties(0).multi_processor_count):
        inp = make_inputs(p, "cuda", 0)
        with pytest.raises(Unsupported):
            matmul_skinny(inp.a, inp.b, config, out=inp.out)
        return
    outs = []
    for seed in (0, 0, 1, 1):  # back to back, twice per input set, into poisoned outputs
        outs.append(check(p, config, "cuda", seed=seed))
    if config["MODE"] != "atomic":
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[2], outs[3])
