"""Users' tokens guard writes (and reads when they are not public), jobs record their owner,
only the owner or an admin cancels or re-opens, and the worker token is no user token."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import ServiceSettings
from service.tokens import parse_tokens

ALICE, BOB, ROOT, WORKER = ("alice-token-0123456789", "bob-token-0123456789",
                            "root-token-0123456789", "worker-token-0123456789")
TOKENS = f"alice:{ALICE},bob:{BOB},root:{ROOT}:admin"
PROBLEM = {"kind": "gemm", "m": 512, "n": 512, "k": 512, "dtype": "fp16"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def secured(make_app: Any, database_url: str, secret_keeper: Any) -> Any:
    """A client of an app with users' tokens and a worker token."""
    def make(**over: Any) -> TestClient:
        settings = ServiceSettings(database_url=database_url, api_tokens=TOKENS,
                                   worker_token=WORKER, **over)
        return secret_keeper(TestClient(make_app(settings)))
    return make


def submit(http: TestClient, token: str | None) -> Any:
    return http.post("/v1/jobs", json={"problem": PROBLEM},
                     headers=bearer(token) if token else {})


def test_writes_need_a_known_user_token(secured: Any) -> None:
    http = secured()
    r = submit(http, None)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    assert "Authorization: Bearer <token>" in r.json()["detail"]
    r = submit(http, "not-a-token-of-anyone")
    assert r.status_code == 401 and "unknown token" in r.json()["detail"]
    assert r.headers["WWW-Authenticate"] == "Bearer"
    assert submit(http, WORKER).status_code == 401  # the worker token is no user token
    r = submit(http, ALICE)
    assert r.status_code == 201 and r.json()["owner"] == "alice"
    refresh = http.post("/v1/calibrations/refresh", json={"gpu": "G"})
    assert refresh.status_code == 401
    assert http.post("/v1/calibrations/refresh", json={"gpu": "G"},
                     headers=bearer(BOB)).status_code == 200
    reopen = http.post(f"/v1/problems/{r.json()['problem_id']}/reopen", json={})
    assert reopen.status_code == 401


def test_only_the_owner_or_an_admin_cancels_or_reopens(secured: Any) -> None:
    http = secured()
    first, second = submit(http, ALICE).json(), submit(http, ALICE).json()
    r = http.post(f"/v1/jobs/{first['id']}/cancel", headers=bearer(BOB))
    assert r.status_code == 403 and "only its owner or an admin" in r.json()["detail"]
    assert http.get(f"/v1/jobs/{first['id']}").json()["status"] == "queued"
    r = http.post(f"/v1/jobs/{first['id']}/cancel", headers=bearer(ALICE))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    r = http.post(f"/v1/jobs/{second['id']}/cancel", headers=bearer(ROOT))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    problem = first["problem_id"]
    r = http.post(f"/v1/problems/{problem}/reopen", json={}, headers=bearer(BOB))
    assert r.status_code == 403 and "re-open" in r.json()["detail"]
    r = http.post(f"/v1/problems/{problem}/reopen", json={}, headers=bearer(ALICE))
    assert r.status_code == 201 and r.json()["owner"] == "alice"
    r = http.post(f"/v1/problems/{problem}/reopen", json={}, headers=bearer(ROOT))
    assert r.status_code == 201 and r.json()["owner"] == "root"


def test_worker_endpoints_take_the_worker_token_only(secured: Any) -> None:
    http = secured()
    body = {"name": "w", "device": {"gpu_model": "G", "mode": "cuda", "backends": ["cublas"]}}
    r = http.post("/v1/workers/register", json=body, headers=bearer(ROOT))
    assert r.status_code == 401 and "KS_WORKER_TOKEN" in r.json()["detail"]
    assert http.post("/v1/workers/register", json=body,
                     headers=bearer(WORKER)).status_code == 200


def test_reads_are_public_unless_told_otherwise(secured: Any) -> None:
    http = secured()
    job = submit(http, ALICE).json()
    assert http.get(f"/v1/jobs/{job['id']}").status_code == 200
    assert http.get("/ui").status_code == 200
    closed = secured(public_reads=False)
    for path in ("/v1/jobs", f"/v1/jobs/{job['id']}", "/v1/problems", "/v1/calibrations",
                 "/ui", "/ui/jobs", "/ui/api/jobs/active"):
        r = closed.get(path)
        assert r.status_code == 401, path
        assert r.headers["WWW-Authenticate"] == "Bearer"
        assert closed.get(path, headers=bearer(BOB)).status_code == 200, path
    r = closed.get("/v1/best", params=PROBLEM)
    assert r.status_code == 401
    assert closed.get("/v1/best", params=PROBLEM, headers=bearer(BOB)).status_code == 404


def test_open_service_says_so_and_writes_without_tokens(make_app: Any, database_url: str,
                                                         caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    with caplog.at_level(logging.WARNING, logger="kernelsearch.auth"):
        app = make_app(ServiceSettings(database_url=database_url))
    assert "writes are unauthenticated" in caplog.text
    with TestClient(app) as http:
        job = submit(http, None)
        assert job.status_code == 201 and job.json()["owner"] is None
        assert http.post(f"/v1/jobs/{job.json()['id']}/cancel").status_code == 200


def test_tokens_are_kept_as_digests_only(make_app: Any, database_url: str,
                                         caplog: pytest.LogCaptureFixture) -> None:
    settings = ServiceSettings(database_url=database_url, api_tokens=TOKENS)
    assert ALICE not in repr(settings) and ALICE not in str(settings.model_dump())
    with caplog.at_level(logging.DEBUG):
        with TestClient(make_app(settings)) as http:
            assert submit(http, "wrong-token-0123456789").status_code == 401
            assert submit(http, ALICE).status_code == 201
    assert ALICE not in caplog.text and "wrong-token" not in caplog.text


@pytest.mark.parametrize(("value", "rule"), [
    ("alice", "expected name:token"), ("alice:short", "at least 16"),
    ("al ice:0123456789abcdefgh", "the name"), ("a:0123456789abcdefgh:root", "expected"),
    ("a:0123456789abcdefgh,a:0123456789abcdefgi", "twice")])
def test_a_malformed_token_list_names_the_entry_not_the_token(value: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rule) as err:
        parse_tokens(value)
    assert "0123456789abcdefgh" not in str(err.value)


def test_cors_is_closed_by_default(make_app: Any, database_url: str) -> None:
    preflight = {"Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"}
    with TestClient(make_app(ServiceSettings(database_url=database_url))) as http:
        r = http.get("/v1/jobs", headers={"Origin": "https://elsewhere.example"})
        assert "access-control-allow-origin" not in r.headers
        assert "access-control-allow-origin" not in http.options("/v1/jobs",
                                                                 headers=preflight).headers
    settings = ServiceSettings(database_url=database_url,
                               cors_origins="https://elsewhere.example")
    with TestClient(make_app(settings)) as http:
        r = http.options("/v1/jobs", headers=preflight)
        assert r.headers["access-control-allow-origin"] == "https://elsewhere.example"
        r = http.get("/v1/jobs", headers={"Origin": "https://other.example"})
        assert "access-control-allow-origin" not in r.headers


def test_queued_jobs_are_limited_in_all_and_per_owner(secured: Any) -> None:
    http = secured(max_queued_jobs=3, max_queued_jobs_per_owner=2)
    assert submit(http, ALICE).status_code == 201
    assert submit(http, ALICE).status_code == 201
    r = submit(http, ALICE)
    assert r.status_code == 429 and "max_queued_jobs_per_owner" in r.json()["detail"]
    assert int(r.headers["Retry-After"]) > 0
    assert submit(http, BOB).status_code == 201
    r = submit(http, BOB)
    assert r.status_code == 429 and "(max_queued_jobs)" in r.json()["detail"]
    first = http.get("/v1/jobs").json()["items"][-1]
    http.post(f"/v1/jobs/{first['id']}/cancel", headers=bearer(ALICE))
    assert submit(http, BOB).status_code == 201  # a finished job frees its place


def test_concurrent_submissions_never_pass_the_limit(secured: Any) -> None:
    http = secured(max_queued_jobs=3)
    codes: list[int] = []

    def one() -> None:
        codes.append(submit(http, ALICE).status_code)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [201] * 3 + [429] * 5
    assert http.get("/v1/jobs").json()["total"] == 3
