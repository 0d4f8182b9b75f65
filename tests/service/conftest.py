"""A driver that plays the worker side over HTTP with FAKE measurements (no GPU runs here).

Tests get it as the ``driver`` fixture; the helpers hang off it (``driver.fake_ok(...)``) so
test modules need not import from a conftest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

GPU = "NVIDIA H100 80GB HBM3"
PROBLEM = {"kind": "gemm", "m": 512, "n": 512, "k": 512, "dtype": "fp16"}


def device(gpu: str = GPU, **over: Any) -> dict[str, Any]:
    d = {"gpu_model": gpu, "mode": "cuda", "sm_count": 132, "cc": "9.0",
         "smem_per_block": 232_448, "memory_bytes": 80 << 30, "driver": "fake",
         "cuda": "12.8", "torch": "fake", "triton": "fake", "backends": ["cublas", "triton"]}
    d.update(over)
    return d


def fake_ok(median_us: float) -> dict[str, Any]:
    """A FAKE ok measurement, as a worker would report it."""
    return {"status": "ok", "median_us": median_us, "p20_us": median_us * 0.98,
            "p80_us": median_us * 1.02, "reps": 10, "rel_error": 1e-3, "compile_s": 0.1,
            "bench_s": 0.2, "error": None, "env": {"fake": True}}


def fake_failure(status: str = "compile_error") -> dict[str, Any]:
    """A FAKE failed measurement."""
    return {"status": status, "error": f"fake {status}", "env": {"fake": True}}


@dataclass
class Driver:
    """Submits jobs, registers workers, leases and reports through the HTTP API."""

    http: TestClient
    GPU = GPU
    PROBLEM = PROBLEM
    device = staticmethod(device)
    fake_ok = staticmethod(fake_ok)
    fake_failure = staticmethod(fake_failure)

    def submit(self, budget: dict[str, Any] | None = None, problem: dict[str, Any] | None = None,
               **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"problem": problem or PROBLEM, **extra}
        if budget is not None:
            body["budget"] = budget
        r = self.http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def job(self, job_id: int) -> dict[str, Any]:
        r = self.http.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def register(self, name: str = "w1", **dev: Any) -> int:
        r = self.http.post("/v1/workers/register", json={"name": name, "device": device(**dev)})
        assert r.status_code == 200, r.text
        return int(r.json()["worker_id"])

    def lease(self, worker_id: int, n: int = 8) -> dict[str, Any]:
        r = self.http.post(f"/v1/workers/{worker_id}/lease", json={"max_candidates": n})
        assert r.status_code == 200, r.text
        return r.json()

    def report(self, worker_id: int, lease_id: str, candidate_id: int,
               measurement: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post(f"/v1/workers/{worker_id}/report", json={
            "lease_id": lease_id,
            "results": [{"candidate_id": candidate_id, "measurement": measurement}]})
        assert r.status_code == 200, r.text
        return r.json()

    def run_all(self, worker_id: int, median_of: Any = None, rounds: int = 50) -> int:
        """Lease and report FAKE ok results until nothing is left; returns how many."""
        done = 0
        for _ in range(rounds):
            grant = self.lease(worker_id)
            if not grant["candidates"]:
                return done
            for c in grant["candidates"]:
                t = median_of(c) if median_of else (100.0 if c["backend"] == "cublas"
                                                    else 90.0 + c["id"])
                self.report(worker_id, grant["lease_id"], c["id"], fake_ok(t))
                done += 1
        return done


@pytest.fixture
def driver(client: TestClient) -> Driver:
    return Driver(client)
