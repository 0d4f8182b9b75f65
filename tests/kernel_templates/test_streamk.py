"""The stream-K template (kernel_templates/gemm/streamk.py) and its backend ``triton_streamk``.

CPU cases run the one-launch protocol itself in the Triton interpreter (which runs programs in
id order: the reversed ranges mean every flag an owner waits for is already raised): tiles
split over several programs, ranges that start mid-tile, ragged and odd shapes, pointer and TMA
loads, against a float64 reference on random inputs into NaN-poisoned outputs; a fixed summation
order (bitwise equal back to back); and the bounded wait (with ranges in program order an owner
waits for a program not yet run: it must give up, write NaN, and leave nothing that breaks the
next launch)."""

from __future__ import annotations

import pytest
import torch

from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm import streamk
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for, rel_error, tolerance
from kernel_templates.gemm.streamk import check_streamk_config, matmul_streamk, partition
from kernel_templates.registry import check_supported, make_callable, static_violations
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate


def cfg(bm: int = 32, bn: int = 32, bk: int = 16, **kw: object) -> dict:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=2, num_warps=4, num_stages=2, **kw)


def run(problem: GemmProblem, config: dict, programs: int, device: str,
        seed: int = 0) -> torch.Tensor:
    inp = make_inputs(problem, device, seed)
    assert torch.isnan(inp.out).all()
    assert matmul_streamk(inp.a, inp.b, config, out=inp.out, programs=programs) is inp.out
    err = rel_error(inp.out, reference_for(inp))
    assert err <= tolerance(problem), (problem, config, programs, err)
    return inp.out.clone()


@pytest.mark.parametrize(("m", "n", "k", "dtype", "programs"), [
    (64, 64, 256, "fp16", 3), (64, 64, 256, "fp16", 7), (33, 65, 97, "fp16", 1),
    (33, 65, 97, "fp16", 5), (33, 65, 97, "fp32", 7), (97, 35, 203, "fp32", 3),
    (97, 35, 203, "fp16", 7),
])
def test_stream_k_is_correct_and_deterministic(m: int, n: int, k: int, dtype: str,
                                               programs: int, device: str) -> None:
    # (64, 64, 256): 4 tiles x 16 iterations, whole tiles; (33, 65, 97) and (97, 35, 203):
    # ragged edges and a short last K step, every m, n, k odd but one. 3, 5 and 7 programs
    # start ranges mid-tile (7 does not divide the iterations: ranges of two lengths).
    p = GemmProblem(m=m, n=n, k=k, dtype=dtype)
    first = run(p, cfg(), programs, device, seed=programs)
    again = run(p, cfg(), programs, device, seed=programs)
    assert torch.equal(first, again)  # a fixed summation order
    run(p, cfg(), programs, device, seed=programs + 100)  # and fresh inputs


@pytest.mark.parametrize("order", ["rows", "columns"])
def test_tma_loads_match_pointer_loads(order: str, device: str) -> None:
    p = GemmProblem(64, 48, 200, dtype="fp16")  # aligned rows, ragged tiles
    pointer = run(p, cfg(LOADS="pointer", ORDER=order), 5, device)
    tma = run(p, cfg(LOADS="tma", ORDER=order), 5, device)
    assert rel_error(tma, pointer.double()) < 1e-3


def test_the_partition_deals_out_every_iteration() -> None:
    config = check_streamk_config(cfg())
    g, q, e, per_tile, units = partition(97, 35, 203, config, 7)
    tiles = 4 * 2
    assert per_tile == 13 and g == 7 and q * g + e == tiles * per_tile and 0 <= e < g
    assert units == 1
    assert partition(16, 16, 16, config, 132)[0] == 1  # never more programs than iterations


def test_the_columns_partition_deals_out_column_iterations_to_whole_groups() -> None:
    config = check_streamk_config(cfg(ORDER="columns"))
    # 4 tile rows, 2 tile columns of 13 iterations: 7 programs hold one group of 4
    part = partition(97, 35, 203, config, 7)
    assert part.units == 4 and part.programs == 4 and part.q == 2 * 13 and part.e == 0
    part = partition(97, 35, 203, config, 132)  # 33 groups, but only 26 column iterations
    assert part.programs == 26 * 4 and part.q == 1 and part.e == 0
    assert partition(97, 35, 203, config, 3).programs == 4  # one group, however few programs
    one_row = check_streamk_config(cfg(bm=128, ORDER="columns"))
    assert partition(97, 35, 203, one_row, 7) == partition(97, 35, 203, {**one_row,
                                                                         "ORDER": "rows"}, 7)


@pytest.mark.parametrize(("m", "n", "k", "dtype", "programs"), [
    (64, 64, 256, "fp16", 4), (97, 35, 203, "fp16", 9), (97, 35, 203, "fp32", 13),
    (33, 65, 97, "fp16", 5), (33, 130, 97, "fp32", 7),
])
def test_columns_order_is_correct_and_deterministic(m: int, n: int, k: int, dtype: str,
                                                    programs: int, device: str) -> None:
    # 2-4 tile rows per column: groups of 2-4 programs whose ranges start mid-column, ragged
    # edges in m, n and k; 5 and 7 programs leave one over (the grid is whole groups)
    p = GemmProblem(m=m, n=n, k=k, dtype=dtype)
    config = cfg(ORDER="columns")
    first = run(p, config, programs, device, seed=programs)
    again = run(p, config, programs, device, seed=programs)
    assert torch.equal(first, again)
    run(p, config, programs, device, seed=programs + 100)


def test_columns_order_owners_that_wait_in_vain_write_nan(
        device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.cuda.is_available():
        pytest.skip("the interpreter's program order is what this test relies on")
    p = GemmProblem(64, 64, 256, dtype="fp16")
    monkeypatch.setattr(streamk, "REVERSED", False)
    monkeypatch.setattr(streamk, "SPIN_LIMIT", 4)
    inp = make_inputs(p, device, 0)
    matmul_streamk(inp.a, inp.b, cfg(ORDER="columns"), out=inp.out, programs=6)
    assert torch.isnan(inp.out).any()


def test_an_owner_that_waits_in_vain_writes_nan_and_the_next_launch_is_right(
        device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.cuda.is_available():
        pytest.skip("the interpreter's program order is what this test relies on")
    p = GemmProblem(64, 64, 256, dtype="fp16")
    monkeypatch.setattr(streamk, "REVERSED", False)
    monkeypatch.setattr(streamk, "SPIN_LIMIT", 4)
    inp = make_inputs(p, device, 0)
    matmul_streamk(inp.a, inp.b, cfg(), out=inp.out, programs=3)
    nan = torch.isnan(inp.out)
    assert nan.any() and not nan.all()  # owners of split tiles gave up; whole tiles are fine
    monkeypatch.setattr(streamk, "REVERSED", True)
    monkeypatch.setattr(streamk, "SPIN_LIMIT", 1 << 20)
    # the contributors of the failed launch raised their flags after their owners left: the
    # epochs keep those from passing for the next launch's
    run(p, cfg(), 3, device)


@pytest.mark.parametrize(("m", "n", "k", "stack", "order", "programs"), [
    (96, 64, 256, 3, "lockstep", 5), (96, 64, 256, 3, "rows", 5),
    (150, 72, 200, 2, "lockstep", 7), (150, 72, 200, 2, "rows", 7),
    (150, 72, 200, 4, "columns", 9), (40, 104, 160, 2, "lockstep", 13),
    (64, 64, 256, 1, "lockstep", 3), (97, 35, 203, 1, "lockstep", 7),
])
def test_stacked_tiles_and_lockstep_order_are_correct_and_deterministic(
        m: int, n: int, k: int, stack: int, order: str, programs: int, device: str) -> None:
    # STACK m-tiles of 32 rows share each B tile: one tile row (96 = 3 x 32, 40 < 2 x 32, with
    # zero-filled rows past m) or several (150 rows: three tall tiles of 64, two of 128 with 4
    # stacked), ranges that start mid-tile, ragged edges, columns order's lanes; lockstep
    # also on unstacked tiles with pointer loads (97x35x203: rows TMA cannot describe), where
    # its finishers sum the partials
    p = GemmProblem(m=m, n=n, k=k, dtype="fp16")
    config = cfg(LOADS="tma" if stack > 1 else "pointer", ORDER=order, STACK=stack)
    first = run(p, config, programs, device, seed=programs)
    assert torch.equal(first, run(p, config, programs, device, seed=programs))
    run(p, config, programs, device, seed=programs + 100)


def test_stacked_tiles_partition_by_their_whole_height() -> None:
    config = check_streamk_config(cfg(STACK=3, ORDER="columns"))
    # 150 rows are 2 tall tiles of 96 (not 5 of 32): groups of 2 lanes
    part = partition(150, 72, 200, config, 9)
    assert part.units == 2 and part.per_tile == 13
    assert partition(96, 64, 256, check_streamk_config(cfg(STACK=3)), 5).q == 2 * 16 // 5


@pytest.mark.parametrize(("idle", "grid", "programs"), [(0, 1, 8), (4, 1, 4), (4, 2, 8)])
def test_idle_sms_shrink_the_default_grid(idle: int, grid: int, programs: int, device: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # on 8 SMs: (SMs - IDLE_SMS) x GRID programs, and the product is still right
    seen: list[int] = []
    real = streamk.partition

    def spy(m, n, k, config, count):
        seen.append(count)
        return real(m, n, k, config, count)

    monkeypatch.setattr(streamk, "sm_count", lambda _device: 8)
    monkeypatch.setattr(streamk, "partition", spy)
    p = GemmProblem(64, 64, 256, dtype="fp16")
    inp = make_inputs(p, device, 0)
    matmul_streamk(inp.a, inp.b, cfg(IDLE_SMS=idle, GRID=grid), out=inp.out)
    assert seen == [programs]
    assert rel_error(inp.out, reference_for(inp)) <= tolerance(p)


def test_lockstep_finishers_that_wait_in_vain_write_nan(
        device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.cuda.is_available():
        pytest.skip("the interpreter's program order is what this test relies on")
    # 4 tiles of 96x32, 16 iterations each, over 3 ranges: tile 0 lies whole in range 0
    p = GemmProblem(96, 128, 256, dtype="fp16")
    monkeypatch.setattr(streamk, "REVERSED", False)  # lockstep's ranges then run reversed
    monkeypatch.setattr(streamk, "SPIN_LIMIT", 4)
    inp = make_inputs(p, device, 0)
    matmul_streamk(inp.a, inp.b, cfg(LOADS="tma", ORDER="lockstep", STACK=3), out=inp.out,
                   programs=3)
    nan = torch.isnan(inp.out)
    assert nan.any() and not nan[:, :32].any()
    monkeypatch.setattr(streamk, "REVERSED", True)
    monkeypatch.setattr(streamk, "SPIN_LIMIT", 1 << 20)
    run(p, cfg(LOADS="tma", ORDER="lockstep", STACK=3), 3, device)  # the next launch is right


def test_bad_configs_are_refused() -> None:
    with pytest.raises(InvalidConfig, match="STACK must be one of"):
        check_streamk_config(cfg(STACK=5))
    with pytest.raises(InvalidConfig, match="STACK > 1 needs TMA loads"):
        check_streamk_config(cfg(STACK=2, LOADS="pointer"))
    with pytest.raises(InvalidConfig, match="IDLE_SMS"):
        check_streamk_config(cfg(IDLE_SMS=3))
    with pytest.raises(Unsupported, match="STACK=2 needs TMA loads"):
        a = torch.zeros(64, 64, dtype=torch.float32)
        matmul_streamk(a, a, cfg(STACK=2))
    with pytest.raises(InvalidConfig, match="power of two"):
        check_streamk_config(cfg(bm=48))
    with pytest.raises(InvalidConfig, match="GRID"):
        check_streamk_config(cfg(GRID=3))
    with pytest.raises(InvalidConfig, match="LOADS"):
        check_streamk_config(cfg(LOADS="magic"))
    with pytest.raises(InvalidConfig, match="ORDER"):
        check_streamk_config(cfg(ORDER="diagonal"))
    with pytest.raises(InvalidConfig, match="unknown"):
        check_streamk_config(cfg(SPLIT_K=2))
    with pytest.raises(Unsupported, match="2-D"):
        a = torch.zeros(2, 16, 16, dtype=torch.float16)
        matmul_streamk(a, a, cfg())
    with pytest.raises(Unsupported, match="batch 1"):
        check_supported("triton_streamk", GemmProblem(64, 64, 64, batch=2, dtype="fp16"))


def test_the_backend_runs_a_search_config(device: str) -> None:
    from search.kinds.gemm.streamk_space import seeds

    p = GemmProblem(97, 35, 203, dtype="fp16")
    config = {**seeds(p)[0], "BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32}
    assert config["STACK"] == 1  # rows TMA cannot describe: no stacked seeds
    assert "needs TMA loads" in " ".join(static_violations(
        Candidate(p, "triton_streamk", {**config, "STACK": 2}), "interpreter", 0))
    cand = Candidate(p, "triton_streamk", config)
    assert static_violations(cand, "interpreter", 0) == []
    inp = make_inputs(p, device, 5)
    make_callable(cand, inp)()
    assert rel_error(inp.out, reference_for(inp)) <= tolerance(p)
    # a config the device cannot hold is refused before it runs
    assert static_violations(Candidate(p, "triton_streamk", {**config, "BLOCK_M": 256,
                                                             "BLOCK_N": 256, "BLOCK_K": 128,
                                                             "num_stages": 5}),
                             "cuda", 232_448)
