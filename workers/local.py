"""The embedded deployment: the service, a SQLite file and a local worker in one command.

``run_tuning`` starts the service on a loopback port, submits one job over HTTP, runs a worker
against it in a background thread (candidates still run in an isolated child process) and shows
progress until the job ends. ``kernelsearch tune`` and the GEMM benchmark both call it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from service.client import KernelSearchClient
from service.embedded import EmbeddedServer
from service.settings import ServiceSettings
from workers.device import detect_device
from workers.isolation import IsolatedRunner
from workers.loop import WorkerLoop

FINISHED = ("done", "failed", "cancelled")


@dataclass(frozen=True)
class TuningResult:
    job: dict[str, Any]
    best: dict[str, Any] | None
    wall_s: float
    database_url: str
    gpu_model: str


def run_tuning(problem: dict[str, Any], budget: dict[str, Any], *, database_url: str,
               backends: list[str] | None = None, interpret: bool | None = None,
               batch: int = 8, candidate_timeout_s: float = 180.0,
               on_progress: Callable[[dict[str, Any]], None] | None = None,
               poll_s: float = 0.5, settings: ServiceSettings | None = None,
               policy: dict[str, Any] | None = None) -> TuningResult:
    """Tune ``problem`` on this machine's GPU (or the interpreter) and return the final job."""
    settings = settings or ServiceSettings(database_url=database_url)
    device = detect_device(interpret)
    started = time.monotonic()
    with EmbeddedServer(settings) as server:
        client = KernelSearchClient(server.url, token=settings.worker_token)
        job = client.submit_job(problem, budget=budget, backends=backends,
                                gpu=device.gpu_model, policy=policy)
        stop = threading.Event()
        with IsolatedRunner(interpret=device.mode != "cuda",
                            timeout_s=candidate_timeout_s) as runner:
            loop = WorkerLoop(client, runner, device, batch=batch, poll_s=0.2)
            loop.register()
            failure: list[BaseException] = []

            def work() -> None:
                try:
                    loop.run(stop)
                except BaseException as exc:  # surfaced below, with the job's state
                    failure.append(exc)
                    stop.set()

            worker = threading.Thread(target=work, daemon=True, name="kernelsearch-worker")
            worker.start()
            try:
                while True:
                    job = client.get_job(job["id"])
                    if on_progress is not None:
                        on_progress(job)
                    if job["status"] in FINISHED or failure:
                        break
                    time.sleep(poll_s)
            except KeyboardInterrupt:
                client.cancel_job(job["id"])
                job = client.get_job(job["id"])
                raise
            finally:
                stop.set()
                worker.join(timeout=candidate_timeout_s + 30)
            if failure:
                raise RuntimeError(f"the local worker stopped: {failure[0]!r}") from failure[0]
        best = client.best(**_best_query(problem, device.gpu_model))
    return TuningResult(job=job, best=best, wall_s=time.monotonic() - started,
                        database_url=settings.database_url, gpu_model=device.gpu_model)


def _best_query(problem: dict[str, Any], gpu: str) -> dict[str, Any]:
    query = {k: v for k, v in problem.items() if v is not None}
    query.setdefault("kind", "gemm")
    query["gpu"] = gpu
    return query
