"""The worker loop while the service is away: it backs off (jittered, growing, capped) and
goes on, keeps the reports it could not deliver and delivers them later, and registers again
when the service forgot it. The service is a scripted fake; the runner a FAKE one."""

from __future__ import annotations

import random
import threading
from typing import Any

from search.types import Candidate, Device, Measurement, Status
from service.client import KernelSearchConnectionError, KernelSearchError
from workers.loop import WorkerLoop

CANDIDATE = {"problem": {"kind": "gemm", "m": 64, "n": 64, "k": 64, "dtype": "fp16"},
             "backend": "triton", "config": {"BLOCK_M": 32}, "id": 7, "task": None,
             "attempts": 0}


class FakeRunner:
    """FAKE: every candidate runs ok in 10 us."""

    def run(self, candidate: Candidate) -> Measurement:
        return Measurement(Status.OK, median_us=10.0, p20_us=10.0, p80_us=10.0, reps=5)


class Flaky:
    """A service that is unavailable (503) for its first ``down`` calls of each kind listed,
    then answers; it forgets the worker once (404 on lease) if told to."""

    def __init__(self, down: int, forget: bool = False) -> None:
        self.down, self.forget = down, forget
        self.worker_secret: str | None = None  # the client's secret slot (none issued here)
        self.calls: list[str] = []
        self.registered = 0
        self.stored: list[tuple[str, int]] = []
        self.leases = 0

    def _gate(self, what: str) -> None:
        self.calls.append(what)
        if sum(1 for c in self.calls if c == what) <= self.down:
            raise KernelSearchConnectionError(f"{what}: connection refused")

    def register_worker(self, name: str, device: dict, catalogues: Any = None) -> dict:
        self._gate("register")
        self.registered += 1
        return {"worker_id": self.registered, "gpu_model": device["gpu_model"]}

    def lease(self, worker_id: int, n: int) -> dict:
        self._gate("lease")
        if self.forget and self.registered == 1:
            raise KernelSearchError(404, f"worker {worker_id} not found")
        self.leases += 1
        if self.leases > 1:
            return {"lease_id": None, "candidates": []}
        return {"lease_id": "L1", "lease_seconds": 60, "candidates": [CANDIDATE]}

    def renew(self, worker_id: int, lease_id: str) -> dict:
        return {}

    def report(self, worker_id: int, lease_id: str, results: list[dict]) -> dict:
        self._gate("report")
        self.stored += [(lease_id, r["candidate_id"]) for r in results]
        return {"accepted": [r["candidate_id"] for r in results], "rejected": []}


def _run(client: Flaky, waits: list[float], **kw: Any) -> WorkerLoop:
    stop = threading.Event()
    loop = WorkerLoop(client, FakeRunner(), Device(gpu_model="FAKE", mode="interpreter"),  # type: ignore[arg-type]
                      poll_s=0.01, max_backoff_s=0.08, rng=random.Random(1), **kw)
    real_wait = stop.wait

    def wait(seconds: float | None = None) -> bool:
        waits.append(float(seconds or 0))
        return real_wait(0)

    stop.wait = wait  # type: ignore[method-assign]
    t = threading.Thread(target=loop.run, args=(stop, 0.05))
    t.start()
    t.join(timeout=30)
    assert not t.is_alive()
    return loop


def test_the_loop_backs_off_and_delivers_what_it_kept() -> None:
    client = Flaky(down=5)
    waits: list[float] = []
    loop = _run(client, waits)
    # registering failed 5 times: waits grew from poll_s, doubling, jittered, up to the cap
    backoffs = waits[:5]
    ceilings = [0.01, 0.02, 0.04, 0.08, 0.08]
    assert all(c / 2 <= w <= c for w, c in zip(backoffs, ceilings, strict=True)), backoffs
    assert client.registered == 1 and loop.worker_id == 1
    # the report failed 5 times (the first at once, then on each flush) and was delivered once
    assert client.stored == [("L1", 7)]
    assert loop.stats.reported == 1 and loop._unsent == []


def test_a_forgotten_worker_registers_again() -> None:
    client = Flaky(down=0, forget=True)
    loop = _run(client, [])
    assert client.registered == 2 and loop.worker_id == 2
    assert client.stored == [("L1", 7)]


def test_a_refused_report_is_not_kept() -> None:
    class Refusing(Flaky):
        def report(self, worker_id: int, lease_id: str, results: list[dict]) -> dict:
            raise KernelSearchError(422, "measurement.median_us: must be positive")

    client = Refusing(down=0)
    loop = _run(client, [])
    assert loop._unsent == [] and loop.stats.by_status == {"ok": 1}
