"""The timing reports the median, p20 and p80 of distinct call times, not another quantile.

The events are FAKE: the i-th timed call (counting from 1) takes i ms, so the quantiles are
distinct and known exactly.
"""

from __future__ import annotations

import itertools

import pytest

from workers.bench import EventBench, WallClockBench


class RampGpu:
    """FAKE events: the n-th kernel call of the timed phase lasts n ms (earlier calls 1 ms)."""

    def __init__(self, warm_calls: int) -> None:
        self.now = 0.0
        self.calls = 0
        self.warm_calls = warm_calls

    def event(self) -> RampGpu.Event:
        return RampGpu.Event(self)

    def kernel(self) -> None:
        self.calls += 1
        self.now += max(1, self.calls - self.warm_calls)

    class Event:
        def __init__(self, gpu: RampGpu) -> None:
            self.gpu, self.t = gpu, 0.0

        def record(self) -> None:
            self.t = self.gpu.now

        def elapsed_time(self, end: RampGpu.Event) -> float:
            return end.t - self.t


def test_event_bench_reports_exact_quantiles() -> None:
    # estimate: 5 calls of 1 ms; warm-up: ceil(1 ms / 1 ms) = 1 call; then 11 timed calls
    # (min_reps) of 1..11 ms: median 6, p20 3, p80 9.
    gpu = RampGpu(warm_calls=5 + 1)
    bench = EventBench(new_event=gpu.event, synchronize=lambda: None, flush_l2=False,
                       delay=lambda us: None, warmup_ms=1.0, target_ms=1.0, min_reps=11,
                       estimate_reps=5)
    t = bench([gpu.kernel])
    assert t.reps == 11
    assert t.median_us == pytest.approx(6000.0)
    assert t.p20_us == pytest.approx(3000.0)
    assert t.p80_us == pytest.approx(9000.0)


def test_wallclock_bench_reports_exact_quantiles() -> None:
    # FAKE clock: each timed call spans i seconds for i = 1..5 (1000..5000 ms).
    ticks = itertools.count()
    state = {"t": 0.0}

    def clock() -> float:
        n = next(ticks)
        state["t"] += n  # successive readings differ by 1, 2, 3, ... seconds
        return state["t"]

    t = WallClockBench(reps=5, clock=clock, warmup=0)([lambda: None])
    assert t.reps == 5
    # The differences are the clock steps at the end of each call: 2, 4, 6, 8, 10 s.
    assert t.median_us == pytest.approx(6e6)
    assert t.p20_us == pytest.approx(3.6e6)
    assert t.p80_us == pytest.approx(8.4e6)
