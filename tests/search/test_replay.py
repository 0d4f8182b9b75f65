"""Replays of REAL measurements recorded on an H100 (tests/data/h100_gemm_trials.json).

These are recorded fakes: no kernel runs here. They check that the search and the service make
the right decisions on real numbers: the tuner never proposes a configuration the database
already measured and its best is the recorded best; a job fed the recorded measurements through
the real worker loop and the real service picks the recorded winner and reports the recorded
cuBLAS baseline and speed-up.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from search.constraints import DeviceLimits
from search.optimizer import GemmTuner
from search.types import Candidate, Device, GemmProblem, Measurement, Status, config_key
from service.app import create_app
from service.client import KernelSearchClient
from service.settings import ServiceSettings
from workers.loop import WorkerLoop

DATA = json.loads((Path(__file__).parents[1] / "data" / "h100_gemm_trials.json").read_text())
GPU = DATA["gpu"]
PROBLEMS = {p["problem_key"]: p["trials"] for p in DATA["problems"]}


def _problem(key: str) -> GemmProblem:
    _, b, m, n, k, dtype, out, acc, layouts = key.split(":")
    return GemmProblem(m=int(m[1:]), n=int(n[1:]), k=int(k[1:]), batch=int(b[1:]), dtype=dtype,
                       out_dtype=out, acc_dtype=acc)


def _measurement(t: dict[str, Any]) -> Measurement:
    return Measurement(Status(t["status"]), median_us=t["median_us"], p20_us=t["p20_us"],
                       p80_us=t["p80_us"], reps=100, rel_error=t["rel_error"])


def _recorded(key: str) -> tuple[dict[str, Measurement], float, float]:
    triton = {config_key(t["config"]): _measurement(t) for t in PROBLEMS[key]
              if t["backend"] == "triton"}
    cublas = next(t["median_us"] for t in PROBLEMS[key] if t["backend"] == "cublas")
    best_triton = min(m.median_us for m in triton.values() if m.ok)
    return triton, cublas, best_triton


@pytest.mark.parametrize("key", sorted(PROBLEMS))
def test_tuner_reuses_recorded_measurements_and_finds_their_best(tmp_path: Path, key: str
                                                                 ) -> None:
    recorded, _, best_triton = _recorded(key)
    tuner = GemmTuner(f"sqlite:///{tmp_path / 'replay.db'}", _problem(key), GPU, DeviceLimits())
    fresh = tuner.propose(16, lambda c: recorded.get(config_key(c)))
    assert not {config_key(p.config) for p in fresh} & set(recorded)
    best = tuner.best()
    # The seeds are among the recorded configurations, so the study learned from them.
    assert best is not None and best[1] >= best_triton
    assert config_key(best[0]) in recorded and recorded[config_key(best[0])].median_us == best[1]


class RecordedRunner:
    """Recorded FAKE runner: answers each candidate with the H100 measurement of its config."""

    def __init__(self, key: str) -> None:
        self.by_config = {(t["backend"], config_key(t["config"])): _measurement(t)
                          for t in PROBLEMS[key]}

    def run(self, candidate: Candidate) -> Measurement:
        return self.by_config[(candidate.backend, candidate.config_key)]


class RecordedTuner:
    """Proposes the recorded configurations in recorded order (a replay of the real search)."""

    def __init__(self, configs: list[dict[str, Any]]) -> None:
        self.configs, self.exhausted, self._next = configs, False, 0

    def propose(self, n: int, known: Any) -> list[Any]:
        from search.optimizer import Proposal

        out = []
        while len(out) < n and self._next < len(self.configs):
            config = self.configs[self._next]
            self._next += 1
            if known(config) is None:
                out.append(Proposal(self._next, config))
        self.exhausted = len(out) < n
        return out

    def record(self, trial_number: int, measurement: Measurement) -> None:
        pass

    def abandon(self, trial_number: int) -> None:
        pass


@pytest.mark.parametrize("key", ["gemm:b1:m4096:n4096:k4096:bf16:bf16:fp32:rr",
                                 "gemm:b1:m128:n14336:k4096:bf16:bf16:fp32:rr",
                                 "gemm:b1:m1000:n3000:k2000:bf16:bf16:fp32:rr",
                                 "gemm:b1:m64:n64:k65536:bf16:bf16:fp32:rr"])
def test_service_decides_the_recorded_winner(tmp_path: Path, key: str) -> None:
    recorded, cublas, best_triton = _recorded(key)
    configs = [t["config"] for t in PROBLEMS[key] if t["backend"] == "triton"]
    settings = ServiceSettings(database_url=f"sqlite:///{tmp_path / 'svc.db'}")
    app = create_app(settings, tuner_factory=lambda *a: RecordedTuner(configs))
    problem = _problem(key)
    with TestClient(app) as http:
        client = KernelSearchClient("http://testserver", http_client=http)
        job = client.submit_job(problem.to_dict(), budget={"max_trials": len(configs)})
        device = Device(gpu_model=GPU, mode="cuda", sm_count=132, smem_per_block=232_448,
                        memory_bytes=80 << 30)
        WorkerLoop(client, RecordedRunner(key), device, batch=8, poll_s=0.01).run(
            idle_exit_s=0.2)
        final = client.get_job(job["id"])
        best = client.best(**problem.to_dict(), gpu=GPU)
    assert final["status"] == "done"
    assert final["library_best"]["median_us"] == pytest.approx(cublas)
    assert final["custom_best"]["median_us"] == pytest.approx(best_triton)
    winner = "triton" if best_triton < cublas else "cublas"
    assert final["best"]["backend"] == best["backend"] == winner
    assert best["median_us"] == pytest.approx(min(cublas, best_triton))
    assert final["speedup"] == pytest.approx(cublas / min(cublas, best_triton))
