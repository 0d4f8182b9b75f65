"""End to end through separate processes: ``kernelsearch serve`` (service + its local worker,
SQLite) and a client that submits a job over HTTP, waits for it and reads the best config.

    python3 scripts/e2e_service.py [--m 1000 --n 3000 --k 2000 --trials 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.client import KernelSearchClient, KernelSearchError  # noqa: E402
from service.embedded import free_port  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=1000)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--k", type=int, default=2000)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--worker", default="auto")
    ap.add_argument("--timeout", type=float, default=240.0)
    args = ap.parse_args()
    port = free_port()
    db = Path(tempfile.mkdtemp()) / "e2e.db"
    env = dict(os.environ, KS_DATABASE_URL=f"sqlite:///{db}")
    server = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port",
                               str(port), "--worker", args.worker], env=env)
    client = KernelSearchClient(f"http://127.0.0.1:{port}", retries=8, backoff_s=0.5)
    try:
        problem = {"kind": "gemm", "m": args.m, "n": args.n, "k": args.k, "dtype": args.dtype}
        try:
            client.submit_job({**problem, "m": 0})
            print("FAIL: m=0 was accepted")
            return 1
        except KernelSearchError as exc:
            print(f"bad input refused as expected: {exc}")
        job = client.submit_job(problem, budget={"max_trials": args.trials})
        print(f"submitted job {job['id']} ({job['status']})")
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            job = client.get_job(job["id"])
            if job["status"] in ("done", "failed", "cancelled"):
                break
            time.sleep(1.0)
        print(json.dumps(job, indent=1))
        best = client.best(**problem)
        print("best:", json.dumps(best, indent=1))
        ok = (job["status"] == "done" and best is not None and best["median_us"] > 0
              and job.get("decision") is not None)
        d = job.get("decision") or {}
        print(f"decision: {d.get('verdict')} ({d.get('chosen')}, {d.get('backend')}); "
              f"library candidates: {[t.get('backend') for t in d.get('library_trials') or []]}")
        print(f"why: {d.get('rationale')}")
        print("E2E", "PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    raise SystemExit(main())
