"""The timing method, with fake events/clocks: counting, rotation, flush placement."""

from __future__ import annotations

import time

import pytest

from workers.bench import EventBench, WallClockBench, quantile


class FakeGpu:
    """Events on a fake clock: each kernel call advances it by ``kernel_ms``."""

    def __init__(self, kernel_ms: float) -> None:
        self.kernel_ms = kernel_ms
        self.now = 0.0
        self.log: list[str] = []
        self.delays: list[float] = []

    def event(self) -> FakeGpu.Event:
        return FakeGpu.Event(self)

    def kernel(self, name: str = "k"):
        def call() -> None:
            self.log.append(name)
            self.now += self.kernel_ms

        return call

    def delay(self, us: float) -> None:
        self.log.append("delay")
        self.delays.append(us)

    def flush(self) -> None:
        self.log.append("flush")
        self.now += 100.0  # must never show in the timings

    class Event:
        def __init__(self, gpu: FakeGpu) -> None:
            self.gpu, self.t = gpu, None

        def record(self) -> None:
            self.t = self.gpu.now
            self.gpu.log.append("event")

        def elapsed_time(self, end: FakeGpu.Event) -> float:
            return end.t - self.t


def make(gpu: FakeGpu, **kw) -> EventBench:
    return EventBench(new_event=gpu.event, synchronize=lambda: None, flush=gpu.flush,
                      delay=gpu.delay, **kw)


def test_quantile() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert quantile([1.0, 2.0], 0.5) == 1.5
    assert quantile([7.0], 0.2) == 7.0
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_event_bench_counts_and_excludes_flush() -> None:
    gpu = FakeGpu(kernel_ms=0.5)
    t = make(gpu, target_ms=100.0)([gpu.kernel()])
    assert t.reps == 200 and t.method == "cuda-events"
    assert t.median_us == pytest.approx(500.0) and t.p20_us == t.p80_us == t.median_us
    # Each timed call is flush, start event, kernel, end event: the flush is outside.
    i = gpu.log.index("flush")
    assert gpu.log[i:i + 4] == ["flush", "event", "k", "event"]


def test_event_bench_rep_bounds() -> None:
    fast, slow = FakeGpu(kernel_ms=1e-4), FakeGpu(kernel_ms=50.0)
    assert make(fast, max_reps=300)([fast.kernel()]).reps == 300
    assert make(slow, min_reps=10)([slow.kernel()]).reps == 10


def test_event_bench_rotates_input_sets() -> None:
    gpu = FakeGpu(kernel_ms=1.0)
    make(gpu, target_ms=40.0, warmup_ms=0.0)([gpu.kernel("a"), gpu.kernel("b")])
    calls = [x for x in gpu.log if x in ("a", "b")]
    assert all(x != y for x, y in zip(calls, calls[1:], strict=False))


def test_wall_clock_bench() -> None:
    ticks = iter(float(i) for i in range(100))
    calls: list[int] = []
    t = WallClockBench(reps=3, clock=lambda: next(ticks))([lambda: calls.append(1)])
    assert t.reps == 3 and len(calls) == 4 and t.method == "wallclock-interpreter"
    assert t.median_us == pytest.approx(1e6)


def test_event_bench_gives_the_gpu_a_head_start_per_chunk() -> None:
    gpu = FakeGpu(kernel_ms=1.0)
    t = make(gpu, target_ms=250.0, warmup_ms=0.0, chunk=100)([gpu.kernel()])
    # 5 estimate calls (one chunk), then 250 timed calls in chunks of 100, 100, 50.
    assert t.reps == 250 and len(gpu.delays) == 4
    assert gpu.delays[0] == pytest.approx(1.5 * 5 * 200.0 + 20.0)  # the first, generous guess
    assert t.host_us is not None and t.host_us > 0
    # Every chunk starts with the delay, before its first flush and start event.
    firsts = [i for i, x in enumerate(gpu.log) if x == "delay"]
    assert all(gpu.log[i + 1] == "flush" for i in firsts)


def test_head_start_does_not_feed_back_host_stalls() -> None:
    """A host that stalls (full launch queue) must not grow the next head start."""
    gpu = FakeGpu(kernel_ms=1.0)
    stalls = iter([0.0] * 5 + [0.002] * 10_000)  # 2 ms a call once timing starts

    def kernel() -> None:
        gpu.now += gpu.kernel_ms
        time.sleep(next(stalls))

    make(gpu, target_ms=60.0, warmup_ms=0.0, chunk=20)([kernel])
    timed = gpu.delays[1:]
    assert len(timed) == 3 and max(timed) == min(timed)  # sized once, from the estimate
    assert max(timed) <= 1.5 * 20 * 500.0 + 20.0  # and capped


def test_with_warmup_changes_only_the_warm_up() -> None:
    gpu = FakeGpu(kernel_ms=1.0)
    long = make(gpu, target_ms=20.0, warmup_ms=25.0)
    short = long.with_warmup(3.0)
    assert short is not long and long.warmup_ms == 25.0 and short.warmup_ms == 3.0
    assert short._flush is long._flush  # one flush buffer for both
    counts = []
    for bench in (long, short):
        gpu.log.clear()
        t = bench([gpu.kernel()])
        counts.append(gpu.log.count("k") - 5 - t.reps)  # calls beside estimate and timing
    assert counts == [25, 3]
    assert WallClockBench(reps=2).with_warmup(3.0).reps == 2
