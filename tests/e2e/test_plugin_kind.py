"""A problem kind added as a plug-in runs end to end: real service, real HTTP, a real worker
with its spawned benchmark child on the Triton interpreter, and the decision loop.

The kind (``tests/plugins/axpy.py``) is known to nothing but this test: the service and the
worker import it because ``KS_PLUGINS`` names it, the child because the worker passes the name
on. Nothing in ``service``, ``db``, ``workers``, ``search`` or ``kernel_templates`` changes for
it. Runs against SQLite and Postgres.
"""

from __future__ import annotations

import pytest

from search.types import INTERPRETER_GPU
from service.local import run_tuning
from service.settings import ServiceSettings
from workers.settings import get_worker_settings

pytestmark = pytest.mark.slow
PLUGIN = "tests.plugins.axpy"


def test_a_plugin_kind_is_tuned_end_to_end(database_url: str, monkeypatch: pytest.MonkeyPatch,
                                           clean_registry: None) -> None:
    monkeypatch.setenv("KS_PLUGINS", PLUGIN)
    get_worker_settings.cache_clear()
    try:
        settings = ServiceSettings(database_url=database_url, lease_seconds=60)
        assert settings.plugin_modules == (PLUGIN,)
        problem = {"kind": "axpy", "n": 3000, "dtype": "fp32", "alpha": 1.5}
        result = run_tuning(problem, {"max_trials": 3}, database_url=database_url,
                            interpret=True, batch=2, settings=settings, poll_s=0.2,
                            policy={"force_custom": True})
    finally:
        get_worker_settings.cache_clear()
    job = result.job
    assert job["status"] == "done", job
    assert job["problem_key"] == "axpy:n3000:fp32:a1.5"
    assert result.gpu_model == INTERPRETER_GPU
    decision = job["decision"]
    assert decision["verdict"] in ("custom_wins", "library_wins_after_search")
    assert decision["baseline"] == "torch"
    assert decision["spend"]["calibration"]["gpu_s"] > 0
    assert decision["spend"]["custom"]["trials"] == 3
    # a kind without a library-side search: its library trials are the first stage's alone
    assert decision["spend"]["cutlass"]["trials"] == 0
    assert decision["spend"]["library"]["trials"] == 1
    assert [t["search"] for t in decision["library_trials"]] == [False]
    assert decision["attainable_us"] is None  # the CPU's calibration is no roofline
    # the library side is the kind's torch kernel, the custom side its Triton template, every
    # one checked against the kind's float64 reference before it was timed
    assert job["library_best"]["backend"] == "torch"
    assert job["custom_best"]["backend"] == "triton"
    assert set(job["custom_best"]["config"]) == {"BLOCK", "num_warps"}
    assert job["custom_best"]["median_us"] > 0 and job["library_best"]["median_us"] > 0
    # GET /v1/best reads the kind's own fields from the query string
    best = result.best
    assert best is not None and best["gpu"] == INTERPRETER_GPU
    assert best["backend"] == job["best"]["backend"]
