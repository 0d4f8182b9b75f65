"""Migration 0007: ``measurements.precision``, ``decisions.precision`` and ``rel_error``,
backfilled from what the rows already say (tf32 configurations, the problem's dtype, the
pick's measured error). Rows are FAKE."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import command

from db.engine import make_engine
from db.migrate import alembic_config, current, upgrade
from search.types import config_key

NOW = datetime(2026, 1, 1, 12)
SPEC = {"kind": "gemm", "m": 64, "n": 64, "k": 64, "batch": 1, "dtype": "fp32",
        "out_dtype": "fp32", "acc_dtype": "fp32", "layout_a": "row", "layout_b": "row"}
#: (candidate id, backend, config, rel_error)
KERNELS: list[tuple[int, str, dict[str, Any], float]] = [
    (1, "cublas", {}, 1e-6),
    (2, "cublas", {"allow_tf32": True}, 3e-4),
    (3, "triton", {"BLOCK_M": 64, "INPUT_PRECISION": "tf32"}, 8e-4),
    (4, "triton", {"BLOCK_M": 64, "INPUT_PRECISION": "ieee"}, 2e-6),
]


def _t(name: str, *cols: str) -> sa.TableClause:
    json_cols = {"spec", "backends", "config", "env", "evidence"}
    return sa.table(name, *(sa.column(c, sa.JSON if c in json_cols else None) for c in cols))


def _seed_0006(url: str) -> None:
    engine = make_engine(url)
    with engine.begin() as c:
        c.execute(sa.insert(_t("problems", "id", "key", "kind", "spec", "created_at")),
                  [{"id": 1, "key": "gemm:fake", "kind": "gemm", "spec": SPEC,
                    "created_at": NOW}])
        c.execute(sa.insert(_t("jobs", "id", "problem_id", "status", "backends", "seed",
                               "created_at")),
                  [{"id": j, "problem_id": 1, "status": "done", "backends": ["cublas"],
                    "seed": 0, "created_at": NOW} for j in (1, 2)])
        c.execute(sa.insert(_t("candidates", "id", "job_id", "problem_id", "backend", "config",
                               "config_key", "status", "attempts", "created_at")),
                  [{"id": i, "job_id": 1, "problem_id": 1, "backend": b, "config": cfg,
                    "config_key": config_key(cfg), "status": "done", "attempts": 0,
                    "created_at": NOW} for i, b, cfg, _ in KERNELS])
        c.execute(sa.insert(_t("measurements", "id", "candidate_id", "job_id", "problem_id",
                               "gpu_model", "backend", "config", "config_key", "status",
                               "median_us", "reps", "rel_error", "env", "created_at")),
                  [{"id": i, "candidate_id": i, "job_id": 1, "problem_id": 1,
                    "gpu_model": "GPU (FAKE)", "backend": b, "config": cfg,
                    "config_key": config_key(cfg), "status": "ok", "median_us": 10.0,
                    "reps": 5, "rel_error": err, "env": {}, "created_at": NOW}
                   for i, b, cfg, err in KERNELS])
        decisions = [(1, 1, "library", 1), (2, 2, "custom", 3)]  # (id, job, chosen, pick)
        c.execute(sa.insert(_t("decisions", "id", "problem_id", "job_id", "gpu_model",
                               "verdict", "chosen", "verified", "rationale", "evidence", "env",
                               "created_at")),
                  [{"id": d, "problem_id": 1, "job_id": j, "gpu_model": "GPU (FAKE)",
                    "verdict": "custom_wins", "chosen": chosen, "verified": True,
                    "rationale": "fake", "evidence": {chosen: {"candidate_id": pick}},
                    "env": {}, "created_at": NOW} for d, j, chosen, pick in decisions])
    engine.dispose()


def _rows(url: str, table: str, *cols: str) -> list[tuple[Any, ...]]:
    engine = make_engine(url)
    try:
        with engine.connect() as c:
            return [tuple(r) for r in c.execute(sa.select(_t(table, "id", *cols))
                                                 .order_by(sa.column("id")))]
    finally:
        engine.dispose()


def test_precisions_are_backfilled_and_dropped_again(database_url: str) -> None:
    upgrade(database_url, "0006")
    _seed_0006(database_url)
    upgrade(database_url)
    assert current(database_url) == "0012"
    assert _rows(database_url, "measurements", "precision") == [
        (1, None), (2, "tf32"), (3, "tf32"), (4, None)]
    assert _rows(database_url, "decisions", "precision", "rel_error") == [
        (1, "fp32", 1e-6), (2, "tf32", 8e-4)]
    command.downgrade(alembic_config(database_url), "0006")
    engine = make_engine(database_url)
    try:
        cols = {c["name"] for c in sa.inspect(engine).get_columns("decisions")}
    finally:
        engine.dispose()
    assert "precision" not in cols and "rel_error" not in cols
