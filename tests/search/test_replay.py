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

from search.decision import Policy
from search.kinds.gemm import triton_space as triton_gemm
from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_tuner import GemmTuner
from search.limits import DeviceLimits
from search.types import Candidate, Device, Measurement, Status, Task, config_key
from service.app import create_app
from service.client import KernelSearchClient
from service.settings import ServiceSettings
from tests.search.agent_replay import H100_REPLAY_CALIBRATION, run_shape, tier_of, verify_rounds
from workers.loop import WorkerLoop

DATA = json.loads((Path(__file__).parents[1] / "data" / "h100_gemm_trials.json").read_text())
GPU = DATA["gpu"]


def _as_stored(trial: dict[str, Any]) -> dict[str, Any]:
    """A recorded trial as the search emits it today: the recording's Triton configs predate the
    template's optional keys, so they mean the defaults that ``complete`` fills in."""
    if trial["backend"] != "triton":
        return trial
    return {**trial, "config": triton_gemm.complete(trial["config"])}


PROBLEMS = {p["problem_key"]: [_as_stored(t) for t in p["trials"]] for p in DATA["problems"]}


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
    """Recorded FAKE runner: answers each candidate with the H100 measurement of its config; a
    calibration with the replay calibration, a verification with five rounds drawn from the
    contenders' recorded p20..p80 bands (as ``tests.search.agent_replay`` does)."""

    def __init__(self, key: str) -> None:
        self.by_config = {(t["backend"], config_key(t["config"])): _measurement(t)
                          for t in PROBLEMS[key]}

    def run(self, candidate: Candidate) -> Measurement:
        if candidate.task == Task.CALIBRATE.value:
            cal = H100_REPLAY_CALIBRATION
            return Measurement(Status.OK, median_us=700.0, reps=10, bench_s=1.0,
                               extra={"bandwidth_gbs": cal.bandwidth_gbs,
                                      "peak_tflops": dict(cal.peak_tflops)})
        if candidate.task == Task.VERIFY.value:
            lib, cus = (self.by_config[(candidate.config[s]["backend"],
                                        config_key(candidate.config[s]["config"]))]
                        for s in ("library", "custom"))
            return Measurement(Status.OK, median_us=cus.median_us, reps=5, bench_s=1.0,
                               extra={"library_us": list(_rounds(lib)),
                                      "custom_us": list(_rounds(cus))})
        return self.by_config[(candidate.backend, candidate.config_key)]


def _rounds(m: Measurement) -> tuple[float, ...]:
    return verify_rounds(m.median_us, m.p20_us, m.p80_us)


class RecordedTuner:
    """Proposes the recorded configurations of one tier in recorded order (a replay of the
    real search, split the way the decision loop splits it)."""

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


def _run_service(tmp_path: Path, key: str, policy: dict[str, Any]) -> tuple[dict[str, Any],
                                                                            dict[str, Any]]:
    configs = [t["config"] for t in PROBLEMS[key] if t["backend"] == "triton"]
    settings = ServiceSettings(database_url=f"sqlite:///{tmp_path / 'svc.db'}")

    def tuner(url: str, problem: GemmProblem, gpu: str, limits: Any, seed: int,
              tier: str | None, **tier_args: Any) -> RecordedTuner:
        return RecordedTuner([c for c in configs if tier_of(c) == tier])

    app = create_app(settings, tuner_factory=tuner)
    problem = _problem(key)
    with TestClient(app) as http:
        client = KernelSearchClient("http://testserver", http_client=http)
        job = client.submit_job(problem.to_dict(), budget={"max_trials": 64}, policy=policy)
        # cc 8.0: the recording has no Hopper-variant trials, so that tier must not apply
        device = Device(gpu_model=GPU, mode="cuda", sm_count=132, cc="8.0",
                        smem_per_block=232_448, memory_bytes=80 << 30,
                        backends=("cublas", "triton"))
        WorkerLoop(client, RecordedRunner(key), device, batch=8, poll_s=0.01).run(
            idle_exit_s=0.2)
        final = client.get_job(job["id"])
        best = client.best(**problem.to_dict(), gpu=GPU)
    return final, best


@pytest.mark.parametrize("key", ["gemm:b1:m4096:n4096:k4096:bf16:bf16:fp32:rr",
                                 "gemm:b1:m128:n14336:k4096:bf16:bf16:fp32:rr",
                                 "gemm:b1:m1000:n3000:k2000:bf16:bf16:fp32:rr",
                                 "gemm:b1:m64:n64:k65536:bf16:bf16:fp32:rr"])
@pytest.mark.parametrize("mode", ["agent", "full"])
def test_service_decides_as_the_agent_on_recorded_results(tmp_path: Path, key: str,
                                                          mode: str) -> None:
    """The whole path (service, worker loop, tiers, verification) reaches the decision the pure
    agent reaches on the same recorded results."""
    policy = Policy(full_search=mode == "full")
    expected = run_shape(key, policy, window=8)
    final, best = _run_service(tmp_path, key, policy.to_dict())
    assert final["status"] == "done" and final["stage"] == "decided"
    d = final["decision"]
    assert d["verdict"] == str(expected.verdict)
    # Trials still out when a tier stops early are measured anyway in the service (the
    # replay completes each trial at once), so the counts agree up to a window.
    window = ServiceSettings().window
    assert abs(d["spend"]["custom"]["trials"] - expected.spend["custom"]["trials"]) <= window
    _, cublas, best_triton = _recorded(key)
    assert final["library_best"]["median_us"] == pytest.approx(cublas)
    if mode == "full":
        assert final["custom_best"]["median_us"] == pytest.approx(best_triton)
    chosen = "triton" if d["chosen"] == "custom" else "cublas"
    assert best["backend"] == chosen and best["decision"]["id"] == d["id"]
    assert final["speedup"] == pytest.approx(cublas / final["best"]["median_us"])
