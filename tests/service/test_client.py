"""``service.client.KernelSearchClient``: the calls against the real app, retries on fakes."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.client import (
    KernelSearchClient,
    KernelSearchConnectionError,
    KernelSearchError,
    backoff,
    retryable,
)


def test_client_round_trip(client: TestClient, driver: Any) -> None:
    api = KernelSearchClient("http://testserver", http_client=client)
    problem = {"kind": "gemm", "m": 256, "n": 256, "k": 256, "dtype": "bf16"}
    job = api.submit_job(problem, budget={"max_trials": 1}, backends=["cublas", "triton"],
                         seed=3, policy={"force_custom": True})
    assert job["status"] == "queued" and job["seed"] == 3
    assert api.get_job(job["id"])["id"] == job["id"]
    assert api.list_jobs(limit=1)["items"][0]["id"] == job["id"]
    assert api.best(m=256, n=256, k=256, dtype="bf16") is None
    worker = api.register_worker("w", driver.device())
    grant = api.lease(worker["worker_id"], 8)
    assert grant["lease_seconds"] == 60 and len(grant["candidates"]) == 2
    assert api.renew(worker["worker_id"], grant["lease_id"])["expires_at"]
    results = [{"candidate_id": c["id"], "measurement": driver.fake_ok(20.0 + i)}
               for i, c in enumerate(grant["candidates"])]
    assert len(api.report(worker["worker_id"], grant["lease_id"], results)["accepted"]) == 2
    best = api.best(m=256, n=256, k=256, dtype="bf16", gpu=None)
    assert best is not None and best["median_us"] == 20.0
    assert api.problems()["total"] == 1
    assert api.trials(job["problem_id"], limit=1)["total"] == 2
    assert api.get_job(job["id"])["status"] == "done"
    with pytest.raises(KernelSearchError) as err:
        api.cancel_job(job["id"])
    assert err.value.status_code == 409 and "already done" in str(err.value)
    with pytest.raises(KernelSearchError) as err:
        api.submit_job({**problem, "dtype": "int4"})
    assert err.value.status_code == 422 and "problem.dtype" in str(err.value)


def _scripted(statuses: list[int | Exception]) -> tuple[httpx.MockTransport, list[str]]:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        step = statuses.pop(0)
        if isinstance(step, Exception):
            raise step
        return httpx.Response(step, json={"detail": f"status {step}"} if step >= 400 else {})

    return httpx.MockTransport(handler), calls


def test_retries_5xx_429_and_connection_errors() -> None:
    sleeps: list[float] = []
    transport, calls = _scripted([httpx.ConnectError("refused"), 503, 429, 200])
    api = KernelSearchClient("http://x", transport=transport, retries=3, sleep=sleeps.append)
    assert api.get_job(1) == {}
    assert len(calls) == 4 and len(sleeps) == 3
    # exponential back-off with equal jitter: between half and all of 0.5, 1 and 2 s
    for wait, ceiling in zip(sleeps, (0.5, 1.0, 2.0), strict=True):
        assert ceiling / 2 <= wait <= ceiling


def test_back_off_is_jittered_capped_and_honours_retry_after() -> None:
    rng = random.Random(7)
    waits = [backoff(3, 0.5, 30.0, rng) for _ in range(200)]
    assert all(2.0 <= w <= 4.0 for w in waits)
    assert max(waits) - min(waits) > 1.0  # spread out, so clients cut off together disperse
    assert all(15.0 <= backoff(40, 0.5, 30.0, rng) <= 30.0 for _ in range(20))  # the cap

    def busy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": "7"}, json={"detail": "db down"})

    sleeps: list[float] = []
    api = KernelSearchClient("http://x", transport=httpx.MockTransport(busy), retries=2,
                             sleep=sleeps.append)
    with pytest.raises(KernelSearchError) as err:
        api.get_job(1)
    assert err.value.status_code == 503 and retryable(err.value)
    assert sleeps == [7.0, 7.0]
    assert not retryable(KernelSearchError(404, "no such job"))


def test_4xx_raises_at_once_and_gives_up_after_retries() -> None:
    transport, calls = _scripted([404])
    api = KernelSearchClient("http://x", transport=transport, sleep=lambda s: None)
    with pytest.raises(KernelSearchError) as err:
        api.get_job(1)
    assert err.value.status_code == 404 and err.value.detail == "status 404" and len(calls) == 1
    transport, calls = _scripted([500, 500, 500])
    api = KernelSearchClient("http://x", transport=transport, retries=2, sleep=lambda s: None)
    with pytest.raises(KernelSearchError) as err:
        api.get_job(1)
    assert err.value.status_code == 500 and len(calls) == 3
    transport, _ = _scripted([httpx.ReadTimeout("slow")] * 2)
    api = KernelSearchClient("http://x", transport=transport, retries=1, sleep=lambda s: None)
    with pytest.raises(KernelSearchConnectionError) as conn:
        api.get_job(1)
    assert isinstance(conn.value, OSError) and conn.value.status_code == 503


def test_token_header_is_sent() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json={"worker_id": 1, "gpu_model": "G"})

    api = KernelSearchClient("http://x/", token="t0k", transport=httpx.MockTransport(handler))
    api.register_worker("w", {"gpu_model": "G", "mode": "cuda"})
    assert seen == ["Bearer t0k"]


def test_user_and_worker_calls_carry_their_own_credentials() -> None:
    seen: list[tuple[str, str | None, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("authorization"),
                     request.headers.get("x-worker-secret")))
        if request.url.path == "/v1/workers/register":
            return httpx.Response(200, json={"worker_id": 7, "gpu_model": "G",
                                             "worker_secret": "s3"})
        return httpx.Response(200, json={})

    api = KernelSearchClient("http://x", token="user", worker_token="work",
                             transport=httpx.MockTransport(handler))
    api.cancel_job(1)
    api.register_worker("w", {"gpu_model": "G", "mode": "cuda"})
    api.lease(7, 1)
    assert seen == [("/v1/jobs/1/cancel", "Bearer user", None),
                    ("/v1/workers/register", "Bearer work", None),
                    ("/v1/workers/7/lease", "Bearer work", "s3")]


def test_a_full_queue_is_said_at_once_not_waited_for() -> None:
    calls: list[str] = []

    def full(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(429, headers={"Retry-After": "60"},
                              json={"detail": "1000 jobs are queued or running, the limit "
                                              "(max_queued_jobs)"})

    sleeps: list[float] = []
    api = KernelSearchClient("http://x", transport=httpx.MockTransport(full), retries=3,
                             sleep=sleeps.append)
    with pytest.raises(KernelSearchError, match="max_queued_jobs") as err:
        api.submit_job({"m": 8, "n": 8, "k": 8})
    assert err.value.status_code == 429 and calls == ["/v1/jobs"] and sleeps == []
