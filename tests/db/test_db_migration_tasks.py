"""Migration 0005: tasks stored as fake backends (0004) move to their own column, and each
decided job's verification rounds land in its decision's evidence. Rows are FAKE."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import command

from db import measurements
from db.engine import Database, make_engine
from db.migrate import alembic_config, current, upgrade

NOW = datetime(2026, 1, 1, 12)
SPEC = {"kind": "gemm", "m": 64, "n": 64, "k": 64, "batch": 1, "dtype": "bf16",
        "out_dtype": "bf16", "acc_dtype": "fp32", "layout_a": "row", "layout_b": "row"}
ROUNDS = {"library_us": [10.0, 10.1, 9.9, 10.0, 10.2], "custom_us": [8.0, 8.1, 7.9, 8.0, 8.2]}


def _t(name: str, *cols: str) -> sa.TableClause:
    json_cols = {"spec", "backends", "config", "env", "extra", "evidence"}
    return sa.table(name, *(sa.column(c, sa.JSON if c in json_cols else None) for c in cols))


def _seed_0004(url: str) -> None:
    """A job at 0004: a calibration, cuBLAS, a Triton trial, their verification, a decision."""
    engine = make_engine(url)
    with engine.begin() as c:
        c.execute(sa.insert(_t("problems", "id", "key", "kind", "spec", "created_at")),
                  [{"id": 1, "key": "gemm:fake", "kind": "gemm", "spec": SPEC,
                    "created_at": NOW}])
        c.execute(sa.insert(_t("jobs", "id", "problem_id", "status", "backends", "seed",
                               "created_at")),
                  [{"id": 1, "problem_id": 1, "status": "done", "backends": ["cublas"],
                    "seed": 0, "created_at": NOW}])
        rows: list[dict[str, Any]] = [
            {"id": 1, "backend": "calibrate", "config": {}, "extra": {"bandwidth_gbs": 1.0}},
            {"id": 2, "backend": "cublas", "config": {}, "extra": None},
            {"id": 3, "backend": "triton", "config": {"BLOCK_M": 64}, "extra": None},
            {"id": 4, "backend": "verify", "config": {"library_id": 2, "custom_id": 3},
             "extra": ROUNDS},
        ]
        c.execute(sa.insert(_t("candidates", "id", "job_id", "problem_id", "backend", "config",
                               "config_key", "status", "attempts", "created_at")),
                  [{"id": r["id"], "job_id": 1, "problem_id": 1, "backend": r["backend"],
                    "config": r["config"], "config_key": str(r["id"]), "status": "done",
                    "attempts": 0, "created_at": NOW} for r in rows])
        c.execute(sa.insert(_t("measurements", "id", "candidate_id", "job_id", "problem_id",
                               "gpu_model", "backend", "config", "config_key", "status",
                               "median_us", "reps", "bench_s", "env", "extra",
                               "created_at")),
                  [{"id": r["id"], "candidate_id": r["id"], "job_id": 1, "problem_id": 1,
                    "gpu_model": "GPU (FAKE)", "backend": r["backend"], "config": r["config"],
                    "config_key": str(r["id"]), "status": "ok", "median_us": 10.0, "reps": 5,
                    "bench_s": 0.5, "env": {}, "extra": r["extra"], "created_at": NOW}
                   for r in rows])
        c.execute(sa.insert(_t("decisions", "id", "problem_id", "job_id", "gpu_model",
                               "verdict", "chosen", "verified", "rationale", "evidence", "env",
                               "created_at")),
                  [{"id": 1, "problem_id": 1, "job_id": 1, "gpu_model": "GPU (FAKE)",
                    "verdict": "custom_wins", "chosen": "custom", "verified": True,
                    "rationale": "fake", "evidence": {"verdict": "custom_wins"}, "env": {},
                    "created_at": NOW}])
    engine.dispose()


def _columns(url: str, table: str, *cols: str) -> list[tuple[Any, ...]]:
    engine = make_engine(url)
    try:
        with engine.connect() as c:
            return [tuple(r) for r in c.execute(sa.select(_t(table, "id", *cols))
                                                 .order_by(sa.column("id")))]
    finally:
        engine.dispose()


def test_tasks_move_out_of_backend_and_back(database_url: str) -> None:
    upgrade(database_url, "0004")
    _seed_0004(database_url)
    upgrade(database_url, "0005")
    assert current(database_url) == "0005"
    moved = [(1, None, "calibrate"), (2, "cublas", None), (3, "triton", None),
             (4, None, "verify")]
    assert _columns(database_url, "candidates", "backend", "task") == moved
    assert [r[:3] for r in _columns(database_url, "measurements", "backend", "task")] == moved
    ((_, evidence),) = _columns(database_url, "decisions", "evidence")
    v = evidence["verification"]
    assert v["library_us"] == ROUNDS["library_us"] and v["custom_us"] == ROUNDS["custom_us"]
    assert (v["library_id"], v["custom_id"], v["rounds"], v["status"]) == (2, 3, 5, "ok")
    assert evidence["verdict"] == "custom_wins"
    upgrade(database_url)  # the ORM below is the head's
    db = Database(database_url)
    try:
        with db.read_session() as s:
            trials, total = measurements.list_trials(s, 1, 50, 0)
    finally:
        db.dispose()
    assert total == 2 and sorted(m.backend for m, _ in trials) == ["cublas", "triton"]

    command.downgrade(alembic_config(database_url), "0004")
    assert _columns(database_url, "candidates", "backend") == [
        (1, "calibrate"), (2, "cublas"), (3, "triton"), (4, "verify")]
    assert _columns(database_url, "measurements", "backend") == [
        (1, "calibrate"), (2, "cublas"), (3, "triton"), (4, "verify")]


def test_a_row_is_a_kernel_or_a_task_never_both(database_url: str) -> None:
    upgrade(database_url, "0004")
    _seed_0004(database_url)
    upgrade(database_url)
    engine = make_engine(database_url)
    try:
        for values in ({"backend": "cublas", "task": "verify"},
                       {"backend": None, "task": None}):
            try:
                with engine.begin() as c:
                    c.execute(sa.update(_t("candidates", "id", "backend", "task"))
                              .where(sa.column("id") == 2).values(**values))
            except sa.exc.IntegrityError:
                continue
            raise AssertionError(f"the check constraint let {values} through")
    finally:
        engine.dispose()
