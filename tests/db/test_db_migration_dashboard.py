"""Migration 0008: the running totals are filled from the measurements, problems get their
shape label and dtype, decisions what their early stops saved; the downgrade drops them. Rows
are FAKE."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from db import summaries
from db.engine import Database, make_engine
from db.migrate import alembic_config, upgrade
from search.decision import early_stop_savings

NOW = datetime(2026, 1, 1, 12)
GPUS = ("GPU A (FAKE)", "GPU B (FAKE)")
SPEC = {"kind": "gemm", "m": 64, "n": 48, "k": 80, "batch": 1, "dtype": "fp16",
        "out_dtype": "fp16", "acc_dtype": "fp32", "layout_a": "row", "layout_b": "row"}
SPEND = {"library": {"trials": 1, "gpu_s": 0.5}, "cutlass": {"trials": 0, "gpu_s": 0.0},
         "custom": {"trials": 2, "gpu_s": 3.0}}
JSON_COLS = {"spec", "backends", "config", "env", "extra", "evidence"}


def _t(name: str, *cols: str) -> sa.TableClause:
    return sa.table(name, *(sa.column(c, sa.JSON if c in JSON_COLS else None) for c in cols))


def _seed_0006(url: str) -> list[dict[str, Any]]:
    """Two problems, one measured on two GPU models: kernels ok and failed, and a task."""
    rows = [  # (id, problem, gpu, backend, task, status, compile_s, bench_s, at)
        (1, 1, GPUS[0], None, "calibrate", "ok", None, 30.0, 0),
        (2, 1, GPUS[0], "cublas", None, "ok", None, 0.5, 1),
        (3, 1, GPUS[0], "triton", None, "ok", 1.0, 0.5, 2),
        (4, 1, GPUS[0], "triton", None, "timeout", None, 1.5, 3),
        (5, 1, GPUS[1], "cublas", None, "ok", 0.25, 0.25, 4),
        (6, 2, GPUS[0], "cublas", None, "ok", None, None, 5),
    ]
    engine = make_engine(url)
    with engine.begin() as c:
        c.execute(sa.insert(_t("problems", "id", "key", "kind", "spec", "created_at")),
                  [{"id": 1, "key": "gemm:fake:1", "kind": "gemm", "spec": SPEC,
                    "created_at": NOW},
                   {"id": 2, "key": "mystery:1", "kind": "mystery", "spec": {"kind": "mystery"},
                    "created_at": NOW}])
        c.execute(sa.insert(_t("jobs", "id", "problem_id", "status", "backends", "seed",
                               "created_at", "max_trials")),
                  [{"id": 1, "problem_id": 1, "status": "done", "backends": ["cublas"],
                    "seed": 0, "created_at": NOW, "max_trials": 8},
                   {"id": 2, "problem_id": 2, "status": "done", "backends": ["cublas"],
                    "seed": 0, "created_at": NOW, "max_trials": None}])
        c.execute(sa.insert(_t("measurements", "id", "job_id", "problem_id", "gpu_model",
                               "backend", "task", "config", "config_key", "status",
                               "compile_s", "bench_s", "reps", "env", "created_at")),
                  [{"id": i, "job_id": p, "problem_id": p, "gpu_model": g, "backend": b,
                    "task": t, "config": {}, "config_key": str(i), "status": s,
                    "compile_s": cs, "bench_s": bs, "reps": 1, "env": {},
                    "created_at": NOW + timedelta(seconds=at)}
                   for i, p, g, b, t, s, cs, bs, at in rows])
        c.execute(sa.insert(_t("decisions", "id", "problem_id", "job_id", "gpu_model",
                               "verdict", "chosen", "verified", "rationale", "evidence", "env",
                               "created_at")),
                  [{"id": j, "problem_id": j, "job_id": j, "gpu_model": GPUS[0],
                    "verdict": "custom_wins", "chosen": "custom", "verified": True,
                    "rationale": "fake", "evidence": {"spend": SPEND, "policy": {}}, "env": {},
                    "created_at": NOW} for j in (1, 2)])
    engine.dispose()
    return rows


def _select(url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = make_engine(url)
    try:
        with engine.connect() as c:
            return [tuple(r) for r in c.execute(sa.text(sql))]
    finally:
        engine.dispose()


def test_0008_fills_totals_labels_and_savings(database_url: str) -> None:
    upgrade(database_url, "0006")
    _seed_0006(database_url)
    upgrade(database_url, "0008")
    totals = _select(database_url, "SELECT problem_id, gpu_model, trials, failed, gpu_s "
                                   "FROM tuning_summaries ORDER BY problem_id, gpu_model")
    assert totals == [(1, GPUS[0], 3, 1, pytest.approx(33.5)), (1, GPUS[1], 1, 0, 0.5),
                      (2, GPUS[0], 1, 0, 0.0)]
    # a kind not loaded here keeps no label (the dashboard shows its key)
    assert _select(database_url, "SELECT id, label, dtype FROM problems ORDER BY id") == [
        (1, "64x48x80", "fp16"), (2, None, None)]
    saved = _select(database_url, "SELECT id, saved_gpu_s FROM decisions ORDER BY id")
    assert saved == [(1, early_stop_savings(SPEND, 8, False)), (2, None)]
    assert saved[0][1] == pytest.approx(6 * 1.5)

    # what the migration computed is what db.summaries rebuilds
    db = Database(database_url)
    try:
        with db.session() as s:
            summaries.rebuild(s)
    finally:
        db.dispose()
    assert _select(database_url, "SELECT problem_id, gpu_model, trials, failed, gpu_s "
                                 "FROM tuning_summaries ORDER BY problem_id, gpu_model") == totals

    command.downgrade(alembic_config(database_url), "0006")
    engine = make_engine(database_url)
    try:
        assert "tuning_summaries" not in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()
    with pytest.raises(sa.exc.DBAPIError):
        _select(database_url, "SELECT label FROM problems")
