"""The new GEMM kernels compile for sm_90 without a GPU (Triton's compiler and its bundled ptxas,
in a process of its own: ``gemm_sm90_compile``), and the PTX has what they are for: stream-K
issues TMA bulk-tensor loads and ``wgmma`` on its TMA path, waits with acquire loads and
publishes with a release exchange; the skinny kernel's tagged reduction stores each partial
value with its epoch in one relaxed 64-bit store (two adjacent ones in one 16-byte store) and
polls without atomics, its barrier arrives once with no departure, and its swapped K loop runs a
32-row tile on ``wgmma``; the repair's copy stores 16-byte vectors into the aligned scratch
(given the alignment Triton's JIT marks on the arguments) while it reads an unaligned source
element by element. This catches what the interpreter cannot: a construct Triton's compiler
rejects (loop-carried types, constexpr branches). Nothing here runs a kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from search.limits import DeviceLimits

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled() -> dict[str, dict[str, int]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", "tests.kernel_templates.gemm_sm90_compile"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode and "ptxas" in done.stderr:
        pytest.skip(f"no CUDA toolchain in this Triton build: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_stream_k_compiles_to_tma_wgmma_and_the_flag_protocol(compiled) -> None:
    for case in ("streamk_tma", "streamk_stacked"):
        assert any(k.startswith("cp.async.bulk.tensor") for k in compiled[case])
        assert any(k.startswith("wgmma.mma_async") for k in compiled[case])
    # a stacked tile issues one B load and three A loads per K step, and three products
    stacked = compiled["streamk_stacked"]
    loads = sum(v for k, v in stacked.items() if k.startswith("cp.async.bulk.tensor"))
    assert loads >= 4 and loads % 4 == 0
    products = sum(v for k, v in stacked.items() if k.startswith("wgmma.mma_async"))
    assert products >= 3 and products % 3 == 0
    for case in ("streamk_tma", "streamk_pointer", "streamk_stacked"):
        got = compiled[case]
        assert got.get("atom.global.gpu.release.exch.b32")  # a contributor raises its flag
        assert got.get("ld.global.gpu.acquire.b32")  # an owner polls it
        assert any(k.startswith("ld.global.cg") for k in got)  # partials read from L2


@pytest.mark.parametrize("case", ["repair_trans_b_0", "repair_trans_b_1"])
def test_the_repair_copy_stores_aligned_vectors(compiled, case: str) -> None:
    got = compiled[case]
    assert got.get("st.global.v4.b32") and not got.get("st.global.b16")
    assert got.get("ld.global.b16")  # the unaligned source, element by element


def test_the_skinny_tagged_reduction_stores_tagged_words_and_waits_without_atomics(
        compiled) -> None:
    tagged, barrier = compiled["skinny_tagged"], compiled["skinny_barrier"]
    assert tagged.get("st.relaxed.gpu.global.b64")  # value and epoch in one strong store
    # two adjacent words of a thread in one 16-byte strong store (TAGGED_PAIRS)
    assert tagged.get("st.relaxed.gpu.global.v2.b64")
    assert any(k.startswith("ld.volatile.global") for k in tagged)  # the polls
    assert not any(k.startswith("atom") for k in tagged)  # no barrier, no counters
    # the barrier: one arrival (a 64-bit count that only grows), polled with acquire loads, and
    # no departure (GROWING_BARRIER)
    assert barrier == {**barrier, "atom.global.gpu.acq_rel.add.u64": 1}
    assert sum(v for k, v in barrier.items() if k.startswith("atom")) == 1


def test_the_swapped_skinny_tile_runs_on_wgmma(compiled) -> None:
    # a 32-row tile: mma.sync as it is; swapped (C^T = B^T A^T), wgmma with the 64 columns as
    # its M and the 32 rows as its N, and no mma.sync left
    plain, swapped = compiled["skinny_tma_swap_0"], compiled["skinny_tma_swap_1"]
    assert any(k.startswith("mma.sync") for k in plain)
    assert not any(k.startswith("wgmma") for k in plain)
    assert any(k.startswith("wgmma.mma_async.sync.aligned.m64n32k16") for k in swapped)
    assert not any(k.startswith("mma.sync") for k in swapped)
    for got in (plain, swapped):
        assert any(k.startswith("cp.async.bulk.tensor") for k in got)


def test_the_stream_k_and_skinny_seeds_of_the_hard_shapes_fit_sm90_shared_memory() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    shapes = ["192x6144x6144", "320x4096x12288", "128x128x262144", "32x512x98304"]
    done = subprocess.run([sys.executable, "-m", "tests.kernel_templates.gemm_sm90_compile",
                           "--seeds", *shapes], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    if done.returncode and "ptxas" in done.stderr:
        pytest.skip(f"no CUDA toolchain in this Triton build: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    shared = json.loads(done.stdout.strip().splitlines()[-1])
    for tier in ("stream_k 192x", "stream_k 320x", "skinny 128x", "skinny 32x"):
        assert any(key.startswith(tier) for key in shared), tier
    over = {key: v for key, v in shared.items() if v > DeviceLimits().smem_per_block}
    assert not over
