"""Late and duplicate reports against two real API processes on one database.

The test plays a worker over HTTP (its results are FAKE: recorded-looking numbers, no kernel
runs) so that it can send what a real worker sends only under bad luck, on purpose and every
time: each report through both API processes at the same instant (a retry racing the original),
a late report under a lease that expired after the candidate was leased and run again, and every
stored report once more at the end. Each candidate keeps one measurement per attempt that
reported in time, and the job's counts do not move. SQLite and Postgres.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.deploy.cluster import (
    PROBLEM,
    Cluster,
    assert_each_measured_once,
    assert_studies_match,
    state,
)

pytestmark = [pytest.mark.faults, pytest.mark.slow]

GPU = "FAKE GPU (test driver)"
DEVICE = {"gpu_model": GPU, "mode": "cuda", "sm_count": 132, "cc": "9.0",
          "smem_per_block": 232_448, "memory_bytes": 80 << 30, "driver": "fake", "cuda": "12.8",
          "torch": "fake", "triton": "fake", "backends": ["cublas", "triton"]}
LEASE_S = 4.0
#: the played worker's secret (X-Worker-Secret), from its registration
SECRET: dict[str, str] = {}


def _fake_result(c: dict[str, Any], times: dict[int, float]) -> dict[str, Any]:
    """A FAKE measurement of a leased candidate or task."""
    env = {"driver": "fake", "cuda": "12.8", "torch": "fake"}
    if c["task"] == "calibrate":
        return {"status": "ok", "median_us": 700.0, "reps": 3, "bench_s": 0.5, "env": env,
                "extra": {"bandwidth_gbs": 3000.0, "peak_tflops": {"fp16": 800.0,
                                                                   "bf16": 800.0}}}
    if c["task"] == "verify":
        rounds = (1.0, 0.995, 1.005, 0.998, 1.002)
        extra = {f"{role}_us": [times[c["config"][f"{role}_id"]] * r for r in rounds]
                 for role in ("library", "custom", "reference") if f"{role}_id" in c["config"]}
        us = statistics.median(extra.get("custom_us") or extra["library_us"])
        return {"status": "ok", "median_us": us, "reps": 5, "env": env, "extra": extra}
    times[c["id"]] = us = 100.0 if c["backend"] == "cublas" else 90.0 + c["id"]
    return _ok(us)


def _ok(us: float) -> dict[str, Any]:
    """A FAKE ok kernel measurement."""
    return {"status": "ok", "median_us": us, "p20_us": us * 0.98, "p80_us": us * 1.02,
            "reps": 10, "rel_error": 1e-3, "compile_s": 0.1, "bench_s": 0.2,
            "env": {"fake": True}}


def _report(url: str, worker: int, lease: str, cid: int, result: dict[str, Any]
            ) -> dict[str, Any]:
    r = httpx.post(f"{url}/v1/workers/{worker}/report", timeout=60, headers=SECRET, json={
        "lease_id": lease, "results": [{"candidate_id": cid, "measurement": result}]})
    assert r.status_code == 200, r.text
    return r.json()


def _race(urls: list[str], worker: int, lease: str, cid: int, result: dict[str, Any]
          ) -> list[dict[str, Any]]:
    """The same report through every API process at once."""
    start = threading.Barrier(len(urls))
    out: list[dict[str, Any]] = [{} for _ in urls]

    def send(i: int) -> None:
        start.wait(10)
        out[i] = _report(urls[i], worker, lease, cid, result)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(urls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_late_and_duplicate_reports_are_idempotent(database_url: str, tmp_path: Path) -> None:
    with Cluster(tmp_path, database_url, lease_seconds=LEASE_S) as cl:
        cl.migrate()
        urls = [cl.api("api1").url, cl.api("api2").url]
        registered = httpx.post(f"{urls[0]}/v1/workers/register", timeout=30,
                                json={"name": "driver", "device": DEVICE}).json()
        worker = registered["worker_id"]
        SECRET["X-Worker-Secret"] = registered["worker_secret"]
        job = httpx.post(f"{urls[1]}/v1/jobs", timeout=30, json={
            "problem": PROBLEM, "gpu": GPU, "backends": ["cublas", "triton"],
            "budget": {"max_trials": 6}, "policy": {"force_custom": True}}).json()
        times: dict[int, float] = {}
        sent: list[tuple[str, int, dict[str, Any]]] = []  # (lease, candidate, result) stored
        late: list[tuple[str, int]] = []
        raced = 0
        for round_ in range(60):
            grant = httpx.post(f"{urls[round_ % 2]}/v1/workers/{worker}/lease", timeout=30,
                               headers=SECRET,
                               json={"max_candidates": 3}).json()
            if not grant["candidates"]:
                if httpx.get(f"{urls[0]}/v1/jobs/{job['id']}").json()["status"] == "done":
                    break
                time.sleep(0.2)
                continue
            lease = grant["lease_id"]
            first = grant["candidates"][0]
            if first["backend"] == "triton" and not late:
                # Sit on this lease past its expiry: the candidate goes back to the queue and
                # is leased (and run) again; the report under this lease comes late.
                late.append((lease, first["id"]))
                time.sleep(LEASE_S + 0.5)
                continue
            for c in grant["candidates"]:
                result = _fake_result(c, times)
                answers = _race(urls, worker, lease, c["id"], result)
                stored = [a for a in answers if c["id"] in a["accepted"]]
                refused = [r["reason"] for a in answers for r in a["rejected"]]
                assert len(stored) == 1, answers  # one API process stored it, the other not
                assert refused == [f"candidate {c['id']} already reported"], answers
                sent.append((lease, c["id"], result))
                raced += 1
        view = httpx.get(f"{urls[0]}/v1/jobs/{job['id']}").json()
        assert view["status"] == "done", view
        assert late and raced >= 6
        before = state(cl.db, job["id"])

        # The late report: its candidate was run again under a later lease, and stays so.
        lease, cid = late[0]
        rerun = next(c for c in before.candidates if c.id == cid)
        assert rerun.attempts == 1 and rerun.lease_id != lease
        answer = _report(urls[0], worker, lease, cid, _ok(1.0))
        assert answer["accepted"] == []
        assert "expired" in answer["rejected"][0]["reason"]
        # Every stored report once more, through both processes at once: all refused.
        for lease, cid, result in sent:
            for a in _race(urls, worker, lease, cid, result):
                assert a["accepted"] == [] and len(a["rejected"]) == 1
        after = state(cl.db, job["id"])
        again = httpx.get(f"{urls[1]}/v1/jobs/{job['id']}").json()
        assert_studies_match(cl.db, [after])

    assert_each_measured_once(after)
    assert after.measured == before.measured
    assert again["progress"] == view["progress"] and again["best"] == view["best"]
    custom = [c for c in after.trials if c.status in ("done", "failed")]
    assert view["progress"]["trials_done"] == len(custom)
