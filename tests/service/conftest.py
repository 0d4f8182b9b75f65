"""A driver that plays the worker side over HTTP with FAKE measurements (no GPU runs here).

Tests get it as the ``driver`` fixture; the helpers hang off it (``driver.fake_ok(...)``) so
test modules need not import from a conftest.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from db import calibrations

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


def fake_calibration(bandwidth_gbs: float = 3000.0, bf16: float = 800.0, fp32: float = 50.0,
                     tf32: float = 400.0) -> dict[str, Any]:
    """A FAKE calibration report (the peaks a worker's calibrate task measures)."""
    return {"status": "ok", "median_us": 700.0, "p20_us": 699.0, "p80_us": 701.0, "reps": 10,
            "bench_s": 1.5, "env": {"driver": "fake", "cuda": "12.8", "torch": "fake"},
            "extra": {"bandwidth_gbs": bandwidth_gbs,
                      "peak_tflops": {"bf16": bf16, "fp16": bf16, "fp32": fp32, "tf32": tf32}}}


def fake_failure(status: str = "compile_error") -> dict[str, Any]:
    """A FAKE failed measurement."""
    return {"status": status, "error": f"fake {status}", "env": {"fake": True}}


@pytest.fixture(scope="session")
def cutlass_catalogue() -> dict[str, Any]:
    """The operation catalogue a CUTLASS worker declares when it registers, enumerated here the
    way a GPU host does (``kernel_templates.gemm.cutlass.catalogue``: needs
    ``cutlass_library``)."""
    pytest.importorskip("cutlass_library")
    from kernel_templates.gemm import cutlass as kc

    return kc.catalogue().encode()


@dataclass
class Driver:
    """Submits jobs, registers workers, leases and reports through the HTTP API."""

    http: TestClient
    times: dict[int, float] = field(default_factory=dict)
    GPU = GPU
    PROBLEM = PROBLEM
    device = staticmethod(device)
    fake_ok = staticmethod(fake_ok)
    fake_failure = staticmethod(fake_failure)
    fake_calibration = staticmethod(fake_calibration)

    def submit(self, budget: dict[str, Any] | None = None, problem: dict[str, Any] | None = None,
               **extra: Any) -> dict[str, Any]:
        """Submit a job. Unless told otherwise the policy forces the custom stage, so tests of
        the lease mechanics get Triton candidates in the first lease (the decision loop's own
        stages are tested with explicit policies in ``test_decisions.py``)."""
        body: dict[str, Any] = {"problem": problem or PROBLEM, **extra}
        body.setdefault("policy", {"force_custom": True})
        if budget is not None:
            body["budget"] = budget
        r = self.http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def job(self, job_id: int) -> dict[str, Any]:
        r = self.http.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def register(self, name: str = "w1", cutlass_catalogue: dict[str, Any] | None = None,
                 **dev: Any) -> int:
        """Register a worker; one that offers CUTLASS declares ``cutlass_catalogue``."""
        body: dict[str, Any] = {"name": name, "device": device(**dev)}
        if cutlass_catalogue is not None:
            body["catalogues"] = {"gemm/cutlass": cutlass_catalogue}
        r = self.http.post("/v1/workers/register", json=body)
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
        """Lease and report FAKE ok results until nothing is left; returns how many kernel
        candidates ran (calibration and verification tasks are answered, not counted)."""
        done = 0
        for _ in range(rounds):
            grant = self.lease(worker_id)
            if not grant["candidates"]:
                return done
            for c in grant["candidates"]:
                self.report(worker_id, grant["lease_id"], c["id"], self.answer(c, median_of))
                done += c["backend"] in ("cublas", "triton", "cutlass")
        return done

    def answer(self, c: dict[str, Any], median_of: Any = None) -> dict[str, Any]:
        """The FAKE result of one leased candidate or task."""
        if c["task"] == "calibrate":
            return fake_calibration()
        if c["task"] == "verify":
            lib = self.times[c["config"]["library_id"]]
            jitter = (1.0, 0.995, 1.005, 0.998, 1.002)
            extra = {"library_us": [lib * j for j in jitter]}
            if "custom_id" in c["config"]:  # absent: a library confirmation against cuBLAS
                extra["custom_us"] = [self.times[c["config"]["custom_id"]] * j
                                      for j in jitter]
            if "reference_id" in c["config"]:  # cuBLAS beside a CUTLASS pick
                ref = self.times[c["config"]["reference_id"]]
                extra["reference_us"] = [ref * j for j in jitter]
            return {**fake_ok(statistics.median(extra.get("custom_us") or
                                                extra["library_us"])), "extra": extra}
        t = median_of(c) if median_of else (100.0 if c["backend"] == "cublas"
                                            else 90.0 + c["id"])
        self.times[c["id"]] = t
        return fake_ok(t)


@pytest.fixture
def driver(client: TestClient) -> Driver:
    return Driver(client)


#: GPU models the tests lease with, calibrated up front (FAKE peaks, as if measured earlier).
CALIBRATED = (GPU, "NVIDIA A100", "cpu-interpreter")


def seed_calibrations(app: FastAPI, models: tuple[str, ...] = CALIBRATED) -> None:
    """Store a FAKE calibration for each model, so jobs skip the calibration task."""
    from datetime import UTC, datetime

    cal = fake_calibration()
    with app.state.flow.db.session() as s:
        for model in models:
            calibrations.add_calibration(s, model, cal["extra"]["bandwidth_gbs"],
                                         cal["extra"]["peak_tflops"], cal["env"],
                                         datetime(2026, 1, 1, tzinfo=UTC))


@pytest.fixture(autouse=True)
def _calibrated(request: pytest.FixtureRequest) -> None:
    """Tests that use the ``app`` fixture start with calibrated GPU models (opt out with the
    ``uncalibrated`` marker)."""
    if "app" in request.fixturenames and request.node.get_closest_marker("uncalibrated") is None:
        seed_calibrations(request.getfixturevalue("app"))
