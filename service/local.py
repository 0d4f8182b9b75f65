"""The embedded deployment: the service, a SQLite file and a local worker in one command.

A composition root (with ``service.cli`` and ``service.embedded``): the only place besides the
CLI that wires the service and a worker together, so ``workers`` reaches the service through
``service.client`` alone.

``LocalCluster`` starts the service on a loopback port and a worker against it in a background
thread (candidates still run in an isolated child process). ``run_tuning`` submits one job to it
over HTTP and shows progress until the job ends; ``kernelsearch tune`` and the GEMM benchmark
call it, the decision-loop benchmark runs many jobs on one cluster.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from service.client import KernelSearchClient
from service.embedded import EmbeddedServer
from service.settings import ServiceSettings
from workers.device import catalogues, detect_device
from workers.identity import SecretFile
from workers.isolation import IsolatedRunner
from workers.loop import WorkerLoop
from workers.plugins import import_plugins
from workers.settings import get_worker_settings

FINISHED = ("done", "failed", "cancelled")


@dataclass(frozen=True)
class TuningResult:
    job: dict[str, Any]
    best: dict[str, Any] | None
    wall_s: float
    database_url: str
    gpu_model: str


class LocalCluster:
    """The embedded service (one SQLite file) with one local worker thread, for as many jobs as
    the caller submits; ``run_tuning`` runs one job on it, the decision-loop benchmark many.
    ``plugins`` (default ``KS_PLUGINS``) are imported here and by the worker's children."""

    def __init__(self, settings: ServiceSettings, interpret: bool | None = None,
                 batch: int = 8, candidate_timeout_s: float = 180.0,
                 plugins: Sequence[str] | None = None) -> None:
        self.settings = settings
        self.plugins = import_plugins(get_worker_settings().plugins if plugins is None
                                      else plugins)
        self.device = detect_device(interpret)
        self.batch = batch
        self.candidate_timeout_s = candidate_timeout_s
        self.failure: list[BaseException] = []

    def __enter__(self) -> LocalCluster:
        self._server = EmbeddedServer(self.settings)
        self._server.__enter__()
        runner: IsolatedRunner | None = None
        try:
            self.client = KernelSearchClient(self._server.url, token=get_worker_settings().token,
                                             worker_token=self.settings.worker_token)
            runner = IsolatedRunner(interpret=self.device.mode != "cuda",
                                    timeout_s=self.candidate_timeout_s, plugins=self.plugins)
            runner.__enter__()
            self._runner = runner
            name = socket.gethostname()
            loop = WorkerLoop(self.client, runner, self.device, name=name, batch=self.batch,
                              poll_s=0.2, catalogues=catalogues(self.device),
                              secret_file=SecretFile(get_worker_settings().state_dir,
                                                     self.settings.database_url, name))
            loop.register()
        except BaseException:
            if runner is not None:  # its benchmark child is running: stop it too
                runner.__exit__(None, None, None)
            self._server.__exit__(None, None, None)
            raise
        self._stop = threading.Event()

        def work() -> None:
            try:
                loop.run(self._stop)
            except BaseException as exc:  # surfaced by wait(), with the job's state
                self.failure.append(exc)
                self._stop.set()

        self._thread = threading.Thread(target=work, daemon=True, name="kernelsearch-worker")
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        """The embedded service's base URL (its API and its dashboard)."""
        return self._server.url

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.candidate_timeout_s + 30)
        self._runner.__exit__(None, None, None)
        self._server.__exit__(None, None, None)

    def wait(self, job_id: int, *, poll_s: float = 0.5, timeout_s: float | None = None,
             on_progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Poll the job until it ends (cancelled after ``timeout_s``); Ctrl-C cancels it."""
        t0 = time.monotonic()
        try:
            while True:
                job = self.client.get_job(job_id)
                if on_progress is not None:
                    on_progress(job)
                if job["status"] in FINISHED or self.failure:
                    break
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    self.client.cancel_job(job_id)
                    job = self.client.get_job(job_id)
                    break
                time.sleep(poll_s)
        except KeyboardInterrupt:
            self.client.cancel_job(job_id)
            raise
        if self.failure:
            raise RuntimeError(f"the local worker stopped: {self.failure[0]!r}"
                               ) from self.failure[0]
        return job


def run_tuning(problem: dict[str, Any], budget: dict[str, Any], *, database_url: str,
               backends: list[str] | None = None, interpret: bool | None = None,
               batch: int = 8, candidate_timeout_s: float = 180.0,
               on_progress: Callable[[dict[str, Any]], None] | None = None,
               poll_s: float = 0.5, settings: ServiceSettings | None = None,
               policy: dict[str, Any] | None = None) -> TuningResult:
    """Tune ``problem`` on this machine's GPU (or the interpreter) and return the final job."""
    settings = settings or ServiceSettings(database_url=database_url)
    started = time.monotonic()
    with LocalCluster(settings, interpret, batch, candidate_timeout_s) as cluster:
        gpu = cluster.device.gpu_model
        job = cluster.client.submit_job(problem, budget=budget, backends=backends, gpu=gpu,
                                        policy=policy)
        job = cluster.wait(job["id"], poll_s=poll_s, on_progress=on_progress)
        best = cluster.client.best(**_best_query(problem, gpu))
    return TuningResult(job=job, best=best, wall_s=time.monotonic() - started,
                        database_url=settings.database_url, gpu_model=gpu)


def _best_query(problem: dict[str, Any], gpu: str) -> dict[str, Any]:
    query = {k: v for k, v in problem.items() if v is not None}
    query.setdefault("kind", "gemm")
    query["gpu"] = gpu
    return query
