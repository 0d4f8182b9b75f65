"""The real optimizer (``search.optimizer.GemmTuner``) behind the service, across a restart.

The worker side still reports FAKE measurements; what is real is the Optuna study in the same
database as the service's tables.
"""

from __future__ import annotations

from typing import Any

import optuna
from fastapi.testclient import TestClient
from optuna.trial import TrialState

from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_tuner import study_name
from service.settings import ServiceSettings
from service.tuning import optuna_tuner

PROBLEM = {"kind": "gemm", "m": 512, "n": 512, "k": 512, "dtype": "fp16"}
GPU = "NVIDIA H100 80GB HBM3"


def _fake_time(config: dict[str, Any]) -> float:
    """FAKE timing model: bigger tiles and more stages are faster, split-K costs."""
    return 100.0 / (config["BLOCK_M"] * config["BLOCK_N"] / 4096) ** 0.5 \
        + 2.0 * config["SPLIT_K"] + 1.0 / config["num_stages"]


def _run_job(http: TestClient, driver_cls: Any, trials: int) -> tuple[dict[str, Any],
                                                                      list[dict[str, Any]]]:
    driver = driver_cls(http)
    job = driver.submit({"max_trials": trials}, problem=PROBLEM)
    worker = driver.register("h100", gpu=GPU)
    configs: list[dict[str, Any]] = []

    def timing(c: dict[str, Any]) -> float:
        if c["backend"] == "cublas":
            return 30.0
        configs.append(c["config"])
        return _fake_time(c["config"])

    driver.run_all(worker, median_of=timing)
    return driver.job(job["id"]), configs


def test_study_survives_restart(make_app: Any, database_url: str, driver: Any,
                                release_optuna: Any, secret_keeper: Any) -> None:
    settings = ServiceSettings(database_url=database_url, window=4)
    driver_cls = type(driver)
    with secret_keeper(TestClient(make_app(settings, tuner_factory=optuna_tuner))) as http:
        first, first_configs = _run_job(http, driver_cls, 6)
    # 6 budgeted; the Hopper tier's one trial is skipped (its bounded gain cannot close the
    # FAKE gap to the library), so 5 run
    assert first["status"] == "done" and first["progress"]["trials_done"] == 5
    assert len(first_configs) == 5
    release_optuna()  # a new process: nothing cached

    storage = optuna.storages.RDBStorage(database_url)
    complete = _complete(storage)
    told = {round(t.value, 6) for t in complete}
    assert {round(_fake_time(c), 6) for c in first_configs} <= told
    before = len(complete)
    storage.engine.dispose()

    with secret_keeper(TestClient(make_app(settings, tuner_factory=optuna_tuner))) as http:
        second, second_configs = _run_job(http, driver_cls, 4)
        trials = http.get(f"/v1/problems/{first['problem_id']}/trials",
                          params={"limit": 500}).json()
    assert second["status"] == "done" and second["problem_id"] == first["problem_id"]
    keys = [tuple(sorted(c.items())) for c in first_configs + second_configs]
    assert len(keys) == len(set(keys)), "a measured configuration was proposed again"
    # Triton trials and one cuBLAS baseline per job
    assert trials["total"] == len(first_configs) + len(second_configs) + 2
    storage = optuna.storages.RDBStorage(database_url)
    # Seeds wait in the studies as enqueued trials, so count the finished ones.
    assert len(_complete(storage)) >= before + 4
    storage.engine.dispose()


def _complete(storage: optuna.storages.RDBStorage) -> list[optuna.trial.FrozenTrial]:
    """Finished trials of the problem's studies, one per search tier that ran."""
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    out = []
    for tier in ("tiles", "split_k", "hopper"):
        name = study_name(GemmProblem.from_dict(PROBLEM), GPU, tier)
        if name in names:
            study = optuna.load_study(study_name=name, storage=storage)
            out += study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert out, f"no study of the problem among {sorted(names)}"
    return out
