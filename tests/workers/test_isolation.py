"""The isolated benchmark child: hangs time out, deaths are crashes, and the next candidate
still runs in a fresh child."""

from __future__ import annotations

import pytest

from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Status
from workers.isolation import IsolatedRunner

try:
    import fake_targets
except ImportError:  # tests collected as packages
    from tests.workers import fake_targets

TARGET = f"{fake_targets.__name__}:behave"
P = GemmProblem(m=16, n=16, k=16, dtype="fp32")


def cand(what: str) -> Candidate:
    return Candidate(problem=P, backend="triton", config={"fake": what})


@pytest.fixture
def runner():
    with IsolatedRunner(interpret=True, timeout_s=2.0, target=TARGET, preload=()) as r:
        yield r


def test_child_is_reused_and_interprets(runner: IsolatedRunner) -> None:
    a, b = runner.run(cand("ok")), runner.run(cand("ok"))
    assert a.status == b.status == Status.OK
    assert a.env["pid"] == b.env["pid"] and runner.spawned == 1
    assert a.env["interpret"] is True and a.env["env_interpret"] == "1"


def test_hang_times_out_then_next_runs(runner: IsolatedRunner) -> None:
    first = runner.run(cand("ok"))
    m = runner.run(cand("hang"))
    assert m.status == Status.TIMEOUT
    after = runner.run(cand("ok"))
    assert after.status == Status.OK and after.env["pid"] != first.env["pid"]


@pytest.mark.parametrize("what", ["die", "raise", "sticky"])
def test_death_is_crash_then_next_runs(runner: IsolatedRunner, what: str) -> None:
    first = runner.run(cand("ok"))
    assert runner.run(cand(what)).status == Status.CRASHED
    after = runner.run(cand("ok"))
    assert after.status == Status.OK and after.env["pid"] != first.env["pid"]
    assert runner.spawned == 2


def test_bad_target_fails_to_start() -> None:
    with pytest.raises(RuntimeError, match="failed to start"):
        IsolatedRunner(interpret=True, target="no_such_module:fn", preload=()).start()


def test_real_execute_in_interpreter_child() -> None:
    problem = GemmProblem(m=20, n=32, k=48, dtype="fp32")
    config = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=1, SPLIT_K=1, num_warps=4,
                  num_stages=2)
    with IsolatedRunner(interpret=True, timeout_s=120.0) as r:
        m = r.run(Candidate(problem=problem, backend="triton", config=config))
        assert m.status == Status.OK, m.error
        assert m.env["mode"] == "interpreter" and m.env["timing"] == "wallclock-interpreter"
        bad = r.run(Candidate(problem=problem, backend="triton", config={**config,
                                                                          "BLOCK_K": 24}))
        assert bad.status == Status.INVALID


@pytest.mark.gpu
def test_real_execute_in_cuda_child() -> None:
    problem = GemmProblem(m=16, n=4096, k=4096, dtype="bf16")
    config = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=4, num_warps=4,
                  num_stages=4)
    with IsolatedRunner(interpret=False, timeout_s=120.0,
                        options={"target_ms": 20.0}) as r:
        for backend, cfg in (("cublas", {}), ("triton", config)):
            m = r.run(Candidate(problem=problem, backend=backend, config=cfg))
            assert m.status == Status.OK, m.error
            assert m.env["mode"] == "cuda" and m.env["timing"] == "cuda-events"
            assert m.reps >= 10 and 1.0 < m.median_us < 1000.0
        assert r.spawned == 1


def test_prepare_builds_each_cutlass_op_once_then_charges_or_fails_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from kernel_templates.gemm import cutlass as kc
    from kernel_templates.gemm.cutlass.compile import Artifact, BuildResult, CompileError

    built: list[list[str]] = []

    def fake_build(ops, cache=None, *, jobs=None, **_kw):  # FAKE nvcc: two ok, one broken
        built.append(list(ops))
        r = BuildResult()
        art = Artifact(key="k", path=Path("/nowhere"), ops=("good", "good2"), compile_s=30.0,
                       cached=False)
        r.artifacts.update(good=art, good2=art)
        r.errors["bad"] = CompileError("nvcc failed (1) for 1 op(s): bad", ["bad"], "error: boom")
        return r

    monkeypatch.setattr(kc, "build", fake_build)
    monkeypatch.setattr(kc, "op_by_name", lambda name: name)

    def cut(op: str, swizzle: int = 1) -> Candidate:
        return Candidate(problem=P, backend="cutlass",
                         config={"op": op, "raster": "heuristic", "swizzle": swizzle, "splits": 1})

    batch = [cut("good"), cut("good", 2), cut("good2"), cut("bad"), cut("bad", 2)]
    runner = IsolatedRunner(interpret=False, timeout_s=5.0, target=TARGET, preload=())
    try:
        assert runner.prepare(batch) == 2
        assert built == [["good", "good2", "bad"]]  # unique ops, one parallel build
        first, twin = runner.run(batch[0]), runner.run(batch[1])
        assert first.status == twin.status == Status.OK
        assert first.compile_s == pytest.approx(15.0)  # its half of the file's 30 s
        assert twin.compile_s is None  # charged once
        spawned = runner.spawned
        for c in batch[3:]:
            m = runner.run(c)
            assert m.status == Status.COMPILE_ERROR and "boom" in m.error
        assert runner.spawned == spawned  # no trip to the child to run nvcc again
    finally:
        runner.close()
