"""One candidate, measured: runs inside the isolated child process (``workers.isolation``).

``execute`` checks the configuration statically, makes fresh random inputs (a new seed per
candidate, several input sets when they fit in L2), runs the kernel once into a NaN-poisoned
output, compares with a float64 reference, and only a correct kernel is timed. Every failure
becomes a ``Measurement`` with a status from ``classify``; nothing a candidate does raises out
of here.
"""

from __future__ import annotations

import random
import time
import traceback
from dataclasses import dataclass, fields, replace
from typing import Any

from search.types import Candidate, Measurement, Status, Task
from workers.checking import checked_calls, fresh_inputs

__all__ = ["STICKY", "ExecuteOptions", "classify", "execute"]

#: Statuses after which the CUDA context is unusable: the child process must exit.
STICKY = frozenset({Status.CRASHED})

# Errors that poison the CUDA context (every later call fails): the process must be replaced.
_STICKY_MARKERS = (
    "illegal memory access", "illegal address", "misaligned address", "illegal instruction",
    "unspecified launch failure", "device-side assert", "an uncorrectable ecc error",
    "hardware stack error", "cuda_error_illegal", "invalid program counter",
)


@dataclass(frozen=True)
class ExecuteOptions:
    """How ``execute`` measures; sent as a plain dict across the process boundary."""

    interpret: bool = False
    seed: int | None = None  # None: a fresh random seed per candidate
    n_sets: int | None = None  # input sets to rotate; None: 4 when they fit in L2, else 1
    check_constraints: bool = True
    warmup_ms: float = 25.0
    # 50 ms of timed work, at most 500 calls: the median of a 10 µs kernel is then stable to
    # well under 1%, and a 64-trial search spends seconds, not minutes, timing.
    target_ms: float = 50.0
    min_reps: int = 10
    max_reps: int = 500
    # A verification round is one of >= 5 per contender, and the rounds' spread is its
    # evidence: 100 calls a round (5 rounds: as many as one search measurement) keep a
    # 15 us kernel's verification from costing ten search measurements.
    verify_max_reps: int = 100
    # Warm-up of a verification round after the first (milliseconds; at least one call): by
    # then each contender has run and the GPU has not idled. With 25 ms a side and round the
    # library confirmation on 2048x4096x14336 cost 0.87-1.02 GPU-s on the H100, with 3 ms
    # 0.66-0.70 (docs/benchmarks/agent_h100_2026-11-24.md, run 9).
    verify_rewarm_ms: float = 3.0
    flush_l2: bool = True
    flush_mode: str = "read"  # or "write": see workers.bench.EventBench
    interpreter_reps: int = 3

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ExecuteOptions:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in names})


def classify(exc: BaseException) -> Status:
    """The status of a candidate whose run raised ``exc`` (the one place this is decided)."""
    from kernel_templates.errors import CompileError, InvalidConfig, LaunchError, Unsupported

    if isinstance(exc, Unsupported):
        return Status.UNSUPPORTED
    if isinstance(exc, InvalidConfig):
        return Status.INVALID
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return Status.OOM
    except ImportError:  # pragma: no cover - torch is always there in a worker
        pass
    try:
        from triton.compiler.errors import CompilationError
        from triton.runtime.errors import OutOfResources, PTXASError

        if isinstance(exc, OutOfResources):
            return Status.INVALID if "shared memory" in str(exc) else Status.COMPILE_ERROR
        if isinstance(exc, CompilationError | PTXASError):
            return Status.COMPILE_ERROR
    except ImportError:  # pragma: no cover
        pass
    if isinstance(exc, CompileError):
        return Status.COMPILE_ERROR
    text = f"{type(exc).__name__}: {exc}".lower()
    if any(marker in text for marker in _STICKY_MARKERS):
        return Status.CRASHED
    if isinstance(exc, LaunchError):  # a launcher's failure status (e.g. CUTLASS's)
        return Status.LAUNCH_ERROR
    if "out of memory" in text:
        return Status.OOM
    if isinstance(exc, NotImplementedError):
        return Status.UNSUPPORTED
    return Status.LAUNCH_ERROR


def _failure(status: Status, exc: BaseException | str, env: dict[str, Any],
             **extra: Any) -> dict[str, Any]:
    text = exc if isinstance(exc, str) else "".join(
        traceback.format_exception_only(type(exc), exc)).strip()
    return Measurement(status=status, error=text[-4000:], env=env, **extra).to_dict()


def _bench(opts: ExecuteOptions, cuda: bool):
    from workers.bench import EventBench, WallClockBench

    if not cuda:
        return WallClockBench(reps=opts.interpreter_reps)
    return EventBench(warmup_ms=opts.warmup_ms, target_ms=opts.target_ms,
                      min_reps=opts.min_reps, max_reps=opts.max_reps, flush_l2=opts.flush_l2,
                      flush_mode=opts.flush_mode)


def _n_sets(opts: ExecuteOptions, cand: Candidate, cuda: bool) -> int:
    if opts.n_sets is not None:
        return max(1, opts.n_sets)
    if not cuda:
        return 1
    import torch

    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    return 4 if cand.problem.min_bytes < 2 * l2 else 1


def execute(candidate: dict[str, Any], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Measure one candidate (``Candidate.to_dict()``); returns ``Measurement.to_dict()``."""
    opts = ExecuteOptions.from_dict(options)
    from workers.device import environment

    env = environment(True if opts.interpret else None)
    try:
        cand = Candidate.from_dict(candidate)
    except (KeyError, TypeError, ValueError) as exc:
        return _failure(Status.INVALID, exc, env)
    cuda = env["mode"] == "cuda"
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(2**31)
    env = {**env, "seed": seed}
    if cand.task is not None:
        return _task(cand, opts, env, cuda, seed)

    if opts.check_constraints:
        from kernel_templates.registry import static_violations

        try:
            reasons = static_violations(cand, env["mode"], _smem(cuda))
        except (KeyError, TypeError) as exc:
            return _failure(Status.INVALID, f"bad config: {exc!r}", env)
        except Exception as exc:  # noqa: BLE001 - an unknown kind or backend is data
            return _failure(classify(exc), exc, env)
        if reasons:
            return _failure(Status.INVALID, "; ".join(reasons), env)

    compile_s: float | None = None
    t0: float | None = None
    try:
        import torch

        from kernel_templates.registry import check_supported

        check_supported(cand.backend, cand.problem)
        device = torch.device("cuda" if cuda else "cpu")
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = False
        sets, ref = fresh_inputs(cand.problem, device, seed, _n_sets(opts, cand, cuda))
        # compile_s: making the callables (a CUTLASS op not yet built is compiled here) and
        # the first call (Triton JIT, cuBLAS heuristics), which is also the correctness run.
        t0 = time.perf_counter()
        calls, err, tol = checked_calls(cand, sets, ref, cuda)
        compile_s = time.perf_counter() - t0
        del ref
        if not err <= tol:
            return _failure(Status.WRONG_RESULT, f"rel_error {err:.3g} over tolerance {tol:.3g}",
                            env, rel_error=err, compile_s=compile_s)
        timing = _bench(opts, cuda)(calls)
    except Exception as exc:  # noqa: BLE001 - a candidate's failure is data
        status = classify(exc)
        if compile_s is None and status == Status.COMPILE_ERROR and t0 is not None:
            compile_s = time.perf_counter() - t0  # the time the failed compile took
        return _failure(status, exc, env, compile_s=compile_s)
    # a library call that picks its kernel at run time says which one it ran (cuBLASLt's
    # algorithm, tile and options for a ``cublaslt`` rank): kept with the timing as evidence
    resolved = getattr(calls[0], "resolved", None)
    return Measurement(status=Status.OK, median_us=timing.median_us, p20_us=timing.p20_us,
                       p80_us=timing.p80_us, reps=timing.reps, rel_error=err,
                       compile_s=compile_s, bench_s=timing.bench_s,
                       env={**env, "timing": timing.method, "input_sets": len(sets),
                            "host_us_per_call": timing.host_us},
                       extra={"resolved": dict(resolved)} if resolved else {}).to_dict()


def _task(cand: Candidate, opts: ExecuteOptions, env: dict[str, Any], cuda: bool,
          seed: int) -> dict[str, Any]:
    """A calibration or verification task (``workers.tasks``); failures are data too."""
    from workers import tasks

    if cand.task not in tuple(Task):
        return _failure(Status.INVALID, f"unknown task {cand.task!r}", env)
    try:
        if cand.task == Task.CALIBRATE.value:
            passes = cand.config.get("passes")
            return tasks.calibrate(env, _bench(opts, cuda), cuda,
                                   None if passes is None else _whole(passes)).to_dict()
        per_round = replace(opts, max_reps=max(opts.min_reps,
                                               min(opts.max_reps, opts.verify_max_reps)))
        bench = _bench(per_round, cuda)
        return tasks.verify(cand, env, bench, cuda, _n_sets(opts, cand, cuda), seed,
                            bench.with_warmup(min(opts.warmup_ms, opts.verify_rewarm_ms))
                            ).to_dict()
    except Exception as exc:  # noqa: BLE001
        return _failure(classify(exc), exc, env)


def _whole(value: Any) -> int:
    """A task's count setting as an int (a bad one becomes 0, which the task refuses)."""
    try:
        return int(value) if float(value) == int(value) else 0
    except (TypeError, ValueError):
        return 0


def _smem(cuda: bool) -> int:
    if not cuda:
        return 0
    import torch

    props = torch.cuda.get_device_properties(0)
    return int(getattr(props, "shared_memory_per_block_optin", 0) or 0)
