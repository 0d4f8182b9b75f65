"""A job for an unaligned GEMM through the real service, HTTP and a real worker on the Triton
interpreter: the library stage measures cuBLAS plain and on repaired operands (``repaired``),
the ``repair`` tier runs first, and the decision says which library kernel it weighed.

Nothing is faked; the numbers are a CPU's and mean nothing. SQLite only: the Postgres path of a
whole job is covered by ``test_interpreter_job``."""

from __future__ import annotations

import pytest

from service.local import run_tuning
from service.settings import ServiceSettings

pytestmark = pytest.mark.slow


def test_an_unaligned_job_weighs_the_repaired_library_and_the_repair_tier(tmp_path) -> None:
    # k=36 fp16: rows of A are 72 bytes, not a multiple of 16 (n=40: B's and C's rows are)
    problem = {"kind": "gemm", "m": 24, "n": 40, "k": 36, "dtype": "fp16"}
    url = f"sqlite:///{tmp_path / 'hard.db'}"
    settings = ServiceSettings(database_url=url, lease_seconds=60)
    result = run_tuning(problem, {"max_trials": 2}, database_url=url, interpret=True, batch=2,
                        settings=settings, poll_s=0.2, policy={"force_custom": True})
    job = result.job
    assert job["status"] == "done", job
    d = job["decision"]
    library = {(t["backend"], t["config"].get("b_layout")): t for t in d["library_trials"]}
    assert library[("cublas", None)]["status"] == "ok"
    assert library[("repaired", "row")]["status"] == "ok"  # cuBLAS on the padded copies
    assert library[("repaired", "kmajor")]["status"] == "ok"
    tiers = {t["tier"]: t for t in d["tiers"]}
    assert d["tiers"][0]["tier"] == "repair" and tiers["repair"]["trials"] >= 1
    assert tiers["stream_k"]["reason"].startswith("skipped:")  # 1 tile of 128x128: not stream-K
    assert "aligned copies (repaired" in d["rationale"]
    assert any("rows of A (k=36 fp16)" in n for n in d["notes"])
    assert tiers["repair"]["best_us"] is not None  # a triton_repair kernel ran correctly
    assert job["custom_best"]["backend"] in ("triton_repair", "triton")  # CPU timings decide
