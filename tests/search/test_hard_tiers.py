"""When the hard-shape tiers are planned (search.kinds.gemm.hard_tiers), from the shape's
alignment, its tile count and the device's SM count and memory; the repair's plan arithmetic
(search.kinds.gemm.alignment); the library side of the repair; the tiers' spaces and tuners."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from search.decision import Policy, TierPlan
from search.kinds.gemm import GEMM, hard_tiers, repair_space, skinny_space, streamk_space
from search.kinds.gemm.alignment import (
    RepairPlan,
    b_layouts,
    describe_unaligned,
    repair_fits,
    split_applies,
    unaligned,
)
from search.kinds.gemm.cutlass_catalogue import Catalogue, OpSpec
from search.kinds.gemm.hard_tuner import hard_tuner
from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_space import tier_plans as tiled_tier_plans
from search.limits import DeviceLimits
from service.agent_loop import allowed_tiers

HARD = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "gemm_hard.json"
PUBLIC = HARD.with_name("gemm_public.json")
H100 = {"mode": "cuda", "cc": "9.0", "sm_count": 132, "memory_bytes": 80 << 30}


def plans(problem: GemmProblem, device: dict | None = None) -> tuple[TierPlan, ...]:
    return GEMM.tier_plans(problem, device or H100, Policy())


def applicable(problem: GemmProblem, device: dict | None = None) -> list[str]:
    return [t.name for t in plans(problem, device) if t.applicable]


def shape(index: int) -> GemmProblem:
    s = json.loads(HARD.read_text())["shapes"][index]
    return GemmProblem(s["m"], s["n"], s["k"])


# -- the hard shapes, each planned for its class --------------------------------------------------
@pytest.mark.parametrize(("index", "first"), [
    (0, ["repair"]),                      # 999x2047x1537: k and n unaligned, 128 tiles
    (1, ["repair"]),                      # 4000x4000x4001: k unaligned, 1024 tiles
    (2, ["repair", "repair_stream_k"]),   # 511x1024x4097: k unaligned, 32 tiles
    (3, ["skinny"]),                      # 128x128x262144
    (4, ["skinny"]),                      # 32x512x98304
    (5, ["stream_k"]),                    # 192x6144x6144: 96 tiles
    (6, ["stream_k"]),                    # 320x4096x12288: 96 tiles
])
def test_each_hard_shape_gets_its_tiers_first(index: int, first: list[str]) -> None:
    tiers = plans(shape(index))
    names = [t.name for t in tiers]
    assert names[:len(first)] == first and all(t.applicable for t in tiers[:len(first)])
    others = set(hard_tiers.TIERS) - set(first)
    assert not any(t.applicable for t in tiers if t.name in others)
    # every tier is listed, with a reason, whether it applies or not
    assert set(hard_tiers.TIERS) <= set(names) and all(t.reason for t in tiers)


@pytest.mark.parametrize("index", [7, 8])  # decode GEMV: the tiled tiers already win there
def test_decode_gemv_keeps_the_tiled_tiers_and_nothing_else(index: int) -> None:
    problem = shape(index)
    base = tiled_tier_plans(problem, mode="cuda", cc="9.0", sm_count=132, allow_tf32=False)
    tiers = plans(problem)
    assert tiers[:len(base)] == base
    assert not any(t.applicable for t in tiers[len(base):])


def test_public_shapes_keep_their_tiled_tiers_unchanged() -> None:
    for s in json.loads(PUBLIC.read_text())["shapes"]:
        if s.get("dtype", "bf16") not in hard_tiers.DTYPES:
            continue
        p = GemmProblem(s["m"], s["n"], s["k"], dtype=s.get("dtype", "bf16"))
        base = tiled_tier_plans(p, mode="cuda", cc="9.0", sm_count=132, allow_tf32=False)
        tiers = plans(p)
        # the tiled tiers keep their order, plans and reasons; new tiers go first only where
        # they apply
        assert [t for t in tiers if t.name not in (*hard_tiers.TIERS, "fp8")] == list(base)
        new = [t.name for t in tiers if t.name in hard_tiers.TIERS and t.applicable]
        assert [t.name for t in tiers[:len(new)]] == new


def test_unaligned_operands_skip_the_tma_tier_and_say_why() -> None:
    tiers = {t.name: t for t in plans(GemmProblem(999, 2047, 1537))}
    assert not tiers["hopper"].applicable and "TMA cannot describe" in tiers["hopper"].reason
    assert "rows of A (k=1537 bf16)" in tiers["repair"].reason
    assert tiers["tiles"].applicable  # the pointer kernels still run on the raw operands
    aligned = {t.name: t for t in plans(GemmProblem(1000, 3000, 2000))}
    assert aligned["hopper"].applicable and not aligned["repair"].applicable


def test_stream_k_follows_the_sm_count() -> None:
    p = GemmProblem(192, 6144, 6144)  # 96 tiles of 128x128
    assert "stream_k" in applicable(p)
    assert "stream_k" not in applicable(p, {**H100, "sm_count": 96})  # one full wave
    assert "stream_k" in applicable(p, {**H100, "sm_count": 64})  # 2 waves, the last half full
    short = GemmProblem(192, 6144, 512)  # too few K iterations to deal out
    assert "stream_k" not in applicable(short)
    skinny_m = GemmProblem(32, 6144, 6144)
    assert "stream_k" not in applicable(skinny_m)


def test_skinny_follows_the_sm_count_and_k() -> None:
    p = GemmProblem(128, 128, 262144)  # 4 tiles of 64x64
    assert "skinny" in applicable(p)
    assert "skinny" not in applicable(p, {**H100, "sm_count": 16})  # 4 x 8 splits > 16 SMs
    assert "skinny" not in applicable(GemmProblem(128, 128, 8192))  # K not long
    assert "skinny" not in applicable(GemmProblem(512, 512, 262144))  # 64 tiles x 8 > 132


def test_the_repair_is_bounded_by_the_devices_memory() -> None:
    p = GemmProblem(4000, 4000, 4001)
    assert "repair" in applicable(p)
    small = {**H100, "memory_bytes": 64 << 20}  # the scratch would be over a quarter of it
    tiers = {t.name: t for t in plans(p, small)}
    assert not tiers["repair"].applicable and "scratch" in tiers["repair"].reason
    assert not tiers["repair_stream_k"].applicable
    assert "repair" in applicable(p, {**H100, "memory_bytes": 0})  # unknown: no bound


def test_batched_and_fp8_problems_get_no_new_tier() -> None:
    batched = GemmProblem(999, 2047, 1537, batch=2)
    tiers = {t.name: t for t in plans(batched)}
    assert not tiers["repair"].applicable and "batch 1" in tiers["repair"].reason
    fp8 = GemmProblem(4096, 4096, 4096, dtype="fp8_e4m3", layout_b="col")
    assert not any(t.name in hard_tiers.TIERS for t in plans(fp8))


def test_each_tier_maps_to_its_backend_and_a_disallowed_backend_skips_it() -> None:
    assert GEMM.backend_of("repair") == GEMM.backend_of("repair_stream_k") == "triton_repair"
    assert GEMM.backend_of("stream_k") == "triton_streamk"
    assert GEMM.backend_of("skinny") == "triton_skinny"
    assert GEMM.backend_of("tiles") == "triton" and GEMM.backend_of("cutlass") == "cutlass"
    tiers = plans(GemmProblem(128, 128, 262144))
    kept = {t.name: t for t in allowed_tiers(GEMM, tiers, ["cublas", "triton"])}
    assert not kept["skinny"].applicable
    assert kept["skinny"].reason == "the job does not allow its backend triton_skinny"
    assert kept["split_k"].applicable
    assert allowed_tiers(GEMM, tiers, []) == tiers  # unbound: left as planned


# -- the repair's plan ------------------------------------------------------------------------
def test_unaligned_rows_and_their_description() -> None:
    assert unaligned(GemmProblem(999, 2047, 1537)) == ("A", "B", "C")
    assert unaligned(GemmProblem(4000, 4000, 4001)) == ("A",)
    assert unaligned(GemmProblem(511, 1024, 4097, layout_a="col")) == ("A",)  # m=511 rows
    assert unaligned(GemmProblem(512, 1024, 4097, layout_a="col", layout_b="col")) == ("B",)
    assert unaligned(GemmProblem(4096, 4096, 4096)) == ()
    assert unaligned(GemmProblem(64, 4, 64, dtype="fp32")) == ()  # 16 bytes of fp32
    assert describe_unaligned(GemmProblem(4000, 4000, 4001)) == (
        "rows of A (k=4001 bf16) are not multiples of 16 bytes")


def test_the_padded_plan_pads_k_and_n_and_copies_both_operands() -> None:
    p = GemmProblem(999, 2047, 1537)
    row = RepairPlan.of(p, "row", padded=True)
    assert (row.a_buf, row.b_buf, row.c_buf) == ((999, 1544), (1544, 2048), (999, 2048))
    assert (row.inner.m, row.inner.n, row.inner.k) == (999, 2048, 1544)
    assert row.inner.layout_b == "row" and row.inner.layout_a == "row"
    kmajor = RepairPlan.of(p, "kmajor", padded=True)
    assert kmajor.b_buf == (2048, 1544) and kmajor.inner.layout_b == "col"
    assert row.scratch_bytes == (999 * 1544 + 1544 * 2048 + 999 * 2048) * 2
    assert row.copy_bytes == ((999 * 1537 + 999 * 1544) + (1537 * 2047 + 1544 * 2048)
                              + (999 * 2048 + 999 * 2047)) * 2
    assert b_layouts(p, padded=True) == ("row", "kmajor")
    # K aligned, only C's rows unaligned (B column-major): A stays, B is padded along N
    col = GemmProblem(64, 100, 64, layout_b="col")
    assert unaligned(col) == ("C",)
    plan = RepairPlan.of(col, "kmajor", padded=True)
    assert (plan.a_buf, plan.b_buf, plan.c_buf) == (None, (104, 64), (64, 104))
    assert plan.copied == ("B",) and plan.inner.layout_a == "row"


def test_the_views_plan_copies_only_unaligned_operands() -> None:
    p = GemmProblem(4000, 4000, 4001)  # A unaligned, B aligned
    assert b_layouts(p, padded=False) == ("keep", "kmajor")
    keep = RepairPlan.of(p, "keep", padded=False)
    assert keep.copied == ("A",) and keep.a_buf == (4000, 4032) and keep.b_buf is None
    assert (keep.inner.k, keep.inner.n) == (4001, 4000) and keep.c_buf is None
    moved = RepairPlan.of(p, "kmajor", padded=False)
    assert moved.copied == ("A", "B") and moved.b_buf == (4000, 4032)
    with pytest.raises(ValueError, match="b_layout"):
        RepairPlan.of(p, "row", padded=False)  # an aligned B is not copied row-major
    with pytest.raises(ValueError, match="aligned"):
        RepairPlan.of(GemmProblem(64, 64, 64), "row", padded=True)
    assert "A copied to aligned scratch (B in place)" == keep.describe()


def test_the_split_plan_copies_a_s_aligned_columns_and_leaves_b_in_place() -> None:
    p = GemmProblem(511, 1024, 4097)  # only A's rows unaligned: K is cut at 4096
    assert split_applies(p)
    plan = RepairPlan.split_of(p)
    assert (plan.k, plan.tail, plan.n) == (4096, 1, 1024)
    assert plan.copied == ("A",) and plan.a_buf == (511, 4096) and plan.b_buf is None
    assert plan.c_buf is None and plan.b_layout == "keep" and not plan.padded
    assert (plan.inner.m, plan.inner.n, plan.inner.k) == (511, 1024, 4096)
    assert not unaligned(plan.inner)
    assert plan.scratch_bytes == 511 * 4096 * 2
    # A's aligned part read and copied; the tail's column of A and row of B read; C written
    # by the tail and read back by the aligned product
    assert plan.copy_bytes == (2 * 511 * 4096 + 511 + 1024) * 2 + 2 * 511 * 1024 * 2
    assert "split at 4096" in plan.describe() and "B in place" in plan.describe()
    fp32 = RepairPlan.split_of(GemmProblem(33, 40, 37, dtype="fp32"))
    assert (fp32.k, fp32.tail, fp32.a_buf) == (36, 1, (33, 64))
    for no in (GemmProblem(999, 2047, 1537),  # C's rows unaligned too
               GemmProblem(64, 100, 64, layout_b="col"),  # only C
               GemmProblem(511, 1024, 4097, layout_a="col", layout_b="col"),  # B's k rows
               GemmProblem(33, 40, 5, dtype="fp16"),  # no aligned step of K
               GemmProblem(511, 1024, 4097, batch=2)):
        assert not split_applies(no)
        with pytest.raises(ValueError, match="split plan"):
            RepairPlan.split_of(no)


def test_repair_fits_bounds_the_scratch() -> None:
    plan = RepairPlan.of(GemmProblem(4000, 4000, 4001), "kmajor", padded=True)
    assert repair_fits(plan, 0) is None and repair_fits(plan, 80 << 30) is None
    assert "over 25%" in (repair_fits(plan, plan.scratch_bytes * 3) or "")
    # a small scratch beside huge operands: within its share, but the sum does not fit
    lean = RepairPlan.of(GemmProblem(8, 1_000_000, 4001), "keep", padded=False)
    assert lean.copied == ("A",) and lean.scratch_bytes == 8 * 4032 * 2
    assert "do not fit" in (repair_fits(lean, 4 << 30) or "")


# -- the library side of the repair -------------------------------------------------------------
def _op(name: str, layout_b: str) -> OpSpec:
    return OpSpec(name, (128, 128, 64), (1, 1, 1), "TmaWarpSpecialized", "TmaWarpSpecialized",
                  "default", "bf16", "bf16", None, "bf16", "row", layout_b, 8, 8, 8, 8)


def test_the_library_is_measured_on_repaired_operands_too() -> None:
    p = GemmProblem(999, 2047, 1537)
    catalogue = Catalogue((_op("op_rr", "row"), _op("op_rc", "col")), source="fake")
    plan = GEMM.library_plan(p, Policy(), ["cublas", "cutlass", "repaired", "triton"], "gpu",
                             lambda _: None, seeds=6)
    repaired = [c for b, c in plan.configs if b == "repaired"]
    assert {"inner": "cublas", "b_layout": "row"} in repaired
    assert {"inner": "cublas", "b_layout": "kmajor"} in repaired
    assert not any(c.get("plan") == "views" for c in repaired)  # C's rows are unaligned
    assert any("aligned copies" in n for n in plan.notes)
    # C aligned: cuBLAS also runs on the views plan (only A copied, as the Triton side does)
    only_a, _ = repair_space.library_configs(GemmProblem(4000, 4000, 4001), "gpu", None,
                                             cutlass=False)
    assert {"inner": "cublas", "b_layout": "keep", "plan": "views"} in only_a
    assert {"inner": "cublas", "b_layout": "kmajor", "plan": "views"} in only_a
    # only A's rows unaligned: cuBLAS on the split plan too, first (B is never copied)
    assert only_a[0] == {"inner": "cublas", "b_layout": "keep", "plan": "split"}
    small_m, _ = repair_space.library_configs(GemmProblem(511, 1024, 4097), "gpu", None,
                                              cutlass=False)
    assert {"inner": "cublas", "b_layout": "keep", "plan": "split"} in small_m
    assert not any(c.get("plan") == "split" for c in repaired)  # C's rows are unaligned
    # a declared catalogue: CUTLASS ranked for the padded problem, per B layout
    configs, notes = repair_space.library_configs(p, "gpu", catalogue, cutlass=True)
    ops = {(c["b_layout"], c["op"]) for c in configs if c["inner"] == "cutlass"}
    assert ops == {("row", "op_rr"), ("kmajor", "op_rc")} and not notes
    # no catalogue: cuBLAS only, and the reason noted
    configs, notes = repair_space.library_configs(p, "gpu", None, cutlass=True)
    assert all(c["inner"] == "cublas" for c in configs) and notes
    # aligned problems, and jobs without the backend, get no repaired candidate
    aligned = GEMM.library_plan(GemmProblem(1000, 3000, 2000), Policy(),
                                ["cublas", "repaired"], "gpu", lambda _: None, seeds=6)
    assert not any(b == "repaired" for b, _ in aligned.configs)
    without = GEMM.library_plan(p, Policy(), ["cublas", "triton"], "gpu", lambda _: None, 6)
    assert not any(b == "repaired" for b, _ in without.configs)


# -- spaces and tuners ----------------------------------------------------------------------------
LIMITS = DeviceLimits(sm_count=132)


@pytest.mark.parametrize("index", [3, 4])
def test_skinny_seeds_are_feasible_and_fit_the_sms(index: int) -> None:
    p = shape(index)
    seeds = skinny_space.seeds(p, 132)
    assert seeds
    barrier = [s for s in seeds if s["MODE"] == "barrier"]
    assert barrier and all(not skinny_space.violations(p, s, LIMITS) for s in barrier)
    too_wide = {**barrier[0], "SPLIT_K": barrier[0]["SPLIT_K"] * 4}
    assert any("resident" in r for r in skinny_space.violations(p, too_wide, LIMITS))
    assert not any("resident" in r for r in skinny_space.violations(
        p, {**too_wide, "MODE": "two_launch"}, LIMITS))


def test_skinny_splits_fill_the_sms_given_their_count() -> None:
    p = shape(3)  # 128x128x262144: 4 tiles of 64x64
    assert 33 not in dict((c.name, c.values) for c in skinny_space.space(p))["SPLIT_K"]
    space = dict((c.name, c.values) for c in skinny_space.space(p, 132))
    assert {33, 66, 99} <= set(space["SPLIT_K"])  # 1-3 waves of 4 tiles on 132 SMs
    assert {128, 256, 512} <= set(space["BLOCK_K"]) and {3, 4, 5, 6} <= set(
        space["num_stages"]) and {4, 8} <= set(space["num_warps"])


@pytest.mark.parametrize(("index", "tile"), [(3, (64, 64)), (4, (32, 128))])
def test_skinny_seeds_fill_the_sms_with_enough_bytes_in_flight(index: int,
                                                               tile: tuple[int, int]) -> None:
    # 128x128x262144 and 32x512x98304: the first seed's grid is one full wave (4 tiles x 33),
    # under the barrier; every seed keeps at least 32 KB of operands in flight per SM
    # (the unswapped seeds: the swapped ones lead only where a tile has 64 columns and fewer
    # than 64 rows)
    p = shape(index)
    seeds = [s for s in skinny_space.seeds(p, 132) if not s["SWAP"]]
    first = seeds[0]
    assert (first["BLOCK_M"], first["BLOCK_N"]) == tile and first["MODE"] == "barrier"
    assert 4 * first["SPLIT_K"] == 132
    for s in seeds:
        assert (s["num_stages"] - 1) * (s["BLOCK_M"] + s["BLOCK_N"]) * s["BLOCK_K"] * 2 >= 32768
    assert any(s["num_warps"] == 8 for s in seeds)
    if index == 4:
        assert {s["BLOCK_N"] for s in seeds if s["BLOCK_M"] == 32} >= {64, 128}
    # the tagged reduction on the two best tile shapes, right after their first barrier seeds;
    # 2 warps for tiles of at most 2048 elements (32x64 on 32x512x98304)
    tagged = [s for s in seeds[:4] if s["MODE"] == "tagged"]
    assert len(tagged) == 2 and seeds[0]["MODE"] == seeds[1]["MODE"] == "barrier"
    assert all(s["num_warps"] == (2 if s["BLOCK_M"] * s["BLOCK_N"] <= 2048 else 4)
               for s in tagged)
    assert all(not skinny_space.violations(p, s, LIMITS) for s in tagged)
    wide = {**tagged[0], "SPLIT_K": tagged[0]["SPLIT_K"] * 4}
    assert any("MODE=tagged" in r and "resident" in r
               for r in skinny_space.violations(p, wide, LIMITS))


@pytest.mark.parametrize("index", [3, 4])
def test_skinny_seeds_try_tma_loads_first_then_their_pointer_twins(index: int) -> None:
    # TMA loads first (the barrier and the tagged reduction of the two best tile shapes, and
    # BLOCK_K 256 three deep where the slices allow it), each followed later by the same
    # configuration with pointer loads; 2 warps for tiles of at most 2048 elements
    seeds = [s for s in skinny_space.seeds(shape(index), 132) if not s["SWAP"]]
    lead = [s for s in seeds[:6] if s["TMA"] == 1]
    assert seeds[0]["TMA"] == 1 and len(lead) >= 4
    assert {s["MODE"] for s in lead} == {"barrier", "tagged"}
    for s in lead:
        assert s["num_warps"] == (2 if s["BLOCK_M"] * s["BLOCK_N"] <= 2048 else 4)
        if s["BLOCK_K"] <= 128:
            assert seeds.index({**s, "TMA": 0}) > seeds.index(s)
    if index == 4:  # 32x512x98304: the 32x64 tile, BLOCK_K 256 three deep, 2 warps
        assert dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=256, SPLIT_K=16, num_warps=2,
                    num_stages=3, MODE="barrier", TMA=1, SWAP=0) in lead


def test_skinny_seeds_lead_with_the_swapped_loop_on_32_row_tiles() -> None:
    # 32x512x98304: the 32x64 tile's swapped twins (wgmma, 4 warps) lead, BLOCK_K 256 three
    # deep, then 128 four deep; the unswapped 32x64 seeds stay
    p = shape(4)
    seeds = skinny_space.seeds(p, 132)
    base = dict(BLOCK_M=32, BLOCK_N=64, SPLIT_K=16, num_warps=4, MODE="barrier", TMA=1,
                SWAP=1)
    assert seeds[:2] == [{**base, "BLOCK_K": 256, "num_stages": 3},
                         {**base, "BLOCK_K": 128, "num_stages": 4}]
    assert any(s["SWAP"] == 0 and (s["BLOCK_M"], s["BLOCK_N"]) == (32, 64) for s in seeds)
    assert all(not skinny_space.violations(p, s, LIMITS) for s in seeds[:2])
    assert dict((c.name, c.values) for c in skinny_space.space(p, 132))["SWAP"] == (0, 1)
    # 128x128x262144: its best tiles (64x64, 32x128) get no swapped seed
    assert not any(s["SWAP"] for s in skinny_space.seeds(shape(3), 132))


def test_skinny_swap_rules_name_what_it_needs() -> None:
    p = shape(4)
    ok = dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=256, SPLIT_K=16, num_warps=4, num_stages=3,
              MODE="barrier", TMA=1, SWAP=1)
    assert not skinny_space.violations(p, ok, LIMITS)
    assert any("SWAP=1 needs TMA loads" in r
               for r in skinny_space.violations(p, {**ok, "TMA": 0}, LIMITS))
    assert any("BLOCK_N >= 64 and num_warps >= 4" in r
               for r in skinny_space.violations(p, {**ok, "BLOCK_N": 32}, LIMITS))
    assert any("BLOCK_N >= 64 and num_warps >= 4" in r
               for r in skinny_space.violations(p, {**ok, "num_warps": 2}, LIMITS))
    fp32 = GemmProblem(32, 512, 98304, dtype="fp32")
    assert any("SWAP=1 needs TMA loads" in r and "fp32" in r
               for r in skinny_space.violations(fp32, ok, LIMITS))
    assert dict((c.name, c.values) for c in skinny_space.space(fp32, 132))["SWAP"] == (0,)
    assert not any(s["SWAP"] for s in skinny_space.seeds(fp32, 132))


def test_skinny_splits_that_leave_slices_empty_are_infeasible() -> None:
    p = shape(3)
    seed = skinny_space.seeds(p, 132)[0]
    # 262144 / 33 in whole steps of 256: 32 slices of 8192, the 33rd empty
    assert any("fills only 32" in r for r in skinny_space.violations(
        p, {**seed, "BLOCK_K": 256, "num_stages": 3}, LIMITS))
    assert not skinny_space.violations(p, seed, LIMITS)


@pytest.mark.parametrize("index", [5, 6])
def test_stream_k_seeds_are_feasible(index: int) -> None:
    p = shape(index)
    seeds = streamk_space.seeds(p)
    assert seeds and all(not streamk_space.violations(p, s, LIMITS) for s in seeds)
    assert seeds[0]["LOADS"] == "auto"
    huge = {**seeds[0], "BLOCK_M": 256, "BLOCK_N": 256, "num_stages": 5, "num_warps": 4}
    assert streamk_space.violations(p, huge, LIMITS)  # shared memory and registers


def test_stream_k_seeds_columns_order_first_where_b_dwarfs_a() -> None:
    # 192x6144x6144: B is 32 times A; after the stacked seeds, one tile row (BLOCK_M 256 >= m)
    # leads, then groups of 128- and 64-row tiles, then the rows-order seeds
    p = shape(5)
    seeds = streamk_space.seeds(p)
    orders = [s["ORDER"] for s in seeds]
    assert orders[:2] == ["lockstep", "lockstep"]
    assert seeds[2]["ORDER"] == "columns" and seeds[2]["BLOCK_M"] == 256
    first = orders.index("rows")
    assert first >= 6 and set(orders[2:first]) == {"columns"} and set(orders[first:]) == {"rows"}
    assert 256 in dict((c.name, c.values) for c in streamk_space.space(p))["BLOCK_M"]
    assert streamk_space.seeds(shape(6))[0]["ORDER"] == "columns"  # 320x4096x12288
    square = GemmProblem(1024, 1024, 8192)
    assert streamk_space.seeds(square)[0]["ORDER"] == "rows"


@pytest.mark.parametrize(("m", "stack", "stages"), [(192, 3, (6, 5)), (100, 2, (6, 5)),
                                                    (256, 4, (5, 4))])
def test_stream_k_seeds_lead_with_stacked_tiles_in_lockstep_where_m_fits_them(
        m: int, stack: int, stages: tuple[int, int]) -> None:
    p = GemmProblem(m, 6144, 6144)
    seeds = streamk_space.seeds(p)
    lead = [s for s in seeds if s["STACK"] > 1]
    assert seeds[:2] == lead and [s["num_stages"] for s in lead] == list(stages)
    assert all(s["STACK"] == stack and s["ORDER"] == "lockstep" and s["IDLE_SMS"] == 4
               and s["BLOCK_M"] == 64 for s in lead)
    assert all(not streamk_space.violations(p, s, LIMITS) for s in seeds)
    # twice the K step at the same depth is more than the shared memory holds (the stacked
    # rows count), and a stack past m is infeasible
    assert any("shared memory" in v for v in streamk_space.violations(
        p, {**lead[0], "BLOCK_K": 128}, LIMITS))
    assert any("past m" in v for v in streamk_space.violations(
        p, {**lead[0], "STACK": 4, "BLOCK_M": 128}, LIMITS))
    assert not any(s["STACK"] > 1 for s in streamk_space.seeds(shape(6)))  # m=320: five tiles


def test_stream_k_columns_order_searches_one_group_m() -> None:
    p = shape(5)
    config = {**next(s for s in streamk_space.seeds(p) if s["ORDER"] == "columns"),
              "GROUP_M": 8}
    assert any("GROUP_M" in r for r in streamk_space.violations(p, config, LIMITS))
    assert not streamk_space.violations(p, {**config, "ORDER": "rows"}, LIMITS)
    assert streamk_space.violations(p, {**config, "ORDER": "diagonal"}, LIMITS)


def test_the_repair_tier_keeps_stream_k_in_rows_order() -> None:
    p = GemmProblem(128, 8192, 4097)  # B dwarfs A, but the repair's inner stays as it was
    assert "ORDER" not in {c.name for c in repair_space.space(p, "streamk")}
    assert all("ORDER" not in s for s in repair_space.seeds(p, "streamk"))


def test_stream_k_seeds_shrink_to_small_problems() -> None:
    p = GemmProblem(40, 48, 200)
    legal = {c.name: c.values for c in streamk_space.space(p)}
    for s in streamk_space.seeds(p):
        assert all(s[k] in legal[k] for k in legal)


@pytest.mark.parametrize("inner", repair_space.INNERS)
def test_repair_seeds_name_their_inner_template_and_b_layout(inner: str) -> None:
    p = GemmProblem(511, 1024, 4097)
    seeds = repair_space.seeds(p, inner)
    assert {s["INNER"] for s in seeds} == {inner}
    assert [s["B_LAYOUT"] for s in seeds[:2]] == ["keep", "kmajor"]
    assert all(not repair_space.violations(p, s, LIMITS) for s in seeds)
    assert repair_space.violations(p, {**seeds[0], "B_LAYOUT": "row"}, LIMITS)
    assert repair_space.violations(p, {**seeds[0], "INNER": "cutlass"}, LIMITS)


@pytest.mark.parametrize("tier", hard_tiers.TIERS)
def test_each_tiers_tuner_proposes_feasible_configs_of_its_space(tier: str, tmp_path) -> None:
    p = {"skinny": shape(3), "stream_k": shape(5)}.get(tier, shape(2))
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    tuner = hard_tuner(url, p, "gpu", LIMITS, seed=0, tier=tier)
    proposals = tuner.propose(6, lambda config: None)
    assert len(proposals) == 6
    for x in proposals:
        config = dict(x.config)
        if tier == "skinny":
            assert not skinny_space.violations(p, config, LIMITS)
        elif tier == "stream_k":
            assert not streamk_space.violations(p, config, LIMITS) and config["LOADS"] == "auto"
        else:
            assert config["INNER"] == ("tiles" if tier == "repair" else "streamk")
            assert not repair_space.violations(p, config, LIMITS)
    with pytest.raises(ValueError, match="unknown tier"):
        hard_tuner(url, p, "gpu", LIMITS, seed=0, tier="tiles")
