"""What a SYNTHETIC job answers from: recorded H100 measurements, scaled to another shape and
GPU model and perturbed. Nothing here was measured on the shape it is stored for.

- GEMM: ``tests/data/h100_gemm_trials.json`` (cuBLAS and 64 Triton trials of each public shape)
  and ``tests/data/h100_cutlass_trials.json`` (CUTLASS ops of the bf16 and fp8 shapes, with
  cuBLAS beside them). A synthetic shape replays the recorded shape nearest to it (log-distance
  of m, n, k; same precision class), every time scaled by the ratio of the two shapes' roofline
  times and perturbed: one factor per problem and side (library, CUTLASS, Triton) and one per
  trial, never under the roofline.
- Attention: ``docs/benchmarks/attention_h100_2026-11-24.json`` (each library backend and the
  best Triton kernel of six shapes); the Triton trials around that best follow the relative
  spread of a recorded GEMM search, over configurations of the attention space that pass its
  static rules.
- GPU models: the recorded H100 calibration (``tests/data/h100_calibration.json``; its fp8 peak
  from the recorded cuBLAS fp8 4096^3 time), a model with bandwidth and peaks scaled down and one
  with more bandwidth, each named "(synthetic)".
"""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from search.kinds.attention import constraints as attention_rules
from search.kinds.attention import space as attention_space
from search.kinds.attention.spec import AttentionProblem
from search.kinds.gemm import triton_constraints
from search.kinds.gemm.spec import GemmProblem
from search.limits import DeviceLimits
from search.roofline import Calibration, roofline
from search.types import Problem

ROOT = Path(__file__).resolve().parents[2]
GEMM_TRIALS = ROOT / "tests" / "data" / "h100_gemm_trials.json"
CUTLASS_TRIALS = ROOT / "tests" / "data" / "h100_cutlass_trials.json"
CALIBRATION = ROOT / "tests" / "data" / "h100_calibration.json"
ATTENTION = ROOT / "docs" / "benchmarks" / "attention_h100_2026-11-24.json"
SOURCES = tuple(str(p.relative_to(ROOT)) for p in (GEMM_TRIALS, CUTLASS_TRIALS, CALIBRATION,
                                                    ATTENTION))
#: H100 SXM shared memory per block (opt-in), the static rules' limit
SMEM = 232448
LIMITS = DeviceLimits(smem_per_block=SMEM)


@dataclass(frozen=True)
class Rec:
    """One measurement a synthetic job reports (the recording's fields, scaled)."""

    backend: str
    config: dict[str, Any] = field(hash=False)
    status: str = "ok"
    median_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None
    rel_error: float | None = None
    compile_s: float = 0.0
    bench_s: float = 0.0
    error: str | None = None

    @property
    def gpu_s(self) -> float:
        return self.compile_s + self.bench_s


@dataclass(frozen=True)
class Gpu:
    name: str
    calibration: Calibration
    device: dict[str, Any] = field(hash=False)


def gpus() -> tuple[Gpu, Gpu, Gpu]:
    """The SYNTHETIC GPU models: the recorded H100, and two scaled from it (lower clocks and
    bandwidth; more bandwidth)."""
    rec = json.loads(CALIBRATION.read_text())
    cut = json.loads(CUTLASS_TRIALS.read_text())
    fp8 = next(p for p in cut["problems"] if ":fp8_e4m3:" in p["problem_key"])
    fp8_tflops = GemmProblem.from_key(fp8["problem_key"]).tflops(fp8["library_us"])
    peaks = {**{k: float(v) for k, v in rec["peak_tflops"].items()}, "fp8_e4m3": fp8_tflops}
    env = {**rec["env"], "synthetic": True}
    a_name = f"{rec['gpu']} (synthetic)"
    b_name = "NVIDIA H100 PCIe (synthetic)"
    a = Calibration(a_name, float(rec["bandwidth_gbs"]), peaks, {**env, "gpu": a_name})
    b = Calibration(b_name, a.bandwidth_gbs * 0.65, {k: v * 0.76 for k, v in peaks.items()},
                    {**env, "gpu": b_name, "sm_count": 114})
    c_name = "NVIDIA H200 (synthetic)"
    c = Calibration(c_name, a.bandwidth_gbs * 1.43, dict(peaks), {**env, "gpu": c_name})
    device = {"mode": "cuda", "cc": "9.0", "smem_per_block": SMEM, "driver": env["driver"],
              "cuda": env["cuda"], "torch": env["torch"], "triton": env["triton"]}
    return (Gpu(a_name, a, {**device, "gpu_model": a_name, "sm_count": 132}),
            Gpu(b_name, b, {**device, "gpu_model": b_name, "sm_count": 114}),
            Gpu(c_name, c, {**device, "gpu_model": c_name, "sm_count": 132}))


def attainable_us(problem: Problem, gpu: Gpu) -> float:
    rf = roofline(problem, gpu.calibration)
    if rf is None:
        raise ValueError(f"no roofline for {problem.describe()} on {gpu.name}")
    return rf.attainable_us


@dataclass(frozen=True)
class Source:
    """A synthetic job's answers: the first stage's library records and, per search tier, the
    records in the order the tier's tuner proposes them."""

    library: tuple[Rec, ...]
    streams: dict[str, tuple[Rec, ...]] = field(hash=False)
    about: str = ""


class Recordings:
    """The recorded files, read once, and the sources derived from them."""

    @cached_property
    def gemm(self) -> dict[str, list[dict[str, Any]]]:
        data = json.loads(GEMM_TRIALS.read_text())
        return {p["problem_key"]: p["trials"] for p in data["problems"]}

    @cached_property
    def cutlass(self) -> dict[str, dict[str, Any]]:
        data = json.loads(CUTLASS_TRIALS.read_text())
        return {p["problem_key"]: p for p in data["problems"]}

    @cached_property
    def attention(self) -> list[dict[str, Any]]:
        data = json.loads(ATTENTION.read_text())
        return [r for r in data["full_run"]["rows"] if r.get("status") == "done"]

    @cached_property
    def spreads(self) -> list[list[float]]:
        """Each recorded Triton search as trial time over its best, in recorded order."""
        out = []
        for trials in self.gemm.values():
            times = [t["median_us"] for t in trials if t["backend"] == "triton"]
            out.append([x / min(times) for x in times])
        return out

    # -- GEMM -------------------------------------------------------------------------------
    def nearest_gemm(self, problem: GemmProblem) -> GemmProblem:
        wide = problem.dtype == "fp32"
        pool = [GemmProblem.from_key(k) for k in self.gemm]
        if problem.dtype == "fp8_e4m3":
            pool = [GemmProblem.from_key(k) for k in self.cutlass if ":fp8_e4m3:" in k]
        else:
            pool = [p for p in pool if (p.dtype == "fp32") == wide] or pool

        def distance(p: GemmProblem) -> float:
            return sum(abs(math.log(getattr(p, d) / getattr(problem, d))) for d in "mnk")

        return min(pool, key=distance)

    def gemm_source(self, problem: GemmProblem, gpu: Gpu, rng: random.Random) -> Source:
        src = self.nearest_gemm(problem)
        scale = attainable_us(problem, gpu) / attainable_us(src, gpu)
        floor = attainable_us(problem, gpu) * 1.005
        lib_f, cut_f, tri_f = (math.exp(rng.gauss(0.0, s)) for s in (0.1, 0.08, 0.12))
        about = f"{GEMM_TRIALS.name}/{CUTLASS_TRIALS.name}: {src.key()} x{scale:.4g}"
        cut = self.cutlass.get(src.key())
        library: list[Rec] = []
        if cut is not None:
            lib_us = float(cut["library_us"])
            library.append(_scaled(Rec("cublas", {}, median_us=lib_us, p20_us=lib_us * 0.995,
                                       p80_us=lib_us * 1.006), scale * lib_f, floor, rng))
        else:
            rec = next(t for t in self.gemm[src.key()] if t["backend"] == "cublas")
            library.append(_scaled(_rec(rec), scale * lib_f, floor, rng))
        streams: dict[str, tuple[Rec, ...]] = {}
        if cut is not None and problem.dtype in ("bf16", "fp8_e4m3"):
            ops = [_scaled(_rec({**t, "backend": "cutlass",
                                 "config": {k: t[k] for k in ("op", "raster", "swizzle",
                                                              "splits")}}),
                           scale * cut_f, floor, rng) for t in cut["trials"]]
            built: set[str] = set()
            ops = [replace(o, compile_s=_compile_once(o, built, rng)) for o in ops]
            library += ops[:6]
            streams["cutlass"] = tuple(ops[6:])
        if problem.dtype != "fp8_e4m3":
            triton = [t for t in self.gemm[src.key()] if t["backend"] == "triton"]
            tiers: dict[str, list[Rec]] = {"tiles": [], "split_k": []}
            for t in triton:
                config = dict(t["config"])
                if triton_constraints.violations(problem, config, LIMITS):
                    continue  # the service's tuner never proposes it for this shape
                tier = "split_k" if int(config.get("SPLIT_K", 1)) > 1 else "tiles"
                rec = _scaled(_rec(t), scale * tri_f, floor, rng)
                tiers[tier].append(replace(rec, compile_s=round(rng.uniform(0.6, 2.5), 3)))
            streams.update({k: tuple(_failing(v, rng)) for k, v in tiers.items()})
        return Source(tuple(library), streams, about)

    # -- attention ------------------------------------------------------------------------------
    def nearest_attention(self, problem: AttentionProblem) -> dict[str, Any]:
        def distance(row: dict[str, Any]) -> float:
            p = row["problem"]
            return (abs(math.log(p["s_q"] / problem.s_q)) + abs(math.log(p["s_kv"] / problem.s_kv))
                    + abs(math.log(p["d"] / problem.d)) + (p["causal"] != problem.causal))

        return min(self.attention, key=distance)

    def attention_source(self, problem: AttentionProblem, gpu: Gpu, rng: random.Random
                         ) -> Source:
        row = self.nearest_attention(problem)
        src = AttentionProblem(**{k: v for k, v in row["problem"].items() if k != "kind"})
        scale = attainable_us(problem, gpu) / attainable_us(src, gpu)
        floor = attainable_us(problem, gpu) * 1.005
        lib_f, tri_f = (math.exp(rng.gauss(0.0, s)) for s in (0.1, 0.12))
        library = []
        for backend in ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "sdpa_math", "flex"):
            us = row["library_us"].get(backend)
            if us is None or (problem.dtype == "fp32" and backend in ("sdpa_cudnn",
                                                                       "sdpa_flash")):
                library.append(Rec(backend, {}, status="unsupported", bench_s=0.05,
                                   error=f"{backend} refuses this problem (the recorded run "
                                         "of the nearest shape has no time for it)"))
                continue
            us = float(us)
            library.append(_scaled(Rec(backend, {}, median_us=us, p20_us=us * 0.994,
                                       p80_us=us * 1.007, rel_error=2e-3), scale * lib_f,
                                   floor, rng))
        best = float(row["triton_us"] or min(row["library_us"].values()) * 1.2)
        streams = {}
        for tier, backend in (("flash", "triton"), ("decode", "triton_decode")):
            configs = _attention_configs(problem, tier, rng)
            spread = rng.choice(self.spreads)
            recs = []
            for i, config in enumerate(configs):
                us = best * spread[i % len(spread)]
                recs.append(replace(_scaled(Rec(backend, config, median_us=us, p20_us=us * 0.99,
                                                p80_us=us * 1.012, rel_error=3e-3),
                                            scale * tri_f, floor, rng),
                                    compile_s=round(rng.uniform(0.8, 3.0), 3)))
            streams[tier] = tuple(_failing(recs, rng))
        about = (f"{ATTENTION.name}: {src.key()} x{scale:.4g}, Triton spread of "
                 f"{GEMM_TRIALS.name}")
        return Source(tuple(library), streams, about)


def _attention_configs(problem: AttentionProblem, tier: str, rng: random.Random
                       ) -> list[dict[str, Any]]:
    choices = attention_space.space(problem, tier)
    grid = [dict(zip((c.name for c in choices), values, strict=True))
            for values in itertools.product(*(c.values for c in choices))]
    rng.shuffle(grid)
    ordered = attention_space.seeds(problem, tier) + grid
    out, seen = [], set()
    for config in ordered:
        key = json.dumps(config, sort_keys=True)
        if key in seen or attention_rules.violations(problem, config, tier, LIMITS):
            continue
        seen.add(key)
        out.append(config)
        if len(out) == 64:
            break
    return out


def _rec(t: dict[str, Any]) -> Rec:
    return Rec(t["backend"], dict(t.get("config") or {}), t.get("status", "ok"),
               t.get("median_us"), t.get("p20_us"), t.get("p80_us"), t.get("rel_error"),
               error=t.get("error"))


def _scaled(r: Rec, factor: float, floor: float, rng: random.Random) -> Rec:
    """``r`` with its times multiplied by ``factor`` and a per-trial noise (2%), its median
    kept above ``floor`` (the roofline), and the benchmark seconds a 50 ms measurement costs."""
    bench_s = round(rng.uniform(0.08, 0.3), 3)
    if r.median_us is None:
        return replace(r, bench_s=bench_s)
    f = factor * math.exp(rng.gauss(0.0, 0.02))
    median = max(r.median_us * f, floor * math.exp(abs(rng.gauss(0.0, 0.01))))
    k = median / r.median_us
    return replace(r, median_us=median, p20_us=(r.p20_us or r.median_us) * k,
                   p80_us=(r.p80_us or r.median_us) * k, bench_s=bench_s)


def _compile_once(r: Rec, built: set[str], rng: random.Random) -> float:
    """nvcc seconds of a CUTLASS op's first measurement (later ones load the artifact)."""
    op = str(r.config.get("op"))
    if op in built:
        return 0.0
    built.add(op)
    return round(rng.uniform(12.0, 40.0), 3)


#: Failures injected into the searches (about 2% of trials), with the texts the worker writes
#: for them (``workers.isolation``): on a real GPU a child dies or hangs now and then.
FAILURES = (("timeout", "no answer within 180 s; child killed", 180.0),
            ("crashed", "benchmark child died (exit code -11)", 0.0))


def _failing(recs: list[Rec], rng: random.Random) -> list[Rec]:
    out = []
    for r in recs:
        if rng.random() < 0.02:
            status, error, held = rng.choice(FAILURES)
            r = replace(r, status=status, median_us=None, p20_us=None, p80_us=None,
                        rel_error=None, error=error, bench_s=held or r.bench_s)
        out.append(r)
    return out
