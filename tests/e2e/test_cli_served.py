"""The command line as a new user runs it: ``kernelsearch serve`` in one process (the API and a
local worker on the Triton interpreter), then ``submit``, ``status``, ``best`` and ``jobs`` as
processes against it, for an attention and a GEMM problem. Nothing is faked: the numbers are
this CPU's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.embedded import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ATTENTION = ["--kind", "attention", "--batch", "1", "--heads", "2", "--kv-heads", "1",
             "--s-q", "32", "--s-kv", "48", "--d", "16", "--causal", "--dtype", "fp16"]
GEMM = ["--m", "64", "--n", "48", "--k", "80", "--dtype", "fp16"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, str]]:
    """``kernelsearch serve --worker yes`` on a free port; the environment a user's shell
    would have (KS_URL pointing at it)."""
    port = free_port()
    env = {**os.environ, "KS_DATABASE_URL": f"sqlite:///{tmp_path / 'ks.db'}",
           "KS_URL": f"http://127.0.0.1:{port}", "COLUMNS": "200"}
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port",
                               str(port), "--worker", "yes"], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{env['KS_URL']}/v1/jobs", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.5)
        yield env
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_serve_submit_status_best_and_jobs(served: dict[str, str]) -> None:
    # attention, followed to its decision, as tables
    waited = cli(served, "submit", *ATTENTION, "--trials", "2", "--wait")
    assert waited.returncode == 0, waited.stderr + waited.stdout
    out = waited.stdout
    assert "b1 h2/kv1 s32x48 d16 causal fp16 on cpu-interpreter" in out
    assert "torch CPU math SDPA (sdpa_math)" in out and "Triton interpreter (triton)" in out
    assert "no roofline" in out and "verdict: " in out and "on the CPU" in out
    best = cli(served, "best", *ATTENTION, "--json")
    assert best.returncode == 0, best.stderr
    found = json.loads(best.stdout)
    assert found["gpu"] == "cpu-interpreter" and found["backend"] in ("sdpa_math", "triton")
    assert found["decision"]["roofline"] is None
    table = cli(served, "best", *ATTENTION)
    assert table.returncode == 0 and f"{found['problem_key']} on cpu-interpreter" in table.stdout

    # GEMM, as JSON, then its status as a table
    job = json.loads(cli(served, "submit", *GEMM, "--trials", "2", "--wait", "--json").stdout)
    assert job["status"] == "done" and job["gpu"] == "cpu-interpreter"
    assert job["library_best"]["backend"] == "cublas"
    assert "torch CPU matmul takes" in job["decision"]["rationale"]
    assert "cublas takes" not in job["decision"]["rationale"]
    status = cli(served, "status", str(job["id"]))
    assert status.returncode == 0 and "torch CPU matmul (cublas)" in status.stdout
    row = next(line for line in status.stdout.splitlines() if "library best" in line)
    assert " 0.0 " not in row  # the CPU's TFLOP/s keep their digits

    listed = json.loads(cli(served, "jobs", "--json").stdout)
    assert {j["id"] for j in listed["items"]} == {job["id"], found["decision"]["job_id"]}
    assert cli(served, "best", *GEMM, "--dtype", "bf16").returncode == 1  # never tuned
