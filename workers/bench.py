"""The timing method: how long one kernel call takes, as quantiles over many timed calls.

On CUDA (``EventBench``): a few calls estimate the time per call; a time-based warm-up follows;
then each repetition flushes L2 (by default reading a buffer larger than it: ``flush_mode``),
records a start event, calls the kernel, records an end event. The flush is outside the events.
Calls rotate among the given callables (one per input set) so that small inputs are not served
from L2 either. The repetition count aims at ``target_ms`` of timed kernel work.

Host overhead must stay out of the events: when the host needs longer to enqueue a repetition
(Python launcher, TMA descriptors, a second kernel for split-K) than the GPU needs to run it,
the queue drains and the start event fires while the kernel is still being launched, which
inflates and scatters small kernels' times (seen on an H100: a 20 us split-K GEMM read as
60-150 us). So each chunk of repetitions is preceded by a GPU spin (``delay``) longer than the
host's measured time to enqueue that chunk: the GPU is always behind the host.

On the interpreter (``WallClockBench``): ``time.perf_counter`` around a handful of calls. Those
numbers say how slow the interpreter is, nothing about a GPU; the timing carries its method.

The GPU-facing pieces (events, synchronisation, flush) are injected, so the counting logic is
tested on a CPU with fakes.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Bench", "EventBench", "Timing", "WallClockBench", "quantile"]


@dataclass(frozen=True)
class Timing:
    """Quantiles of the timed calls in microseconds; ``bench_s`` is the wall time spent."""

    median_us: float
    p20_us: float
    p80_us: float
    reps: int
    bench_s: float
    method: str
    host_us: float | None = None  # host time to enqueue one repetition (launch overhead)


class Bench(Protocol):
    """Times the calls in ``fns`` (rotating among them) and returns their quantiles."""

    def __call__(self, fns: Sequence[Callable[[], Any]]) -> Timing: ...

    def with_warmup(self, warmup_ms: float) -> Bench:
        """The same timing with a warm-up of ``warmup_ms`` before each call."""


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted values (as ``numpy.quantile``)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _timing(times_ms: Sequence[float], bench_s: float, method: str,
            host_us: float | None = None) -> Timing:
    s = sorted(times_ms)
    return Timing(median_us=quantile(s, 0.5) * 1e3, p20_us=quantile(s, 0.2) * 1e3,
                  p80_us=quantile(s, 0.8) * 1e3, reps=len(s), bench_s=bench_s, method=method,
                  host_us=host_us)


class _Event(Protocol):
    def record(self) -> None: ...

    def elapsed_time(self, end: Any) -> float: ...


class EventBench:
    """CUDA-event timing with L2 flush, warm-up, rotation and a work-based repetition count.

    ``flush_mode="read"`` (the default) reduces over a buffer larger than L2, leaving it full of
    clean lines: every run starts cold, as in a real model where the operands were last touched
    long ago. ``"write"`` zeroes the buffer as ``triton.testing.do_bench`` does; that leaves L2
    full of dirty lines that the timed kernel's misses must write back, so memory-bound kernels
    pay for bytes they never touch (see docs/notes/kernels.md).

    ``new_event``, ``synchronize``, ``flush`` and ``delay`` (a GPU-side wait of so many
    microseconds) default to CUDA (``torch.cuda.Event``, a ``zero_()`` of a ``flush_bytes``
    buffer, ``torch.cuda._sleep``); tests pass fakes.
    """

    def __init__(self, *, warmup_ms: float = 25.0, target_ms: float = 100.0, min_reps: int = 10,
                 max_reps: int = 2000, estimate_reps: int = 5, flush_l2: bool = True,
                 flush_bytes: int = 256 << 20, flush_mode: str = "read",
                 new_event: Callable[[], _Event] | None = None,
                 synchronize: Callable[[], None] | None = None,
                 flush: Callable[[], None] | None = None,
                 delay: Callable[[float], None] | None = None, chunk: int = 25,
                 max_host_us: float = 500.0) -> None:
        self.warmup_ms = warmup_ms
        self.target_ms = target_ms
        self.min_reps = min_reps
        self.max_reps = max_reps
        self.estimate_reps = estimate_reps
        self.chunk = chunk
        self.max_host_us = max_host_us
        if new_event is None or synchronize is None or (flush is None and flush_l2):
            import torch

            # Spin cycles per microsecond at 2 GHz; at lower clocks the wait is only longer.
            delay = delay or (lambda us: torch.cuda._sleep(int(us * 2000)))
            new_event = new_event or (lambda: torch.cuda.Event(enable_timing=True))
            synchronize = synchronize or torch.cuda.synchronize
            if flush is None and flush_l2:
                buf = torch.zeros(flush_bytes // 4, dtype=torch.int32, device="cuda")
                if flush_mode == "write":
                    flush = buf.zero_
                elif flush_mode == "read":
                    flush = buf.amax  # leaves L2 full of clean lines: no write-backs
                else:
                    raise ValueError(f"flush_mode must be 'write' or 'read', got {flush_mode!r}")
        self._new_event = new_event
        self._sync = synchronize
        self._flush = flush if flush_l2 else None
        self._delay = delay

    def _timed(self, fns: Sequence[Callable[[], Any]], reps: int, start: int,
               host_us: float) -> tuple[list[float], float]:
        """Per-call milliseconds of ``reps`` calls rotating from ``fns[start]``, and the host time
        per repetition of the first chunk (us).

        Each chunk of calls gets a GPU head start of 1.5x ``host_us`` per call. ``host_us`` is a
        fixed estimate: it is never re-measured from later chunks, whose host time includes
        waiting for a full launch queue (seen on an H100: feeding that back grew the head start
        geometrically, to seconds per candidate).
        """
        starts = [self._new_event() for _ in range(reps)]
        ends = [self._new_event() for _ in range(reps)]
        done, first_us = 0, 0.0
        while done < reps:
            n = min(self.chunk, reps - done)
            if self._delay is not None:
                self._delay(1.5 * n * host_us + 20.0)
            t0 = time.perf_counter()
            for i in range(done, done + n):
                if self._flush is not None:
                    self._flush()
                starts[i].record()
                fns[(start + i) % len(fns)]()
                ends[i].record()
            if done == 0:
                first_us = (time.perf_counter() - t0) * 1e6 / n
            done += n
        self._sync()
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)], first_us

    def reps_for(self, est_ms: float) -> int:
        """Repetitions that make about ``target_ms`` of timed work, within the bounds."""
        if est_ms <= 0:
            return self.max_reps
        return max(self.min_reps, min(self.max_reps, math.ceil(self.target_ms / est_ms)))

    def with_warmup(self, warmup_ms: float) -> EventBench:
        """The same timing with another warm-up (it shares the flush buffer and the hooks)."""
        other = copy.copy(self)
        other.warmup_ms = warmup_ms
        return other

    def __call__(self, fns: Sequence[Callable[[], Any]]) -> Timing:
        if not fns:
            raise ValueError("nothing to time")
        t0 = time.perf_counter()
        self._sync()
        # Estimate behind a generous head start (200 us a call): its host time is the launch
        # overhead, which then sizes the head starts of the timed chunks.
        est, host_us = self._timed(fns, self.estimate_reps, 0, 200.0)
        host_us = min(max(host_us, 5.0), self.max_host_us)
        est_ms = quantile(sorted(est), 0.5)
        # Warm-up by time, so clocks ramp up and caches of the launch path are hot.
        n_warm = max(1, min(self.max_reps, math.ceil(self.warmup_ms / max(est_ms, 1e-3))))
        for i in range(n_warm):
            fns[(self.estimate_reps + i) % len(fns)]()
        times, host_us = self._timed(fns, self.reps_for(est_ms), self.estimate_reps + n_warm,
                                     host_us)
        return _timing(times, time.perf_counter() - t0, "cuda-events", host_us)


class WallClockBench:
    """Host-clock timing for the CPU interpreter: ``reps`` calls after one warm-up call."""

    def __init__(self, reps: int = 3, clock: Callable[[], float] = time.perf_counter,
                 warmup: int = 1) -> None:
        self.reps = reps
        self.clock = clock
        self.warmup = warmup

    def with_warmup(self, warmup_ms: float) -> WallClockBench:
        """A copy with the same warm-up: it is a count of calls, not a time (the interpreter
        has no clock to ramp up)."""
        return copy.copy(self)

    def __call__(self, fns: Sequence[Callable[[], Any]]) -> Timing:
        if not fns:
            raise ValueError("nothing to time")
        t0 = self.clock()
        for i in range(self.warmup):
            fns[i % len(fns)]()
        times = []
        for i in range(self.reps):
            s = self.clock()
            fns[(self.warmup + i) % len(fns)]()
            times.append((self.clock() - s) * 1e3)
        return _timing(times, self.clock() - t0, "wallclock-interpreter")
