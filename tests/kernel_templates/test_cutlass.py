"""CUTLASS library candidates: enumeration, rendering, the artifact cache, one real nvcc compile,
and (on a GPU) correctness of a sample of compiled kernels against torch."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from kernel_templates.gemm import cutlass as kc
from kernel_templates.gemm.cutlass.compile import CutlassCache, Toolchain, build, cache_key
from kernel_templates.gemm.cutlass.enumerate import CutlassOp
from kernel_templates.gemm.cutlass.render import render, symbols
from search.kinds.gemm.spec import GemmProblem

BF16_TN = GemmProblem(m=4096, n=4096, k=4096, layout_b="col")
BF16_RR = GemmProblem(m=4096, n=4096, k=4096)


def _layout_code(op: CutlassOp) -> str:
    """The A/B/C layout letters of a CUTLASS 3 name (``..._0_tnt_align8...`` -> ``tnt``)."""
    return op.name.split("_align")[0].rsplit("_", 1)[1]


# -- enumeration ---------------------------------------------------------------------------------
def test_bf16_tn_enumeration_has_the_sm90_families() -> None:
    ops = kc.ops_for(BF16_TN)
    assert 100 <= len(ops) <= 400, len(ops)  # instantiation level 0: 130 with CUTLASS 4.2
    names = [o.name for o in ops]
    assert len(set(names)) == len(names)
    assert all(o.dtype_a == o.dtype_b == o.dtype_d == "bf16" for o in ops)
    assert all((o.layout_a, o.layout_b) == ("row", "col") for o in ops)
    tiles = {o.tile for o in ops}
    assert {(128, 128, 64), (128, 256, 64), (256, 128, 64)} <= tiles
    assert {o.cluster for o in ops} <= {(1, 1, 1), (1, 2, 1), (2, 1, 1)}
    schedules = {o.kernel_schedule for o in ops}
    assert {"TmaWarpSpecializedCooperative", "TmaWarpSpecializedPingpong"} <= schedules
    assert any(o.stream_k for o in ops) and any(not o.stream_k for o in ops)
    assert any(o.dtype_c is None for o in ops)  # void-C kernels (beta = 0 only)
    # the output is row-major: C's letter in the name is "t", and so is the operation's D
    from cutlass_library import library

    assert {_layout_code(o) for o in ops} == {"tnt"}
    assert all(o.operation.D.layout == library.LayoutType.RowMajor for o in ops)


@pytest.mark.parametrize(("layout_a", "layout_b", "code"),
                         [("row", "row", "ttt"), ("row", "col", "tnt"), ("col", "row", "ntt"),
                          ("col", "col", "nnt")])
def test_layouts_map_to_cutlass_tags(layout_a: str, layout_b: str, code: str) -> None:
    p = GemmProblem(m=512, n=512, k=512, layout_a=layout_a, layout_b=layout_b)
    ops = kc.ops_for(p)
    assert ops and {_layout_code(o) for o in ops} == {code}
    assert {(o.layout_a, o.layout_b) for o in ops} == {(layout_a, layout_b)}


def test_alignment_filters_to_the_narrow_kernels() -> None:
    # A row-major: its contiguous extent is k = 2002 (a multiple of 2, not of 4 or 8)
    p = GemmProblem(m=1000, n=3000, k=2002)
    ops = kc.ops_for(p)
    assert ops
    assert {o.alignment_a for o in ops} == {2}
    assert all(o.kernel_schedule.startswith("CpAsync") for o in ops)  # no TMA below 16 bytes
    assert len(ops) < len(kc.ops_for(GemmProblem(m=1000, n=3000, k=2000)))


def test_dtypes_filter() -> None:
    fp16 = kc.ops_for(GemmProblem(m=256, n=256, k=256, dtype="fp16"))
    assert fp16 and all(o.dtype_a == "fp16" and o.dtype_d == "fp16" for o in fp16)
    fp8 = kc.ops_for(GemmProblem(m=256, n=256, k=256, dtype="fp8_e4m3", layout_b="col"))
    assert fp8 and all(o.dtype_a == o.dtype_b == "fp8_e4m3" and o.dtype_d == "bf16" for o in fp8)
    assert any("FP8FastAccum" in o.kernel_schedule for o in fp8)
    wide = kc.ops_for(GemmProblem(m=256, n=256, k=256, out_dtype="fp32"))
    assert wide and all(o.dtype_d == "fp32" for o in wide)


@pytest.mark.parametrize(("problem", "words"), [
    (GemmProblem(m=64, n=64, k=64, dtype="fp32"), "tf32"),
    (GemmProblem(m=64, n=64, k=64, dtype="fp8_e4m3"), "K-major"),
    (GemmProblem(m=1001, n=3001, k=2001), "alignment"),
])
def test_unsupported_problems_get_a_reason(problem: GemmProblem, words: str) -> None:
    reason = kc.why_unsupported(problem)
    assert reason is not None and words in reason
    assert kc.ops_for(problem) == []


def test_supported_problem_has_no_reason_and_other_arch_has_one() -> None:
    assert kc.why_unsupported(BF16_RR) is None
    assert "SM90" in (kc.why_unsupported(BF16_RR, arch=80) or "")
    assert kc.ops_for(BF16_RR, arch=80) == []


def test_op_round_trips_and_is_found_by_name() -> None:
    op = kc.ops_for(BF16_RR)[0]
    again = CutlassOp.from_dict(json.loads(json.dumps(op.to_dict())))
    assert again == op and again.operation is None
    assert kc.op_by_name(op.name) is op


# -- rendering -----------------------------------------------------------------------------------
def _pick(problem: GemmProblem, **want: object) -> CutlassOp:
    for o in kc.ops_for(problem):
        if all(getattr(o, k) == v for k, v in want.items()):
            return o
    raise LookupError(want)


def test_render_exports_c_launchers_and_a_row_major_output() -> None:
    persistent = _pick(BF16_RR, tile=(128, 256, 64), cluster=(2, 1, 1), dtype_c=None,
                       kernel_schedule="TmaWarpSpecializedCooperative", tile_scheduler="default")
    streamk = _pick(BF16_RR, tile=(128, 128, 64), tile_scheduler="stream_k")
    src = render([persistent, streamk])
    for op in (persistent, streamk):
        ws, run = symbols(op)
        assert f'extern "C" int {ws}(' in src and f'extern "C" int {run}(' in src
        assert f"GemmUniversalAdapter<{op.name}>" in src
        epilogue = src.split(f"using {op.name}_epilogue =")[1].split("::CollectiveOp;")[0]
        assert epilogue.count("cutlass::layout::RowMajor") == 2  # C and D
        assert "ColumnMajor" not in epilogue
    assert f"ks_cutlass::run<{streamk.name}_gemm, true>" in src
    assert f"ks_cutlass::run<{persistent.name}_gemm, false>" in src
    assert "cudaStream_t stream" in src and "const float* alpha_ptr" in src
    with pytest.raises(ValueError):
        render([])
    with pytest.raises(ValueError):
        render([persistent, persistent])
    with pytest.raises(ValueError):
        render([CutlassOp.from_dict(persistent.to_dict())])  # no cutlass_library object


# -- the cache -----------------------------------------------------------------------------------
TC = Toolchain(nvcc="Cuda compilation tools, release 13.0, V13.0.88", cutlass="4.2.0.0")


def test_cache_key_changes_with_every_input() -> None:
    base = cache_key(["op"], "src", TC)
    assert base == cache_key(["op"], "src", TC)
    assert base != cache_key(["op2"], "src", TC)
    assert base != cache_key(["op"], "src2", TC)
    assert base != cache_key(["op"], "src", Toolchain(nvcc="release 12.8", cutlass="4.2.0.0"))
    assert base != cache_key(["op"], "src", Toolchain(nvcc=TC.nvcc, cutlass="4.1.0"))
    assert base != cache_key(["op"], "src", Toolchain(nvcc=TC.nvcc, cutlass=TC.cutlass,
                                                      flags=(*TC.flags, "-O3")))
    assert base != cache_key(["op"], "src", Toolchain(nvcc=TC.nvcc, cutlass=TC.cutlass,
                                                      arch="sm_100a"))
    assert TC.id != Toolchain(nvcc=TC.nvcc, cutlass=TC.cutlass, flags=("-O3",)).id


FAKE_NVCC = """#!/bin/sh
# FAKE nvcc: prints a version, or "compiles" by copying the source to the -o path; fails when
# the source mentions $FAKE_NVCC_FAIL.
if [ "$1" = "--version" ]; then echo "fake nvcc, release 13.0"; exit 0; fi
out=""; src=""
while [ $# -gt 0 ]; do
  case "$1" in -o) out="$2"; shift;; *.cu) src="$1";; esac; shift
done
echo "$src" >> "$FAKE_NVCC_LOG"
if [ -n "$FAKE_NVCC_FAIL" ] && grep -q "$FAKE_NVCC_FAIL" "$src"; then
  echo "error: fake failure in $FAKE_NVCC_FAIL" >&2; exit 2
fi
cp "$src" "$out"
"""


@pytest.fixture
def fake_nvcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "nvcc.log"
    log.write_text("")
    monkeypatch.setenv("FAKE_NVCC_LOG", str(log))
    return str(nvcc), log


def test_build_caches_indexes_and_isolates_a_bad_kernel(
        tmp_path: Path, fake_nvcc: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    nvcc, log = fake_nvcc
    ops = kc.ops_for(BF16_RR)[:5]
    bad = ops[2].name
    monkeypatch.setenv("FAKE_NVCC_FAIL", bad)
    cache = CutlassCache(tmp_path / "cache")
    tc = kc.toolchain(nvcc)
    assert "fake nvcc" in tc.nvcc
    seen: list[str] = []
    res = build(ops, cache, jobs=2, per_file=3, nvcc=nvcc, tc=tc,
                on_done=lambda name, _: seen.append(name))
    assert set(res.errors) == {bad} and "fake failure" in res.errors[bad].stderr_tail
    assert set(res.artifacts) == {o.name for o in ops} - {bad}
    assert sorted(seen) == sorted(o.name for o in ops)
    # the bad kernel's file-mates were rebuilt alone and succeeded
    art = res.artifacts[ops[0].name]
    manifest = json.loads((art.path / "manifest.json").read_text())
    assert manifest["toolchain"]["nvcc"] == tc.nvcc and manifest["compile_s"] >= 0
    assert {o["name"] for o in manifest["ops"]} == set(art.ops)
    found = cache.find(ops[0].name, tc)
    assert found is not None and found.key == art.key and found.cached
    assert cache.find(bad, tc) is None
    # a second build compiles nothing; another toolchain finds nothing
    calls = len(log.read_text().splitlines())
    again = build([o for o in ops if o.name != bad], cache, nvcc=nvcc, tc=tc)
    assert again.compiled == 0 and not again.errors
    assert all(a.cached for a in again.artifacts.values())
    assert len(log.read_text().splitlines()) == calls
    other = Toolchain(nvcc="another nvcc", cutlass=tc.cutlass)
    assert cache.find(ops[0].name, other) is None
    # what the cache holds, as a worker declares it: the built ops of this toolchain only
    assert cache.built(tc) == sorted(o.name for o in ops if o.name != bad)
    assert cache.built(other) == [] and CutlassCache(tmp_path / "none").built(tc) == []
    shutil.rmtree(art.path)  # an index entry whose artifact is gone is not built
    assert ops[0].name not in cache.built(tc)
    # a copy of the cache (another host, same toolchain) is used as it is
    copy = tmp_path / "copied"
    shutil.copytree(cache.root, copy)
    kept = next(n for n in CutlassCache(copy).built(tc))
    assert CutlassCache(copy).find(kept, tc).library.is_file()
    # no temporary directories are left behind
    assert not [p for p in (cache.root / "artifacts").iterdir() if p.name.startswith(".")]


def test_missing_nvcc_is_a_compile_error(tmp_path: Path) -> None:
    with pytest.raises(kc.CompileError, match="nvcc is not usable"):
        kc.toolchain(str(tmp_path / "no-nvcc"))


# -- one real compile ----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_real_nvcc_compile_of_one_kernel(tmp_path: Path) -> None:
    """One real build (60-80 s on one core). With ``KS_CUTLASS_CACHE`` set (CI can keep that
    directory between runs) a later run finds the artifact; from a cold cache it compiles."""
    root = os.environ.get("KS_CUTLASS_CACHE") or tmp_path / "cache"
    cache = CutlassCache(root)
    op = _pick(BF16_RR, tile=(128, 128, 64), cluster=(1, 2, 1), dtype_c=None,
               kernel_schedule="TmaWarpSpecializedCooperative", tile_scheduler="stream_k",
               epilogue_schedule="TmaWarpSpecializedCooperative")
    res = kc.build([op], cache, jobs=1)
    assert not res.errors, res.errors
    art = res.artifacts[op.name]
    assert art.library.stat().st_size > 10_000
    if not art.cached:
        assert res.compile_s > 1.0 and res.compiled == 1
    lib = ctypes.CDLL(str(art.library))  # resolves libcudart; nothing is called (no GPU)
    for sym in symbols(op):
        assert hasattr(lib, sym)
    again = kc.build([op], cache)
    assert again.compiled == 0 and again.artifacts[op.name].key == art.key
    kernel = kc.load(op.name, cache)
    assert kernel.name == op.name and kernel.meta["layout_b"] == "row"


# -- GPU: correctness of a sample -----------------------------------------------------------------
def _gpu_sample() -> list[tuple[GemmProblem, CutlassOp, dict]]:
    """A persistent TMA kernel, a stream-K kernel (with split-K), a narrow-alignment CpAsync
    kernel, and an fp8 ping-pong kernel, on aligned, ragged and batched shapes."""
    rr = GemmProblem(m=1000, n=3000, k=2000)
    coop = _pick(rr, tile=(128, 256, 64), cluster=(2, 1, 1), dtype_c=None,
                 kernel_schedule="TmaWarpSpecializedCooperative", tile_scheduler="default",
                 epilogue_schedule="TmaWarpSpecializedCooperative")
    sk = _pick(rr, tile=(128, 128, 64), cluster=(1, 2, 1), dtype_c=None,
               kernel_schedule="TmaWarpSpecializedCooperative", tile_scheduler="stream_k",
               epilogue_schedule="TmaWarpSpecializedCooperative")
    narrow_p = GemmProblem(m=300, n=200, k=1002)
    narrow = kc.ops_for(narrow_p)[0]
    # ragged m; n a multiple of 16, as torch._scaled_mm (the reference here) requires
    f8p = GemmProblem(m=1000, n=3008, k=2048, dtype="fp8_e4m3", layout_b="col")
    f8 = _pick(f8p, tile=(128, 128, 128), cluster=(1, 2, 1), dtype_c="bf16",
               kernel_schedule="TmaWarpSpecializedPingpongFP8FastAccum")
    knobs = {"raster": "along_n", "swizzle": 2, "splits": 1}
    return [
        (GemmProblem(m=512, n=1024, k=768), coop, {}),
        (rr, coop, knobs),
        (GemmProblem(m=1000, n=3000, k=2000, batch=3), coop, {}),
        (rr, sk, {}),
        (GemmProblem(m=256, n=256, k=8192), sk, {"splits": 4, "raster": "heuristic",
                                                   "swizzle": 1}),
        (narrow_p, narrow, {}),
        (f8p, f8, {}),
        (GemmProblem(m=4096, n=4096, k=4096, dtype="fp8_e4m3", layout_b="col"), f8, knobs),
    ]


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_sample_matches_torch() -> None:
    import torch

    from kernel_templates.gemm.inputs import make_inputs
    from kernel_templates.gemm.reference import reference_matmul, rel_error

    sample = _gpu_sample()
    ops = list({op.name: op for _, op, _ in sample}.values())
    res = kc.build(ops)
    assert not res.errors, {k: str(v)[-2000:] for k, v in res.errors.items()}
    failures = []
    for i, (p, op, knobs) in enumerate(sample):
        kernel = kc.load(op.name, artifact=res.artifacts[op.name])
        if p.dtype == "fp8_e4m3":
            gen = torch.Generator(device="cuda").manual_seed(i)
            a = (torch.randn(p.m, p.k, generator=gen, device="cuda") * 2).to(torch.float8_e4m3fn)
            b = (torch.randn(p.n, p.k, generator=gen, device="cuda") * 2).to(
                torch.float8_e4m3fn).t()
            sa = torch.tensor(0.25, device="cuda")
            sb = torch.tensor(0.125, device="cuda")
            out = torch.full((p.m, p.n), float("nan"), dtype=torch.bfloat16, device="cuda")
            kernel(a, b, out, scale_a=sa, scale_b=sb, **knobs)
            want = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
            ref = reference_matmul(a.float() * 0.25, b.float() * 0.125)
            err, err_torch = rel_error(out, ref), rel_error(want, ref)
            ok = err < 1e-2 and err < 3 * err_torch + 2e-3
        else:
            inp = make_inputs(p, "cuda", seed=i)
            kernel(inp.a, inp.b, inp.out, **knobs)
            err = rel_error(inp.out, reference_matmul(inp.a, inp.b))
            ok = err < 1e-2
        torch.cuda.synchronize()
        if not ok:
            failures.append((p.key(), op.name, knobs, err))
    assert not failures, failures


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_launcher_rejects_bad_tensors_and_reports_status() -> None:
    import torch

    op = _gpu_sample()[0][1]
    res = kc.build([op])
    kernel = kc.load(op.name, artifact=res.artifacts[op.name])
    a = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 64, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(TypeError):
        kernel(a.float(), b, out)
    with pytest.raises(ValueError, match="packed"):
        kernel(a, b.t().contiguous().t(), out)  # column-major B for a row-major-B op
    a100 = torch.randn(64, 100, device="cuda", dtype=torch.bfloat16)
    b100 = torch.randn(100, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="multiple of"):
        kernel(a100, b100, out)  # k = 100 is not a multiple of the op's alignment 8
    assert kernel.workspace_size(64, 64, 128) >= 0
