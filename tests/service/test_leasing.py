"""Leases: expiry and retry, renewal, eligibility, exclusivity, reports and job completion.

Time is a fake clock (``clock.advance``); measurements are FAKE dicts from the driver.
"""

from __future__ import annotations

import threading
from typing import Any

from fastapi.testclient import TestClient

from service.settings import ServiceSettings


def test_expired_lease_comes_back_then_fails(client: TestClient, driver: Any,
                                            clock: Any) -> None:
    job = driver.submit({"max_trials": 2})
    a, b = driver.register("a"), driver.register("b")
    first = driver.lease(a)
    ids = sorted(c["id"] for c in first["candidates"])
    assert len(ids) == 3 and {c["attempts"] for c in first["candidates"]} == {0}
    assert driver.lease(b)["candidates"] == []  # all out
    for attempt in (1, 2):
        clock.advance(61)
        again = driver.lease(b)
        assert sorted(c["id"] for c in again["candidates"]) == ids
        assert {c["attempts"] for c in again["candidates"]} == {attempt}
    # The first worker's late report is refused: its lease is gone.
    late = driver.report(a, first["lease_id"], ids[0], driver.fake_ok(1.0))
    assert late["accepted"] == [] and "not leased" in late["rejected"][0]["reason"]
    clock.advance(61)
    assert driver.lease(b)["candidates"] == []  # third expiry: max_attempts reached
    state = driver.job(job["id"])
    assert state["status"] == "failed" and "lease expired 3 times" in state["error"]
    assert state["progress"]["outstanding"] == 0


def test_renew_extends_and_410_after_expiry(client: TestClient, driver: Any,
                                            clock: Any) -> None:
    driver.submit({"max_trials": 1})
    a, b = driver.register("a"), driver.register("b")
    grant = driver.lease(a)
    url = f"/v1/workers/{a}/leases/{grant['lease_id']}/renew"
    clock.advance(50)
    r = client.post(url)
    assert r.status_code == 200 and r.json()["expires_at"] > grant["expires_at"]
    clock.advance(50)  # past the first expiry, inside the renewed one
    assert driver.lease(b)["candidates"] == []
    assert client.post(f"/v1/workers/{b}/leases/{grant['lease_id']}/renew").status_code == 404
    clock.advance(61)
    r = client.post(url)
    assert r.status_code == 410 and "expired" in r.json()["detail"]
    assert len(driver.lease(b)["candidates"]) == len(grant["candidates"])


def test_report_is_idempotent_and_checked(client: TestClient, driver: Any,
                                          fake_tuners: Any) -> None:
    driver.submit({"max_trials": 1})
    a, b = driver.register("a"), driver.register("b")
    grant = driver.lease(a)
    triton = next(c for c in grant["candidates"] if c["backend"] == "triton")
    assert driver.report(b, grant["lease_id"], triton["id"],
                         driver.fake_ok(5.0))["accepted"] == []
    ok = driver.report(a, grant["lease_id"], triton["id"], driver.fake_ok(5.0))
    assert ok == {"accepted": [triton["id"]], "rejected": []}
    again = driver.report(a, grant["lease_id"], triton["id"], driver.fake_ok(4.0))
    assert again["accepted"] == [] and "already reported" in again["rejected"][0]["reason"]
    tuner = next(iter(fake_tuners.built.values()))
    assert [m.median_us for m in tuner.recorded.values()] == [5.0]
    trials = client.get("/v1/problems/1/trials").json()
    assert trials["total"] == 1 and trials["items"][0]["trial_number"] == 0


def test_job_done_after_max_trials(client: TestClient, driver: Any, fake_tuners: Any) -> None:
    job = driver.submit({"max_trials": 6})  # window 4: takes several leases
    w = driver.register()
    first = driver.lease(w)
    assert len(first["candidates"]) == 4  # the window caps what is outstanding
    for c in first["candidates"]:
        driver.report(w, first["lease_id"], c["id"], driver.fake_ok(10.0 + c["id"]))
    assert driver.job(job["id"])["status"] == "running"
    assert driver.run_all(w) == 3
    state = driver.job(job["id"])
    assert state["status"] == "done", state
    assert state["progress"]["trials_done"] == 6 and state["progress"]["outstanding"] == 0
    assert state["finished_at"] is not None and state["error"] is None
    assert len(fake_tuners.recorded()) == 6  # every result reached its tier's tuner


def test_job_failed_when_nothing_ran_ok(client: TestClient, driver: Any) -> None:
    job = driver.submit({"max_trials": 2})
    w = driver.register()
    grant = driver.lease(w)
    for c in grant["candidates"]:
        driver.report(w, grant["lease_id"], c["id"], driver.fake_failure("compile_error"))
    state = driver.job(job["id"])
    assert state["status"] == "failed" and "compile_error" in state["error"]
    assert state["best"] is None


def test_time_budget(client: TestClient, driver: Any, clock: Any) -> None:
    job = driver.submit({"max_seconds": 10})
    w = driver.register()
    grant = driver.lease(w, n=2)
    clock.advance(11)
    state = driver.job(job["id"])
    assert state["status"] == "running"  # two are still out
    assert state["progress"]["outstanding"] == 2 and state["progress"]["elapsed_s"] == 11
    assert driver.lease(w)["candidates"] == []
    for c in grant["candidates"]:
        driver.report(w, grant["lease_id"], c["id"], driver.fake_ok(3.0))
    assert driver.job(job["id"])["status"] == "done"


def test_exhausted_space_ends_the_job(client: TestClient, driver: Any,
                                      fake_tuners: Any) -> None:
    fake_tuners.configs[:] = fake_tuners.configs[:2]
    job = driver.submit({"max_trials": 50})
    w = driver.register()
    # cuBLAS + 2 configurations in each of the three tiers that apply (tiles, split-K, Hopper)
    assert driver.run_all(w) == 7
    state = driver.job(job["id"])
    assert state["status"] == "done" and state["progress"]["trials_done"] == 6
    tiers = {t["tier"]: t for t in state["decision"]["tiers"]}
    assert all("exhausted" in tiers[t]["reason"] for t in ("tiles", "split_k", "hopper"))
    assert tiers["precision"]["reason"].startswith("skipped")


def test_eligibility(client: TestClient, driver: Any, fake_tuners: Any) -> None:
    a100 = driver.register("a100", gpu="NVIDIA A100")
    small = driver.register("small", memory_bytes=1 << 20)
    triton_only = driver.register("interp", gpu="cpu-interpreter", mode="interpreter",
                                  backends=["triton"], memory_bytes=0)
    h100 = driver.register("h100")
    job = driver.submit({"max_trials": 1}, gpu=driver.GPU)
    assert driver.lease(a100)["candidates"] == []  # targeted at another GPU model
    assert driver.lease(small)["candidates"] == []  # operands exceed its memory
    assert driver.lease(triton_only)["candidates"] == []
    assert len(driver.lease(h100)["candidates"]) == 2
    assert driver.job(job["id"])["gpu"] == driver.GPU
    untargeted = driver.submit({"max_trials": 1})
    grant = driver.lease(triton_only)  # binds the untargeted job to the interpreter
    assert [c["backend"] for c in grant["candidates"]] == ["triton"]
    assert driver.lease(h100)["candidates"] == []  # bound to another model now
    driver.report(triton_only, grant["lease_id"], grant["candidates"][0]["id"],
                  driver.fake_ok(900.0))
    assert driver.job(untargeted["id"])["status"] == "done"
    library = driver.submit({"max_trials": 5}, backends=["cublas"])
    g = driver.lease(a100)
    assert [c["backend"] for c in g["candidates"]] == ["cublas"]
    driver.report(a100, g["lease_id"], g["candidates"][0]["id"], driver.fake_ok(7.0))
    assert driver.job(library["id"])["status"] == "done"
    assert ("gemm:b1:m512:n512:k512:fp16:fp16:fp32:rr", "NVIDIA A100") not in fake_tuners.built


def test_concurrent_workers_never_share_a_candidate(app: Any, driver: Any,
                                                    secret_keeper: Any) -> None:
    driver.submit({"max_trials": 40})
    driver.submit({"max_trials": 40})
    workers = [driver.register(f"w{i}") for i in range(4)]
    seen: list[list[int]] = [[] for _ in workers]

    def work(i: int) -> None:
        with secret_keeper(TestClient(app)) as http:
            for _ in range(3):
                r = http.post(f"/v1/workers/{workers[i]}/lease", json={"max_candidates": 1})
                assert r.status_code == 200, r.text
                seen[i] += [c["id"] for c in r.json()["candidates"]]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = [c for ids in seen for c in ids]
    assert len(got) == 8 and len(set(got)) == len(got)  # two windows of 4, none twice


def test_worker_token(make_app: Any, database_url: str) -> None:
    app = make_app(ServiceSettings(database_url=database_url, worker_token="s3cret"))
    body = {"name": "w", "device": {"gpu_model": "G", "mode": "cuda", "backends": ["cublas"]}}
    with TestClient(app) as http:
        assert http.post("/v1/workers/register", json=body).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert http.post("/v1/workers/register", json=body, headers=wrong).status_code == 401
        good = {"Authorization": "Bearer s3cret"}
        assert http.post("/v1/workers/register", json=body, headers=good).status_code == 200
        assert http.get("/v1/jobs").status_code == 200  # user endpoints stay open


def test_a_queued_job_says_why_it_waits(client: TestClient, driver: Any, clock: Any) -> None:
    """A job for a GPU model no worker has registered says so, instead of staying queued
    with no word; once such a worker registers the reason goes, and it comes back when that
    worker has not been seen for a lease."""
    job = driver.submit(gpu="H200-nowhere")
    assert job["status"] == "queued"
    assert "no worker of GPU model 'H200-nowhere' has registered" in job["waiting"]
    driver.register(name="h200", gpu="H200-nowhere")
    assert driver.job(job["id"])["waiting"] is None
    clock.advance(61)  # lease_seconds is 60 in these tests
    waiting = driver.job(job["id"])["waiting"]
    assert waiting is not None and "has been seen for 61 s" in waiting and "'h200'" in waiting
