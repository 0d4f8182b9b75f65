"""Locust users of the load benchmark (``python -m scripts.load run``, which sets the env below).

``Client``: a user of the service, asking ``GET /v1/best`` for seeded shapes and submitting a
small job (``KS_LOAD_JOB_SHARE`` of its requests, 10 %) at a fixed pace, so that the offered
rate is set by the number of users, not by the server's latency. ``Worker``: a simulated GPU
host (exactly ``KS_LOAD_WORKERS`` of them) that registers, then leases and reports FAKE but
plausible results in a loop: library and Triton times near what the shape's FLOPs allow on the
GPU model, a calibration's peaks, a verification's repeated times, each after
``KS_LOAD_MEASURE_S`` seconds per candidate (the time a GPU takes to compile and time one),
waiting ``KS_LOAD_POLL_S`` (1 s, a real worker's default) after an empty lease.

Environment: ``KS_LOAD_SHAPES`` (a JSON file: ``{"best": [query, ...], "jobs": [problem, ...],
"gpu": model}``), ``KS_LOAD_WORKERS`` (0: none), ``KS_LOAD_CLIENT_RPS`` (requests per second
per client), ``KS_LOAD_JOB_SHARE``.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import statistics
from typing import Any

import gevent
from locust import FastHttpUser, constant, constant_throughput, task

SHAPES: dict[str, Any] = json.loads(open(os.environ["KS_LOAD_SHAPES"]).read())
WORKERS = int(os.environ.get("KS_LOAD_WORKERS", "16"))
CLIENT_RPS = float(os.environ.get("KS_LOAD_CLIENT_RPS", "3.1"))
JOB_SHARE = float(os.environ.get("KS_LOAD_JOB_SHARE", "0.1"))
RUN = os.environ.get("KS_LOAD_RUN", "load")
#: seconds a worker spends per leased candidate (compiling and timing it on its GPU)
MEASURE_S = float(os.environ.get("KS_LOAD_MEASURE_S", "0"))
#: seconds a worker waits after an empty lease (a real worker's default KS_POLL_S)
POLL_S = float(os.environ.get("KS_LOAD_POLL_S", "1.0"))
GPU = SHAPES["gpu"]
#: FAKE peaks of the simulated GPU model (about an H100's)
PEAK_TFLOPS = {"bf16": 800.0, "fp16": 800.0, "fp32": 50.0, "tf32": 400.0, "fp8_e4m3": 1600.0}
BANDWIDTH_GBS = 3000.0
_names = itertools.count()
#: the time reported for each candidate, which a verification task repeats
_times: dict[int, float] = {}


class Client(FastHttpUser):
    """A user of the service: mostly reads the best configuration, sometimes submits a job."""

    wait_time = constant_throughput(CLIENT_RPS)

    @task
    def ask_or_submit(self) -> None:
        if random.random() < JOB_SHARE:
            problem = random.choice(SHAPES["jobs"])
            body = {"problem": problem, "gpu": GPU, "budget": {"max_trials": 4},
                    "backends": ["cublas", "triton"]}
            self.client.post("/v1/jobs", json=body, name="POST /v1/jobs")
        else:
            query = random.choice(SHAPES["best"])
            self.client.get("/v1/best", params=query, name="GET /v1/best")


class Worker(FastHttpUser):
    """A simulated GPU worker: register, then lease and report until the run ends."""

    fixed_count = WORKERS
    abstract = WORKERS == 0  # locust reads a fixed_count of 0 as "by weight"
    wait_time = constant(0.05)

    def on_start(self) -> None:
        self.rng = random.Random()
        body = {"name": f"{RUN}-worker-{next(_names)}", "device": _device()}
        with self.client.post("/v1/workers/register", json=body, name="POST register",
                              catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"register: {r.status_code} {r.text[:200]}")
                self.worker_id = None
                return
            self.worker_id = int(r.json()["worker_id"])
            # the secret its first registration returns goes with every call under its id
            self.headers = {"X-Worker-Secret": r.json()["worker_secret"]}

    @task
    def work(self) -> None:
        if self.worker_id is None:
            return
        with self.client.post(f"/v1/workers/{self.worker_id}/lease", name="POST lease",
                              json={"max_candidates": 4}, headers=self.headers,
                              catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"lease: {r.status_code} {r.text[:200]}")
                return
            grant = r.json()
        if not grant["candidates"]:
            gevent.sleep(POLL_S)
            return
        results = [{"candidate_id": c["id"], "measurement": self._answer(c)}
                   for c in grant["candidates"]]
        gevent.sleep(MEASURE_S * len(results))  # the GPU at work
        with self.client.post(f"/v1/workers/{self.worker_id}/report", name="POST report",
                              json={"lease_id": grant["lease_id"], "results": results},
                              headers=self.headers, catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"report: {r.status_code} {r.text[:200]}")
            elif r.json()["rejected"]:
                r.failure(f"report rejected: {r.json()['rejected'][:2]}")

    def _answer(self, c: dict[str, Any]) -> dict[str, Any]:
        """A FAKE result of one leased candidate or task."""
        if c["task"] == "calibrate":
            return {"status": "ok", "median_us": 700.0, "p20_us": 699.0, "p80_us": 701.0,
                    "reps": 10, "bench_s": 1.5, "env": _env(),
                    "extra": {"bandwidth_gbs": BANDWIDTH_GBS, "peak_tflops": PEAK_TFLOPS}}
        if c["task"] == "verify":
            cfg, base = c["config"], _plausible_us(c["problem"], 1.0)
            extra = {f"{role}_us": [_times.get(cfg[f"{role}_id"], base) * j
                                    for j in (1.0, 0.995, 1.005, 0.998, 1.002)]
                     for role in ("library", "custom", "reference") if f"{role}_id" in cfg}
            times = extra.get("custom_us") or extra.get("library_us") or [base]
            return {**_ok(statistics.median(times)), "extra": extra}
        factor = 1.0 if c["backend"] == "cublas" else self.rng.uniform(0.85, 1.6)
        t = _plausible_us(c["problem"], factor)
        _times[c["id"]] = t
        return _ok(t)


def _device() -> dict[str, Any]:
    return {"gpu_model": GPU, "mode": "cuda", "sm_count": 132, "cc": "9.0",
            "smem_per_block": 232_448, "memory_bytes": 80 << 30, **_env(),
            "triton": "load-test", "backends": ["cublas", "triton"]}


def _env() -> dict[str, Any]:
    return {"driver": "load-test", "cuda": "13.0", "torch": "load-test"}


def _ok(median_us: float) -> dict[str, Any]:
    return {"status": "ok", "median_us": median_us, "p20_us": median_us * 0.99,
            "p80_us": median_us * 1.01, "reps": 20, "rel_error": 2e-3, "compile_s": 0.5,
            "bench_s": 0.2, "error": None, "env": {**_env(), "load_test": True}}


def _plausible_us(problem: dict[str, Any], factor: float) -> float:
    """A GEMM's time at 70 % of the FAKE peak (or of the bandwidth), times ``factor``."""
    m, n, k = (int(problem.get(d, 1)) for d in ("m", "n", "k"))
    size = {"fp32": 4, "fp8_e4m3": 1}.get(problem.get("dtype", "bf16"), 2)
    compute = 2.0 * m * n * k / (PEAK_TFLOPS.get(problem.get("dtype", "bf16"), 800.0) * 1e6)
    memory = size * (m * k + k * n + m * n) / (BANDWIDTH_GBS * 1e3)
    return max(compute, memory, 2.0) / 0.7 * factor
