"""A registered worker keeps its identity: its first registration issues a secret, and its
name and id are used only with it (re-registration, lease, renew, report)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from search.types import Device
from service.client import KernelSearchClient, KernelSearchError
from service.planner import Planner
from service.settings import ServiceSettings
from workers.identity import SecretFile
from workers.loop import WorkerLoop

PROBLEM = {"kind": "gemm", "m": 512, "n": 512, "k": 512, "dtype": "fp16"}
DEVICE = {"gpu_model": "NVIDIA H100 80GB HBM3", "mode": "cuda", "backends": ["cublas"]}


def register(http: TestClient, name: str, secret: str | None = None, **device: Any) -> Any:
    headers = {"X-Worker-Secret": secret} if secret else {}
    return http.post("/v1/workers/register", json={"name": name, "device": DEVICE | device},
                     headers=headers)


def test_a_name_is_taken_over_only_with_its_secret(app: Any) -> None:
    with TestClient(app) as http:
        first = register(http, "gpu-box-1")
        assert first.status_code == 200
        worker, secret = first.json()["worker_id"], first.json()["worker_secret"]
        assert len(secret) >= 32
        # an impostor claims the name (to store its numbers under the real worker's model)
        for wrong in (None, "guessed-secret"):
            r = register(http, "gpu-box-1", wrong, gpu_model="fake H100")
            assert r.status_code == 403, r.text
            assert "needs its X-Worker-Secret" in r.json()["detail"]
        # the real worker, restarted, comes back with its secret: no new secret
        again = register(http, "gpu-box-1", secret)
        assert again.status_code == 200
        assert again.json() == {"worker_id": worker, "gpu_model": DEVICE["gpu_model"],
                                "worker_secret": None}


@pytest.mark.parametrize("planning", ["inline", "background"])
def test_a_workers_id_is_used_only_with_its_secret(make_app: Any, database_url: str,
                                                   planning: str) -> None:
    app = make_app(ServiceSettings(database_url=database_url, planning=planning))
    with TestClient(app) as http:
        assert http.post("/v1/jobs", json={"problem": PROBLEM, "policy": {"force_custom": True},
                                           "backends": ["cublas"]}).status_code == 201
        r = register(http, "w1")
        worker, secret = r.json()["worker_id"], r.json()["worker_secret"]
        calls = [("lease", {"max_candidates": 1}), ("leases/abc/renew", None),
                 ("report", {"lease_id": "abc", "results": []})]
        for path, body in calls:
            for headers in ({}, {"X-Worker-Secret": "not-it"}):
                r = http.post(f"/v1/workers/{worker}/{path}", json=body, headers=headers)
                assert r.status_code == 403, (path, r.text)
                assert "acts only with its own secret" in r.json()["detail"]
        good = {"X-Worker-Secret": secret}
        lease = http.post(f"/v1/workers/{worker}/lease", json={"max_candidates": 1},
                          headers=good)
        if planning == "background":  # the first lease binds the job; the planner plans it
            assert lease.status_code == 200 and not lease.json()["candidates"]
            Planner(app.state.flow).drain()
            lease = http.post(f"/v1/workers/{worker}/lease", json={"max_candidates": 1},
                              headers=good)
        assert lease.status_code == 200 and lease.json()["candidates"]
        lease_id = lease.json()["lease_id"]
        assert http.post(f"/v1/workers/{worker}/leases/{lease_id}/renew",
                         headers=good).status_code == 200


def test_a_restarted_worker_keeps_its_identity_through_its_state_dir(
        database_url: str, make_app: Any, tmp_path: Path) -> None:
    app = make_app(ServiceSettings(database_url=database_url))
    device = Device(gpu_model="NVIDIA H100 80GB HBM3", mode="cuda", backends=("cublas",))
    with TestClient(app) as http:
        def start() -> WorkerLoop:
            client = KernelSearchClient("http://testserver", http_client=http, retries=0)
            return WorkerLoop(client, runner=None, device=device, name="box",  # type: ignore[arg-type]
                              secret_file=SecretFile(tmp_path, "http://testserver", "box"))

        first = start()
        worker = first.register()
        kept = first.secret_file.path  # type: ignore[union-attr]
        assert kept.exists() and stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert start().register() == worker  # a new process, the same identity
        stranger = WorkerLoop(KernelSearchClient("http://testserver", http_client=http,
                                                 retries=0), None, device, name="box",  # type: ignore[arg-type]
                              secret_file=SecretFile(tmp_path / "elsewhere", "u", "box"))
        try:
            stranger.register()
        except KernelSearchError as exc:
            assert exc.status_code == 403
        else:
            raise AssertionError("a worker without the secret took the name over")
