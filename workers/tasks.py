"""Work items that are not one kernel's measurement; they run in the isolated child like one.

``calibrate``: the device's measured peaks for the roofline (``search.roofline``): a large
device-to-device copy (bytes read + written per second) and large cuBLAS GEMMs per precision
(the best of a few shapes, so one shape's wave quantisation does not set the peak), fp8 e4m3
through ``torch._scaled_mm`` where the device has fp8 GEMMs (else it is skipped, and named in
``extra["peaks_skipped"]``). Each GEMM is timed once cold, then run back to back for
``SUSTAIN_MS`` so the clock settles where the power limit holds it, then timed again. The GEMMs
are measured in ``passes`` passes (3 on a GPU): each shape's sustained rate is the median of
its passes, the precision's peak is the best of those medians, and the lowest pass of the shape
that sets the peak is kept as ``extra["peak_low_tflops"]``: how far the peak moves from one
pass to the next (on an H100, 749-797 TFLOP/s bf16 over five passes two minutes apart:
``docs/benchmarks/agent_h100_2026-11-22.md``), which verdict 1 takes as the calibration's
noise. Every pass's timings stay in the measurement (``extra["curve_passes"]``; ``curve``:
(flops, median sustained TFLOP/s) per shape; ``burst_tflops``: the best cold one) as the record
of how far the device throttles; the roofline uses one peak for every size
(``search.roofline`` says why).

``verify``: the decision loop's second verdict. The library's best and the custom best (and,
where the library's best is not cuBLAS, cuBLAS as a ``reference``, so the final speed-up over
cuBLAS is measured in the same rounds; without a custom side, the library confirmation: the
library's pick against cuBLAS alone) are run on the same fresh inputs, checked again (a wrong
result fails the task), then timed in rotating order (A B, B A, A B ... ; with three: A B C,
B C A, C A B ...) for ``rounds`` rounds; each round's median of each goes back in ``extra`` so
the service can compare medians against the round-to-round spread.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from search.types import Candidate, Measurement, Status
from workers.checking import checked_calls, fresh_inputs

__all__ = ["calibrate", "verify"]

#: Shapes timed for the matrix peak (m, n, k); the best TFLOP/s among them is the peak.
PEAK_SHAPES_GPU = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 16384))
PEAK_SHAPES_CPU = ((256, 256, 256),)
#: Back-to-back running before a peak shape's sustained timing (milliseconds).
SUSTAIN_MS_GPU = 500.0
SUSTAIN_MS_CPU = 0.0
#: Passes over the peak shapes (a calibration's ``config["passes"]`` overrides it, 1 to 9).
PASSES_GPU = 3
PASSES_CPU = 1
COPY_BYTES_GPU = 1 << 30
COPY_BYTES_CPU = 32 << 20


def calibrate(env: dict[str, Any], bench: Any, cuda: bool, passes: int | None = None
              ) -> Measurement:
    """Measure bandwidth and per-precision matrix peaks with ``bench`` (flush off: the
    operands are far larger than L2 or are meant to stay in it)."""
    import torch

    passes = (PASSES_GPU if cuda else PASSES_CPU) if passes is None else passes
    if not 1 <= passes <= 9:
        return Measurement(status=Status.INVALID, env=env,
                           error=f"calibration passes={passes!r}: must be 1 to 9")
    device = torch.device("cuda" if cuda else "cpu")
    t0 = time.perf_counter()
    nbytes = COPY_BYTES_GPU if cuda else COPY_BYTES_CPU
    gen = torch.Generator(device=device)
    gen.manual_seed(1234)
    src = torch.randint(0, 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device=device,
                        generator=gen)
    dst = torch.empty_like(src)
    copy = bench([lambda d=dst, s=src: d.copy_(s)])
    if not torch.equal(dst, src):
        return Measurement(status=Status.WRONG_RESULT, error="device copy mismatch", env=env)
    bandwidth_gbs = 2 * nbytes / (copy.median_us * 1e-6) / 1e9
    del src, dst
    shapes = PEAK_SHAPES_GPU if cuda else PEAK_SHAPES_CPU
    sustained = _Sustained(bench, SUSTAIN_MS_GPU if cuda else SUSTAIN_MS_CPU)
    precisions = (("bf16", torch.bfloat16, False), ("fp16", torch.float16, False),
                  ("fp32", torch.float32, False), ("tf32", torch.float32, True))
    saved = torch.backends.cuda.matmul.allow_tf32
    skipped: dict[str, str] = {}
    for _ in range(passes):
        try:
            for name, dtype, tf32 in precisions:
                for m, n, k in shapes if name != "fp32" else shapes[:1]:
                    a = torch.randn(m, k, device=device, generator=gen).to(dtype)
                    b = torch.randn(k, n, device=device, generator=gen).to(dtype)
                    out = torch.empty(m, n, device=device, dtype=dtype)
                    torch.backends.cuda.matmul.allow_tf32 = tf32
                    sustained(name, (m, n, k),
                              lambda a=a, b=b, out=out: torch.matmul(a, b, out=out))
                    if not bool(torch.isfinite(out).all()):
                        return Measurement(
                            status=Status.WRONG_RESULT, env=env,
                            error=f"{name} {m}x{n}x{k} matmul gave non-finite values")
                    del a, b, out
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved
        if "fp8_e4m3" not in skipped:
            fp8 = _fp8_peak(sustained, shapes, device, gen)
            if fp8.error is not None:
                return Measurement(status=Status.WRONG_RESULT, env=env, error=fp8.error)
            if fp8.skipped is not None:
                skipped["fp8_e4m3"] = fp8.skipped
    extra: dict[str, Any] = {"bandwidth_gbs": bandwidth_gbs, "peak_tflops": sustained.peaks(),
                             "peak_low_tflops": sustained.lows(), "passes": passes,
                             "curve": sustained.curve(), "curve_passes": sustained.curve_passes(),
                             "burst_tflops": sustained.burst,
                             "sustain_ms": sustained.sustain_ms, "copy_bytes": nbytes,
                             "peak_shapes": [list(s) for s in shapes]}
    if skipped:
        extra["peaks_skipped"] = skipped
    return Measurement(status=Status.OK, median_us=copy.median_us, p20_us=copy.p20_us,
                       p80_us=copy.p80_us, reps=copy.reps, bench_s=time.perf_counter() - t0,
                       env={**env, "timing": copy.method}, extra=extra)


Shape = tuple[int, int, int]


class _Sustained:
    """Times GEMMs cold, runs each back to back for ``sustain_ms``, times it again, and keeps
    by precision and shape the sustained TFLOP/s of every pass, and by precision ``burst``
    (the best cold TFLOP/s).

    ``curve()``: (flops, median sustained TFLOP/s over the passes) per shape; ``peaks()``: the
    best of those medians per precision; ``lows()``: the lowest pass of the shape that sets the
    peak (the peak itself after one pass)."""

    def __init__(self, bench: Any, sustain_ms: float) -> None:
        self.bench = bench
        self.sustain_ms = sustain_ms
        self.runs: dict[str, dict[Shape, list[float]]] = {}
        self.burst: dict[str, float] = {}

    def __call__(self, name: str, shape: Shape, fn: Callable[[], Any]) -> None:
        flops = 2 * shape[0] * shape[1] * shape[2]
        cold = self.bench([fn])
        for _ in range(math.ceil(self.sustain_ms * 1e3 / max(cold.median_us, 1.0))):
            fn()
        hot = self.bench([fn]) if self.sustain_ms > 0 else cold
        self.runs.setdefault(name, {}).setdefault(shape, []).append(
            flops / (hot.median_us * 1e-6) / 1e12)
        self.burst[name] = max(self.burst.get(name, 0.0),
                               flops / (cold.median_us * 1e-6) / 1e12)

    def drop(self, name: str) -> None:
        """Forget a precision (its peak cannot be measured on every shape)."""
        self.runs.pop(name, None)
        self.burst.pop(name, None)

    def curve(self) -> dict[str, list[list[float]]]:
        return {name: [[2 * m * n * k, statistics.median(ts)] for (m, n, k), ts in by.items()]
                for name, by in self.runs.items()}

    def curve_passes(self) -> dict[str, list[list[Any]]]:
        return {name: [[2 * m * n * k, list(ts)] for (m, n, k), ts in by.items()]
                for name, by in self.runs.items()}

    def _peak_shape(self, name: str) -> list[float]:
        return max(self.runs[name].values(), key=statistics.median)

    def peaks(self) -> dict[str, float]:
        return {name: statistics.median(self._peak_shape(name)) for name in self.runs}

    def lows(self) -> dict[str, float]:
        return {name: min(self._peak_shape(name)) for name in self.runs}


class _Peak(NamedTuple):
    """Why the fp8 peak was skipped, or what went wrong (neither: it is in the curve)."""

    skipped: str | None = None
    error: str | None = None


def _fp8_peak(sustained: _Sustained, shapes: tuple[Shape, ...], device: Any, gen: Any
              ) -> _Peak:
    """One pass of the fp8 e4m3 points of ``sustained``: ``torch._scaled_mm`` (per-tensor
    scales, B column-major, bf16 out, as the fp8 library candidates run) on the peak shapes.

    A device or build without fp8 GEMMs (a GPU before sm_89, a torch without the kernel) raises
    before anything runs: the peak is skipped, so fp8 problems there get no roofline while the
    rest of the calibration still counts. Non-finite output is an error, as for the others."""
    import torch

    f8 = torch.float8_e4m3fn
    for m, n, k in shapes:
        a = (torch.randn(m, k, device=device, generator=gen) * 2).to(f8)
        b = (torch.randn(n, k, device=device, generator=gen) * 2).to(f8).t()
        scale = torch.tensor(0.5 * k ** -0.25, device=device)
        out = torch.empty(m, n, device=device, dtype=torch.bfloat16)

        def call(a: Any = a, b: Any = b, s: Any = scale, out: Any = out) -> Any:
            return torch._scaled_mm(a, b, scale_a=s, scale_b=s, out_dtype=out.dtype, out=out)

        try:
            call()
        except (RuntimeError, NotImplementedError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            sustained.drop("fp8_e4m3")  # no peak from some of the shapes
            return _Peak(skipped=f"torch._scaled_mm does not run here: {first[:300]}")
        sustained("fp8_e4m3", (m, n, k), call)
        if not bool(torch.isfinite(out).all()):
            return _Peak(error=f"fp8_e4m3 {m}x{n}x{k} torch._scaled_mm gave non-finite values")
        del a, b, out
    return _Peak()


def _runners_up(cand: Candidate, spec: Any, sets: Any, ref: Any, cuda: bool
                ) -> tuple[dict[str, tuple[int, list[Any], float]], list[dict[str, Any]]]:
    """The runoff's other finalists that pass the re-check, by side name (``runner_up_<id>``:
    id, calls, error), and those left out with the reason."""
    from kernel_templates.registry import check_supported

    runners: dict[str, tuple[int, list[Any], float]] = {}
    dropped: list[dict[str, Any]] = []
    for part in spec if isinstance(spec, list) else []:
        if not isinstance(part, dict) or "backend" not in part or "id" not in part:
            dropped.append({"id": None, "reason": "a runner-up needs id, backend and config"})
            continue
        rid = int(part["id"])
        c = Candidate(cand.problem, str(part["backend"]), dict(part.get("config") or {}))
        try:
            check_supported(c.backend, c.problem)
            fns, err, tol = checked_calls(c, sets, ref, cuda)
        except Exception as exc:  # noqa: BLE001 - a finalist that cannot run leaves the runoff
            dropped.append({"id": rid, "reason": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        if not err <= tol:
            dropped.append({"id": rid, "reason": f"rel_error {err:.3g} over tolerance "
                                                 f"{tol:.3g} on the re-check"})
            continue
        runners[f"runner_up_{rid}"] = (rid, fns, err)
    return runners, dropped


def verify(cand: Candidate, env: dict[str, Any], bench: Any, cuda: bool, n_sets: int,
           seed: int, rewarmed: Any = None) -> Measurement:
    """Re-check and time the library and the custom contender (and cuBLAS as the reference,
    when the config names one) interleaved. A config without ``custom`` but with a
    ``reference`` is a library confirmation: the library's pick against cuBLAS; the
    measurement's median is then the library's.

    ``runners_up`` (a list of ``{"id", "backend", "config"}``): other custom finalists, timed
    in the same rounds (the runoff; ``extra["runners_up"]``: each one's id, rounds and error).
    One wrong on the re-check, or that cannot run, is left out with its reason
    (``extra["runners_up_dropped"]``) instead of failing the verification.

    ``rewarmed`` (optional) times the rounds after the first: the same timing with a shorter
    warm-up, since by then every contender has run and the GPU has been busy throughout."""
    import torch

    from kernel_templates.registry import check_supported

    t0 = time.perf_counter()
    spec = cand.config
    rounds = int(spec.get("rounds", 5))
    contenders: dict[str, Candidate] = {}
    sides = tuple(side for side in ("library", "custom", "reference")
                  if side == "library" or spec.get(side) is not None)
    if len(sides) < 2:  # library alone: name the side a verification must have
        sides = ("library", "custom")
    for side in sides:
        part = spec.get(side)
        if not isinstance(part, dict) or "backend" not in part:
            return Measurement(status=Status.INVALID, env=env,
                               error=f"verify config needs {side}.backend and {side}.config")
        contenders[side] = Candidate(cand.problem, str(part["backend"]),
                                     dict(part.get("config") or {}))
    device = torch.device("cuda" if cuda else "cpu")
    sets, ref = fresh_inputs(cand.problem, device, seed, n_sets)
    calls: dict[str, list[Any]] = {}
    errors: dict[str, float] = {}
    for side, c in contenders.items():
        check_supported(c.backend, c.problem)
        fns, err, tol = checked_calls(c, sets, ref, cuda)  # poisons the output each time
        errors[side] = err
        if not err <= tol:
            return Measurement(status=Status.WRONG_RESULT, rel_error=err, env=env,
                               error=f"{side} ({c.backend}) rel_error {err:.3g} over "
                                     f"tolerance {tol:.3g} on the re-check",
                               extra={f"{side}_rel_error": err})
        calls[side] = fns
    runners, dropped = _runners_up(cand, spec.get("runners_up"), sets, ref, cuda)
    for name, (_, fns, err) in runners.items():
        calls[name] = fns
        errors[name] = err
    sides = (*sides, *runners)
    times: dict[str, list[float]] = {side: [] for side in sides}
    reps: list[int] = []
    for r in range(rounds):
        # rotate the order, so that no contender always runs right after another
        for side in sides[r % len(sides):] + sides[:r % len(sides)]:
            timing = (bench if r == 0 or rewarmed is None else rewarmed)(calls[side])
            times[side].append(timing.median_us)
            reps.append(timing.reps)
    main = "custom" if "custom" in times else "library"  # a confirmation: the library's pick
    cus = times[main]
    named = [side for side in sides if side not in runners]
    extra: dict[str, Any] = {f"{side}_us": times[side] for side in named}
    extra.update({f"{side}_rel_error": errors[side] for side in named})
    extra.update({"order": f"rotating: {', '.join(sides)} first", "round_reps": reps})
    if runners or dropped:
        extra["runners_up"] = [{"id": rid, "us": times[name], "rel_error": errors[name]}
                               for name, (rid, _, _) in runners.items()]
    if dropped:
        extra["runners_up_dropped"] = dropped
    return Measurement(
        status=Status.OK, median_us=statistics.median(cus), p20_us=min(cus), p80_us=max(cus),
        reps=rounds, rel_error=errors[main], bench_s=time.perf_counter() - t0,
        env={**env, "input_sets": n_sets}, extra=extra)
