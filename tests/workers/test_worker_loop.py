"""The worker loop against a real service in-process (FastAPI TestClient as the transport) and
a fake runner that replays recorded statuses (a labelled fake: no kernel runs here)."""

from __future__ import annotations

import threading

from fastapi.testclient import TestClient

from search.types import INTERPRETER_GPU, Candidate, Device, Measurement, Status
from service.app import create_app
from service.client import KernelSearchClient, KernelSearchConnectionError
from service.settings import ServiceSettings
from workers.loop import WorkerLoop


class ReplayRunner:
    """FAKE runner: cuBLAS at 10 µs, Triton configs at 20 µs minus BLOCK_N/64, none crash; a
    calibration task gets FAKE CPU-like peaks (which put the cuBLAS time far from the roofline,
    so the search runs)."""

    def __init__(self) -> None:
        self.ran: list[Candidate] = []

    def run(self, candidate: Candidate) -> Measurement:
        self.ran.append(candidate)
        if candidate.task == "calibrate":
            return Measurement(Status.OK, median_us=1000.0, reps=3, bench_s=0.5, extra={
                "bandwidth_gbs": 20.0, "peak_tflops": {"fp16": 0.5, "bf16": 0.5, "fp32": 0.2}})
        if candidate.backend == "cublas":
            us = 10.0
        else:
            us = 20.0 - candidate.config["BLOCK_N"] / 64
        return Measurement(Status.OK, median_us=us, p20_us=us, p80_us=us, reps=10)


def test_loop_runs_a_job_to_completion_and_reports_everything(database_url: str) -> None:
    settings = ServiceSettings(database_url=database_url)
    with TestClient(create_app(settings)) as http:
        client = KernelSearchClient("http://testserver", http_client=http)
        job = client.submit_job({"kind": "gemm", "m": 64, "n": 48, "k": 80, "dtype": "fp16"},
                                budget={"max_trials": 5})
        runner = ReplayRunner()
        device = Device(gpu_model=INTERPRETER_GPU, mode="interpreter",
                        backends=("cublas", "triton"))
        loop = WorkerLoop(client, runner, device, batch=2, poll_s=0.01)
        loop.run(idle_exit_s=0.2)
        final = client.get_job(job["id"])
    assert final["status"] == "done"
    assert final["progress"]["trials_done"] == 5
    # the calibration, the cuBLAS baseline and 5 Triton configs
    assert loop.stats.reported == len(runner.ran) == 7
    assert [(c.task, c.backend) for c in runner.ran[:2]] == [("calibrate", None),
                                                               (None, "cublas")]
    assert final["best"]["backend"] == "cublas" and final["best"]["median_us"] == 10.0
    assert final["decision"]["verdict"] == "library_wins_after_search"


def test_an_unreachable_service_does_not_kill_the_loop() -> None:
    class Down:
        calls = 0

        def lease(self, *a: object) -> dict:
            Down.calls += 1
            raise KernelSearchConnectionError("connection refused")

    stop = threading.Event()
    loop = WorkerLoop(Down(), ReplayRunner(), Device(gpu_model="x", mode="interpreter"),  # type: ignore[arg-type]
                      poll_s=0.01)
    loop.worker_id = 1
    t = threading.Thread(target=loop.run, args=(stop,))
    t.start()
    while Down.calls < 3:
        stop.wait(0.01)
    stop.set()
    t.join(timeout=5)
    assert not t.is_alive()


def test_a_cutlass_worker_declares_its_catalogue_when_it_registers() -> None:
    class Recorder:
        worker_secret = None  # the client's secret slot (none issued by this fake)

        def register_worker(self, name: str, device: dict, catalogue: dict | None = None
                            ) -> dict:
            self.sent = (device["backends"], catalogue)
            return {"worker_id": 1, "gpu_model": device["gpu_model"]}

    client = Recorder()
    catalogue = {"source": "fake", "families": []}
    device = Device(gpu_model="H100", mode="cuda", backends=("cublas", "cutlass"))
    WorkerLoop(client, ReplayRunner(), device,
               catalogues={"gemm/cutlass": catalogue}).register()
    assert client.sent == (["cublas", "cutlass"], {"gemm/cutlass": catalogue})
