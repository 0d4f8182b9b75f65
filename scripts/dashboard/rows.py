"""Rows of a SYNTHETIC database, written in bulk (``INSERT`` of many rows per statement),
tables in foreign-key order; explicit ids, so Postgres's sequences are moved past them at the
end."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, func, select, text
from sqlalchemy.engine import Engine

from db.models import (
    CalibrationRow,
    CandidateRow,
    DecisionRow,
    JobRow,
    LeaseRow,
    MeasurementRow,
    ProblemRow,
    WorkerRow,
)
from scripts.dashboard.replay import JobRun, Stored
from search import decision, kinds
from search.types import Problem, config_key
from service.agent_loop import stored_evidence

#: tables in the order their rows may be inserted
ORDER: tuple[Table, ...] = tuple(r.__table__ for r in (  # type: ignore[misc]
    WorkerRow, ProblemRow, JobRow, CalibrationRow, LeaseRow, CandidateRow, MeasurementRow,
    DecisionRow))
SEQUENCED = ("workers", "problems", "jobs", "calibrations", "candidates", "measurements",
             "decisions")


class Writer:
    """Buffers rows per table; :meth:`flush` writes them all, parents first."""

    def __init__(self, engine: Engine, chunk: int = 20_000) -> None:
        self.engine = engine
        self.chunk = chunk
        self.rows: dict[str, list[dict[str, Any]]] = {t.name: [] for t in ORDER}
        self.written: dict[str, int] = {t.name: 0 for t in ORDER}

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows[table].append(row)

    def maybe_flush(self) -> None:
        """Flush once a chunk of measurements is buffered (call between jobs: a flush in the
        middle of one would write candidates before their job)."""
        if len(self.rows["measurements"]) >= self.chunk:
            self.flush()

    def flush(self) -> None:
        with self.engine.begin() as conn:
            for table in ORDER:
                rows = self.rows[table.name]
                for i in range(0, len(rows), self.chunk):
                    conn.execute(table.insert(), rows[i:i + self.chunk])
                self.written[table.name] += len(rows)
                rows.clear()

    def update(self, table: Table, key: str, rows: Iterable[dict[str, Any]]) -> None:
        """``UPDATE table SET ... WHERE key = :key`` for each row (after a flush)."""
        rows = list(rows)
        if not rows:
            return
        cols = [c for c in rows[0] if c != key]
        sets = ", ".join(f"{c} = :{c}" for c in cols)
        with self.engine.begin() as conn:
            conn.execute(text(f"UPDATE {table.name} SET {sets} WHERE {key} = :{key}"), rows)

    def finish(self) -> None:
        """On Postgres: move the sequences past the ids written, and ``VACUUM ANALYZE`` (a
        bulk load leaves the planner without statistics until autovacuum comes by)."""
        if self.engine.dialect.name != "postgresql":
            return
        with self.engine.begin() as conn:
            for name in SEQUENCED:
                top = conn.scalar(select(func.max(text("id"))).select_from(text(name))) or 0
                conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                                  f"{max(int(top), 1)})"))
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))


def problem_row(pid: int, problem: Problem, at: datetime) -> dict[str, Any]:
    return {"id": pid, "key": problem.key(), "kind": problem.kind, "spec": problem.to_dict(),
            "created_at": at, "label": kinds.get(problem.kind).shape_label(problem)[:200],
            "dtype": problem.dtype}


def job_rows(w: Writer, job_id: int, pid: int, problem: Problem, gpu: str, policy: Any,
             run: JobRun, start: datetime, worker_id: int, about: str,
             max_trials: int) -> tuple[datetime, int | None]:
    """Write a finished job (its candidates, measurements and decision); returns when it
    ended and its decision's id (None: every candidate failed)."""
    kind = kinds.get(problem.kind)
    env = {"synthetic": True, "replays": about, "gpu": gpu}
    at = start
    for s in run.stored:
        at += timedelta(seconds=s.rec.gpu_s + 0.05)
        stored_rows(w, s, job_id, pid, gpu, worker_id, env, at)
    d = run.decision
    pick = d.custom if d.chosen == "custom" else d.library
    status = "done" if pick is not None else "failed"
    w.add("jobs", {
        "id": job_id, "problem_id": pid, "status": status, "max_trials": max_trials,
        "max_seconds": None, "backends": list(kind.backends), "target_gpu": None,
        "bound_gpu": gpu, "bound_backends": list(kind.backends), "seed": 0,
        "policy": policy.to_dict(), "stage": run.stage, "exhausted_tiers": [],
        "created_at": start - timedelta(seconds=2), "started_at": start, "finished_at": at,
        "error": None if pick else "no candidate ran ok"})
    if pick is None:
        return at, None
    rf = d.roofline
    w.add("decisions", {
        "id": job_id, "problem_id": pid, "job_id": job_id, "gpu_model": gpu,
        "verdict": str(d.verdict), "chosen": d.chosen, "backend": pick.backend,
        "config": dict(pick.config), "median_us": pick.median_us, "speedup": d.speedup,
        "bound": rf.bound if rf else None, "attainable_us": rf.attainable_us if rf else None,
        "verified": d.verified, "rationale": d.rationale,
        "evidence": stored_evidence(d, run.verification), "env": env, "created_at": at,
        "superseded_at": None,
        "saved_gpu_s": decision.early_stop_savings(d.spend, max_trials,
                                                   bool(d.policy.get("full_search")))})
    return at, job_id


def stored_rows(w: Writer, s: Stored, job_id: int, pid: int, gpu: str, worker_id: int,
            env: dict[str, Any], at: datetime) -> None:
    r = s.rec
    ok = r.status == "ok"
    config = dict(r.config)
    w.add("candidates", {
        "id": s.id, "job_id": job_id, "problem_id": pid, "backend": s.backend,
        "task": s.task, "config": config, "config_key": config_key(config),
        "trial_number": s.trial_number, "tier": s.tier,
        "status": "done" if ok else "failed", "attempts": 0, "lease_id": None,
        "lease_expires_at": None, "worker_id": worker_id,
        "failure_reason": None if ok else (f"{r.status}: {r.error}" if r.error else r.status),
        "created_at": at - timedelta(seconds=r.gpu_s + 0.05)})
    reps = min(500, max(1, int(50_000 / r.median_us))) if r.median_us else (5 if ok else 0)
    w.add("measurements", {
        "id": s.id, "candidate_id": s.id, "job_id": job_id, "problem_id": pid,
        "gpu_model": gpu, "backend": s.backend, "task": s.task, "config": config,
        "config_key": config_key(config), "status": r.status, "median_us": r.median_us,
        "p20_us": r.p20_us, "p80_us": r.p80_us, "reps": reps, "rel_error": r.rel_error,
        "compile_s": r.compile_s, "bench_s": r.bench_s, "error": r.error, "env": env,
        "extra": s.extra, "worker_id": worker_id, "created_at": at})
