"""Contract checks of the attention kernels: fresh random inputs, poisoned outputs, the
reference (bottom-right causal mask, grouped queries), every backend a CPU worker has
(``sdpa_math``, ``triton``, ``triton_decode`` in the interpreter) through the worker's own check
(``workers.checking``) on ragged fp16/fp32 shapes, broken kernels failing the tolerance, and the
configs' checks. bf16 and the CUDA-only backends are ``gpu`` tests
(``test_attention_gpu.py``): ``tl.dot`` on bf16 is wrong in the interpreter."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
import torch

from kernel_templates import registry
from kernel_templates.attention.inputs import make_inputs
from kernel_templates.attention.reference import TOLERANCE, reference, rel_error, tolerance
from kernel_templates.attention.triton import flash_attention
from kernel_templates.errors import InvalidConfig, Unsupported
from search.kinds.attention.spec import AttentionProblem
from search.types import Candidate, Device
from tests.kernel_templates.attention_check import problem, run_checked
from workers.checking import fresh_inputs

FLASH = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2}
DECODE = {"NUM_SPLITS": 2, "BLOCK_N": 16, "num_warps": 4}
CPU_BACKENDS = ("sdpa_math", "triton", "triton_decode")


def naive(p: AttentionProblem, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
          ) -> torch.Tensor:
    """Attention row by row in float64, straight from the spec (an independent reference)."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    for b in range(p.batch):
        for h in range(p.heads):
            kh = h // p.group
            for i in range(p.s_q):
                keys = [j for j in range(p.s_kv)
                        if not p.causal or j <= i + p.s_kv - p.s_q]
                if not keys:
                    continue
                s = torch.stack([p.scale * (q[b, h, i].double() @ k[b, kh, j].double())
                                 for j in keys])
                w = torch.softmax(s, dim=0)
                out[b, h, i] = sum(w[n] * v[b, kh, j].double() for n, j in enumerate(keys))
    return out


# -- inputs and reference -------------------------------------------------------------------
def test_inputs_are_fresh_poisoned_and_give_unit_scores() -> None:
    p = problem(s_q=64, s_kv=64, d=64, heads=4, kv_heads=2, scale=0.3)
    a, b = make_inputs(p, "cpu", 1), make_inputs(p, "cpu", 2)
    assert a.q.shape == (1, 4, 64, 64) and a.k.shape == a.v.shape == (1, 2, 64, 64)
    assert a.out.shape == a.q.shape and a.out.dtype == torch.float16
    assert torch.isnan(a.out).all()
    assert not torch.equal(a.q, b.q) and not torch.equal(a.k, b.k)
    assert all(bool((t != 0).any()) and bool(torch.isfinite(t).all()) for t in (a.q, a.k, a.v))
    scores = p.scale * a.q.double() @ a.k.double().repeat_interleave(2, dim=1).transpose(2, 3)
    assert 0.8 < float(scores.std()) < 1.2  # O(1) scores whatever the scale


@pytest.mark.parametrize(("s_q", "s_kv"), [(5, 7), (7, 5), (6, 6)])
@pytest.mark.parametrize("causal", [False, True])
def test_reference_is_bottom_right_and_grouped(s_q: int, s_kv: int, causal: bool) -> None:
    p = problem(s_q=s_q, s_kv=s_kv, causal=causal, dtype="fp32", heads=4, kv_heads=2,
                batch=2)
    inp = make_inputs(p, "cpu", 0)
    ref = reference(p, inp)
    assert ref.dtype == torch.float64
    assert torch.allclose(ref, naive(p, inp.q, inp.k, inp.v), atol=1e-12)
    if causal and s_q > s_kv:  # the first s_q - s_kv queries see no key: zeros
        assert bool((ref[:, :, : s_q - s_kv] == 0).all())
    if causal:  # the last query sees every key, as without the mask
        full = reference(dataclasses.replace(p, causal=False), inp)
        assert torch.allclose(ref[:, :, -1], full[:, :, -1])


def test_rel_error_and_tolerance() -> None:
    ref = torch.randn(2, 3, 4, 16, dtype=torch.float64)
    assert rel_error(ref.float(), ref) < 1e-6
    poisoned = ref.clone()
    poisoned[0, 0, 0, 0] = math.nan
    assert rel_error(poisoned, ref) == math.inf
    assert [tolerance(problem(dtype=d)) for d in ("bf16", "fp16", "fp32")] == [2e-2, 5e-3, 1e-4]


# -- every CPU backend through the worker's check ---------------------------------------------
SHAPES = [(32, 48), (33, 47), (48, 32), (1, 1)]


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("s_q", "s_kv"), SHAPES)
@pytest.mark.parametrize("backend", ["sdpa_math", "triton"])
def test_prefill_backends_match_the_reference(backend: str, s_q: int, s_kv: int,
                                              causal: bool, dtype: str, device: str) -> None:
    p = problem(s_q=s_q, s_kv=s_kv, causal=causal, dtype=dtype)
    err, tol = run_checked(p, backend, FLASH if backend == "triton" else {}, device)
    assert err <= tol / 5, (p.describe(), backend, err)  # correct kernels pass with headroom


@pytest.mark.parametrize("config", [{"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 2,
                                     "num_stages": 1},
                                    {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 4,
                                     "num_stages": 3}])
@pytest.mark.parametrize("causal", [False, True])
def test_triton_tiles_and_grouped_heads(config: dict[str, Any], causal: bool,
                                        device: str) -> None:
    # 4 query heads over 2 key/value heads, batch 2, d 32: the head mapping and strides
    p = problem(s_q=40, s_kv=72, causal=causal, heads=4, kv_heads=2, d=32, batch=2)
    err, tol = run_checked(p, "triton", config, device, seed=7)
    assert err <= tol / 5, (config, err)


@pytest.mark.parametrize("options", [{"TMA": 1}, {"PERSISTENT": 1}, {"TMA": 1, "PERSISTENT": 1}])
@pytest.mark.parametrize("causal", [False, True])
def test_triton_hopper_options(options: dict[str, int], causal: bool, device: str) -> None:
    """Tensor descriptors over the flattened heads and the persistent tile walk (the heaviest
    causal blocks first) compute the same attention, with grouped heads and s_q != s_kv."""
    p = problem(s_q=48, s_kv=64, causal=causal, heads=4, kv_heads=2, d=32, batch=2)
    err, tol = run_checked(p, "triton", {**FLASH, **options}, device, seed=5)
    assert err <= tol / 5, (options, err)


def test_tma_refuses_tiles_that_cross_heads() -> None:
    """A TMA tile must never read the next head's rows: ragged lengths are refused by the
    launcher, the worker's static check and the search's rule alike."""
    p = problem(s_q=40, s_kv=64)
    config = {**FLASH, "TMA": 1}
    sets, _ = fresh_inputs(p, "cpu", 0, n_sets=1)
    with pytest.raises(InvalidConfig, match="s_q % BLOCK_M"):
        registry.make_callable(Candidate(p, "triton", config), sets[0])()
    assert any("s_q % BLOCK_M" in r for r in
               registry.static_violations(Candidate(p, "triton", config), "cuda", 232_448))


@pytest.mark.filterwarnings("ignore:All-NaN slice")
def test_causal_programs_never_load_masked_blocks(device: str) -> None:
    # keys 16.. poisoned with NaN: the program of rows 0..15 (BLOCK_M = BLOCK_N = 16) stays
    # finite and right only if it never loads a block its causal mask removes entirely
    p = problem(s_q=64, s_kv=64, causal=True, dtype="fp32")
    inp = make_inputs(p, device, 0)
    ref = reference(p, inp)
    inp.k[:, :, 16:] = math.nan
    inp.v[:, :, 16:] = math.nan
    flash_attention(inp.q, inp.k, inp.v, inp.out, p, FLASH)
    assert rel_error(inp.out[:, :, :16], ref[:, :, :16]) <= tolerance(p)
    assert torch.isnan(inp.out[:, :, 16:]).all()  # the rows that see the poison do read it


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("s_q", "s_kv", "splits"), [(1, 48, 1), (1, 48, 3), (5, 47, 2),
                                                      (16, 100, 4), (5, 3, 1),
                                                      (1, 100, 6)])  # 2 empty splits
def test_decode_matches_the_reference(s_q: int, s_kv: int, splits: int, causal: bool,
                                      dtype: str, device: str) -> None:
    p = problem(s_q=s_q, s_kv=s_kv, causal=causal, dtype=dtype, heads=4, kv_heads=2, batch=2)
    err, tol = run_checked(p, "triton_decode", {**DECODE, "NUM_SPLITS": splits}, device)
    assert err <= tol / 5, (p.describe(), splits, err)
    sdpa_err, _ = run_checked(p, "sdpa_math", {}, device)
    assert sdpa_err <= tol / 5


# -- a wrong kernel never passes ------------------------------------------------------------------
def _flash_on(shape: dict[str, Any]) -> registry.Factory:
    """A broken factory: the flash kernel told a different problem than the tensors hold."""
    def factory(cand: Candidate, inp: Any) -> Any:
        wrong = dataclasses.replace(cand.problem, **shape)
        return lambda: flash_attention(inp.q, inp.k, inp.v, inp.out, wrong, FLASH)
    return factory


def _top_left_sdpa(cand: Candidate, inp: Any) -> Any:
    """SDPA's own ``is_causal`` (top-left aligned) for a problem with s_q != s_kv."""
    return lambda: inp.out.copy_(torch.nn.functional.scaled_dot_product_attention(
        inp.q, inp.k, inp.v, is_causal=True, scale=cand.problem.scale, enable_gqa=True))


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize(("name", "factory", "causal"), [
    ("drops_last_key_block", _flash_on({"s_kv": 48 - FLASH["BLOCK_N"]}), False),
    ("mask_off_by_one", _flash_on({"s_kv": 47}), True),  # the diagonal one key to the left
    ("forgets_last_row", _flash_on({"s_q": 31, "s_kv": 47}), True),  # same diagonal
    ("top_left_causal", _top_left_sdpa, True),
])
def test_broken_kernels_fail_the_tolerance(name: str, factory: registry.Factory, causal: bool,
                                           dtype: str, monkeypatch: pytest.MonkeyPatch,
                                           device: str) -> None:
    monkeypatch.setitem(registry.FACTORIES, ("attention", name), factory)
    p = problem(s_q=32, s_kv=48, causal=causal, dtype=dtype)
    err, tol = run_checked(p, name, {}, device)
    assert err > tol, (name, err, tol)
    assert err > 2 * TOLERANCE["bf16"], (name, err)  # beyond even bf16's bound


def test_a_dropped_decode_split_fails(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    from kernel_templates.attention.decode import DecodeWorkspace, decode_attention

    def one_split_short(cand: Candidate, inp: Any) -> Any:
        # told s_kv=32, the two splits cover 32 of the 48 keys: the last block is never read
        ws = DecodeWorkspace.allocate(cand.problem, 2, inp.q.device)
        short = dataclasses.replace(cand.problem, s_kv=32)
        return lambda: decode_attention(inp.q, inp.k, inp.v, inp.out, short, DECODE, ws)

    monkeypatch.setitem(registry.FACTORIES, ("attention", "short"), one_split_short)
    p = problem(s_q=1, s_kv=48, heads=4, kv_heads=2)
    err, tol = run_checked(p, "short", {}, device)
    assert err > 10 * tol


# -- registration, availability, configs and static checks ---------------------------------------
def test_registered_backends_and_availability() -> None:
    assert set(registry.backends("attention")) == {
        "sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "sdpa_math", "flex", "triton",
        "triton_decode"}
    cpu = Device(gpu_model="cpu", mode="interpreter")
    h100 = Device(gpu_model="H100", mode="cuda", cc="9.0", smem_per_block=232_448)
    found = registry.availability(cpu)
    offered = {b for (k, b), why in found.items() if k == "attention" and why is None}
    assert offered == set(CPU_BACKENDS)
    assert "CUDA" in str(found[("attention", "sdpa_cudnn")])
    on_gpu = registry.availability(h100)
    assert all(why is None for (k, _), why in on_gpu.items() if k == "attention")
    assert all(registry.warms_up("attention", b) for b in ("triton", "triton_decode", "flex"))


def test_what_a_backend_refuses() -> None:
    with pytest.raises(Unsupported, match="s_q <= 16"):
        registry.check_supported("triton_decode", problem(s_q=17))
    for backend in ("sdpa_cudnn", "sdpa_flash"):
        with pytest.raises(Unsupported, match="bf16 and fp16"):
            registry.check_supported(backend, problem(dtype="fp32"))
    p = problem()
    sets, _ = fresh_inputs(p, "cpu", 0, n_sets=1)
    with pytest.raises(Unsupported, match="CUDA"):
        registry.make_callable(Candidate(p, "flex"), sets[0])
    with pytest.raises(InvalidConfig, match="no config"):
        registry.make_callable(Candidate(p, "sdpa_math", {"BLOCK_M": 16}), sets[0])


@pytest.mark.parametrize(("backend", "config", "match"), [
    ("triton", {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4}, "lacks"),
    ("triton", {**FLASH, "BLOCK_K": 16}, "unknown"),
    ("triton", {**FLASH, "BLOCK_M": 24}, "BLOCK_M"),
    ("triton", {**FLASH, "BLOCK_N": 8}, "BLOCK_N"),
    ("triton", {**FLASH, "num_warps": 3}, "num_warps"),
    ("triton_decode", {**DECODE, "NUM_SPLITS": 0}, "NUM_SPLITS"),
    ("triton_decode", {**DECODE, "num_stages": 9}, "num_stages"),
])
def test_bad_configs_are_invalid_before_any_launch(backend: str, config: dict[str, Any],
                                                   match: str) -> None:
    p = problem(s_q=4)
    sets, _ = fresh_inputs(p, "cpu", 0, n_sets=1)
    with pytest.raises(InvalidConfig, match=match):
        registry.make_callable(Candidate(p, backend, config), sets[0])
    assert registry.static_violations(Candidate(p, backend, config), "cuda", 232_448)


def test_static_checks() -> None:
    def reasons(p: AttentionProblem, backend: str, config: dict[str, Any], mode: str = "cuda",
                smem: int = 232_448) -> list[str]:
        return registry.static_violations(Candidate(p, backend, config), mode, smem)

    big = problem(s_q=4096, s_kv=4096, d=128, dtype="bf16", heads=8, kv_heads=8)
    good = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
    assert reasons(big, "triton", good) == []
    huge = {"BLOCK_M": 256, "BLOCK_N": 256, "num_warps": 4, "num_stages": 4}
    assert any("shared memory" in r for r in reasons(big, "triton", huge))
    assert any("register" in r for r in reasons(big, "triton", huge))
    assert reasons(big, "triton", huge, mode="interpreter", smem=0) == []
    assert any("shared memory" in r for r in reasons(big, "triton", good, smem=48 * 1024))
    d256 = dataclasses.replace(big, d=256)
    assert any("shared memory" in r for r in reasons(
        d256, "triton", {**good, "BLOCK_N": 128, "num_stages": 4}))

    decode = problem(s_q=1, s_kv=8192, d=128, dtype="bf16", heads=32, kv_heads=8, batch=64)
    dgood = {"NUM_SPLITS": 16, "BLOCK_N": 64, "num_warps": 4}
    assert reasons(decode, "triton_decode", dgood) == []
    assert any("no key" in r for r in reasons(
        dataclasses.replace(decode, s_kv=100), "triton_decode", dgood))
    assert any("s_q <= 16" in r for r in reasons(
        dataclasses.replace(decode, s_q=32), "triton_decode", dgood))
