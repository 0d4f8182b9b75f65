"""End to end through separate processes on the GPU: ``kernelsearch serve`` (the service with
its local worker, SQLite) and a client that submits a job over HTTP, waits for it and reads the
best configuration and the decision."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.client import KernelSearchClient, KernelSearchError
from service.embedded import free_port

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_a_job_through_the_served_service(tmp_path: Path) -> None:
    port = free_port()
    env = dict(os.environ, KS_DATABASE_URL=f"sqlite:///{tmp_path / 'e2e.db'}")
    server = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port",
                               str(port), "--worker", "auto"], env=env)
    client = KernelSearchClient(f"http://127.0.0.1:{port}", retries=8, backoff_s=0.5)
    try:
        problem = {"kind": "gemm", "m": 1000, "n": 3000, "k": 2000, "dtype": "bf16"}
        with pytest.raises(KernelSearchError):
            client.submit_job({**problem, "m": 0})
        job = client.submit_job(problem, budget={"max_trials": 16})
        deadline = time.monotonic() + 240.0
        while job["status"] not in ("done", "failed", "cancelled"):
            assert time.monotonic() < deadline, f"job still {job['status']}"
            time.sleep(1.0)
            job = client.get_job(job["id"])
        assert job["status"] == "done", job.get("error")
        assert job.get("decision") is not None
        best = client.best(**problem)
        assert best is not None and best["median_us"] > 0
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
