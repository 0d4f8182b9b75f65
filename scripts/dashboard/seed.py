"""Build a SYNTHETIC database for the dashboard from recorded measurements.

    python -m scripts.dashboard.seed sqlite:////tmp/dash.db --problems 10000 \
        --measurements 1000000

GEMM and attention problems on three synthetic GPU models, each tuned by a job whose trials
replay recorded H100 measurements scaled to its shape and GPU and perturbed
(``scripts.dashboard.sources``), decided by the service's own decision loop
(``scripts.dashboard.replay``). Every problem gets a decision-loop job per GPU model it is on;
full-search jobs (reopened, their decisions superseding the first) are added until the database
holds ``--measurements`` measurements. Then a few jobs queued and running, and workers with a
lease. Every stored ``env`` says ``"synthetic": true`` and which recording it replays, and the
GPU models are named "(synthetic)". The database must be empty (migrated or not).
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select

from db import summaries
from db.engine import Database
from db.migrate import upgrade
from db.models import DecisionRow, ProblemRow
from scripts.dashboard import rows as R
from scripts.dashboard.replay import Replay
from scripts.dashboard.sources import Gpu, Recordings, Source, gpus
from search import kinds
from search.decision import Policy
from search.types import Problem, ProblemError, parse_problem

GEMM_DIMS = (16, 32, 64, 128, 256, 512, 768, 1000, 1024, 1536, 2048, 3000, 3072, 4096, 5120,
             6144, 8192, 11008, 14336, 16384, 32768)
GEMM_DTYPES = (("bf16", 0.55), ("fp16", 0.25), ("fp32", 0.12), ("fp8_e4m3", 0.08))
MAX_BYTES = 64 << 30
MAX_TRIALS = 64


def gemm_problem(rng: random.Random) -> Problem:
    m, n, k = (rng.choice(GEMM_DIMS) for _ in range(3))
    dtype = rng.choices([d for d, _ in GEMM_DTYPES], [w for _, w in GEMM_DTYPES])[0]
    spec: dict[str, Any] = {"kind": "gemm", "m": m, "n": n, "k": k, "dtype": dtype}
    if dtype == "fp8_e4m3":
        spec["layout_b"] = "col"
    return parse_problem(spec)


def attention_problem(rng: random.Random) -> Problem:
    heads = rng.choice((8, 16, 32, 64))
    s_q = rng.choice((1, 8, 16, 128, 512, 1024, 2048, 4096, 8192, 16384))
    s_kv = s_q if s_q >= 128 and rng.random() < 0.7 else rng.choice(
        (512, 1024, 2048, 4096, 8192, 16384, 32768))
    return parse_problem({
        "kind": "attention", "batch": rng.choice((1, 2, 4, 8, 16, 32, 64)), "heads": heads,
        "kv_heads": heads // rng.choice((1, 4, 8)), "s_q": s_q, "s_kv": max(s_kv, s_q),
        "d": rng.choice((64, 128)), "causal": rng.random() < 0.5,
        "dtype": rng.choice(("bf16", "bf16", "fp16"))})


def problems(n: int, attention_share: float, rng: random.Random) -> list[Problem]:
    """``n`` distinct problems the service would accept."""
    out: dict[str, Problem] = {}
    while len(out) < n:
        p = attention_problem(rng) if rng.random() < attention_share else gemm_problem(rng)
        kind = kinds.get(p.kind)
        try:
            kind.check_served(p, kind.backends)
        except ProblemError:
            continue
        if p.min_bytes <= MAX_BYTES and p.flops < 5e14:
            out.setdefault(p.key(), p)
    return list(out.values())


@dataclass
class Pair:
    """A problem on one GPU model: what its jobs share."""

    pid: int
    problem: Problem
    gpu: Gpu
    seed: int
    start: datetime
    known: set[str] = field(default_factory=set)
    decision_id: int | None = None
    ended: datetime | None = None

    def source(self, recordings: Recordings) -> Source:
        rng = random.Random(self.seed)  # the same answers for every job of the pair
        if self.problem.kind == "attention":
            return recordings.attention_source(self.problem, self.gpu, rng)  # type: ignore
        return recordings.gemm_source(self.problem, self.gpu, rng)  # type: ignore


class Seeder:
    def __init__(self, url: str, seed: int, now: datetime) -> None:
        self.db = Database(url)
        self.writer = R.Writer(self.db.engine)
        self.rng = random.Random(seed)
        self.now = now
        self.recordings = Recordings()
        self.gpus = gpus()
        self.job_ids = itertools.count(1)
        self.cand_ids = itertools.count(1)
        self.calibrated: set[str] = set()
        self.workers: dict[str, list[int]] = {}
        self.superseded: list[dict[str, Any]] = []

    def run(self, n_problems: int, target: int, attention_share: float, active: int) -> None:
        self._workers()
        pairs = self._problems(n_problems, attention_share)
        t0 = time.monotonic()
        for i, pair in enumerate(pairs):
            self._job(pair, Policy())
            if i % 2000 == 0:
                self._progress("decision-loop jobs", i, len(pairs), t0)
        order = list(pairs)
        self.rng.shuffle(order)
        for i, pair in enumerate(order):
            if self._measurements() >= target:
                break
            self._job(pair, Policy(full_search=True))
            if i % 2000 == 0:
                self._progress("full-search jobs", i, len(pairs), t0)
        self._active(pairs, active)
        self.writer.flush()
        self.writer.update(DecisionRow.__table__, "id", self.superseded)
        with self.db.session() as s:
            summaries.rebuild(s)
        self.writer.finish()
        self._progress("done", len(pairs), len(pairs), t0)

    def _measurements(self) -> int:
        return self.writer.written["measurements"] + len(self.writer.rows["measurements"])

    def _progress(self, what: str, i: int, n: int, t0: float) -> None:
        print(f"{what}: {i}/{n} pairs, {self._measurements()} measurements, "
              f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)

    def _workers(self) -> None:
        wid = itertools.count(1)
        for gpu in self.gpus:
            slug = gpu.name.split(" (")[0].replace("NVIDIA ", "").replace(" ", "-").lower()
            for i in range(2):
                worker_id = next(wid)
                self.workers.setdefault(gpu.name, []).append(worker_id)
                quiet = 3 * 3600 if (gpu is self.gpus[1] and i == 1) else self.rng.uniform(1, 40)
                self.writer.add("workers", {
                    "id": worker_id, "name": f"synthetic-{slug}-{i}", "gpu_model": gpu.name,
                    "device": {**gpu.device, "backends": list(_backends())},
                    "registered_at": self.now - timedelta(days=95),
                    "last_seen": self.now - timedelta(seconds=quiet)})

    def _problems(self, n: int, attention_share: float) -> list[Pair]:
        pairs = []
        for pid, problem in enumerate(problems(n, attention_share, self.rng), start=1):
            created = self.now - timedelta(days=self.rng.uniform(2, 90))
            self.writer.add("problems", R.problem_row(pid, problem, created))
            on = [self.gpus[0]] + [g for g in self.gpus[1:] if self.rng.random() < 0.6]
            for gpu in on:
                start = created + timedelta(minutes=self.rng.uniform(1, 600))
                pairs.append(Pair(pid, problem, gpu, self.rng.getrandbits(32), start))
        pairs.sort(key=lambda p: p.start)
        return pairs

    def _job(self, pair: Pair, policy: Policy) -> None:
        gpu = pair.gpu
        source = pair.source(self.recordings)
        run = Replay(pair.problem, policy, gpu, source, max_trials=MAX_TRIALS,
                     ids=self.cand_ids, known=pair.known,
                     calibrated=gpu.name in self.calibrated, rng=self.rng).run()
        job_id = next(self.job_ids)
        start = pair.ended + timedelta(days=self.rng.uniform(0.5, 20)) if pair.ended \
            else pair.start
        start = min(start, self.now - timedelta(hours=1))
        if any(s.task == "calibrate" for s in run.stored):
            self._calibration(gpu, job_id, start)
        worker = self.rng.choice(self.workers[gpu.name])
        ended, decision_id = R.job_rows(self.writer, job_id, pair.pid, pair.problem, gpu.name,
                                        policy, run, start, worker, source.about, MAX_TRIALS)
        if decision_id is not None:
            if pair.decision_id is not None:
                self.superseded.append({"id": pair.decision_id, "superseded_at": ended})
            pair.decision_id = decision_id
        pair.ended = ended
        self.writer.maybe_flush()

    def _calibration(self, gpu: Gpu, job_id: int, at: datetime) -> None:
        self.calibrated.add(gpu.name)
        cal = gpu.calibration
        self.writer.add("calibrations", {
            "id": len(self.calibrated), "gpu_model": gpu.name,
            "bandwidth_gbs": cal.bandwidth_gbs, "peak_tflops": dict(cal.peak_tflops),
            "peak_low_tflops": {k: v * 0.985 for k, v in cal.peak_tflops.items()},
            "env": dict(cal.env), "stale": False, "job_id": job_id, "worker_id": None,
            "bench_s": 31.0, "created_at": at})

    def _active(self, pairs: list[Pair], n: int) -> None:
        """``n`` jobs left in flight: half running (some trials measured, some leased to a
        worker of their GPU model), half queued."""
        for i, pair in enumerate(self.rng.sample(pairs, n)):
            job_id = next(self.job_ids)
            policy = Policy(force_custom=True)
            created = self.now - timedelta(minutes=self.rng.uniform(1, 30))
            base = {"id": job_id, "problem_id": pair.pid, "max_trials": MAX_TRIALS,
                    "max_seconds": None, "backends": list(kinds.get(pair.problem.kind).backends),
                    "target_gpu": pair.gpu.name, "seed": 0, "policy": policy.to_dict(),
                    "exhausted_tiers": [], "created_at": created, "finished_at": None,
                    "error": None}
            if i % 2:
                self.writer.add("jobs", {**base, "status": "queued", "bound_gpu": None,
                                         "bound_backends": None, "stage": None,
                                         "started_at": None})
                continue
            self._running(pair, base, created)

    def _running(self, pair: Pair, base: dict[str, Any], created: datetime) -> None:
        run = Replay(pair.problem, Policy(force_custom=True), pair.gpu,
                     pair.source(self.recordings), max_trials=MAX_TRIALS, ids=self.cand_ids,
                     known=set(pair.known), calibrated=True, rng=self.rng).run()
        job_id, gpu, worker = base["id"], pair.gpu.name, self.workers[pair.gpu.name][0]
        library = [s for s in run.stored if s.task is None and s.tier is None]
        custom = [s for s in run.stored if s.task is None and s.tier is not None]
        done, leased = library + custom[:len(custom) // 2], custom[len(custom) // 2:][:4]
        self.writer.add("jobs", {**base, "status": "running", "bound_gpu": gpu,
                                 "bound_backends": base["backends"], "stage": "custom",
                                 "started_at": created})
        env = {"synthetic": True, "replays": "a running job (force_custom)", "gpu": gpu}
        at = created
        for s in done:
            at += timedelta(seconds=s.rec.gpu_s)
            R.stored_rows(self.writer, s, job_id, pair.pid, gpu, worker, env, min(at, self.now))
        lease = f"00000000-0000-4000-8000-{job_id:012d}"
        expires = self.now + timedelta(minutes=10)
        self.writer.add("leases", {"id": lease, "worker_id": worker, "created_at": self.now,
                                   "expires_at": expires})
        for s in leased:
            self.writer.add("candidates", {
                "id": s.id, "job_id": job_id, "problem_id": pair.pid, "backend": s.backend,
                "task": None, "config": dict(s.rec.config),
                "config_key": R.config_key(dict(s.rec.config)), "trial_number": s.trial_number,
                "tier": s.tier, "status": "leased", "attempts": 0, "lease_id": lease,
                "lease_expires_at": expires, "worker_id": worker, "failure_reason": None,
                "created_at": self.now})


def _backends() -> tuple[str, ...]:
    return tuple(b for k in ("gemm", "attention") for b in kinds.get(k).backends)


def seed_database(url: str, *, problems: int, measurements: int,
                  attention_share: float = 0.12, active: int = 6, seed: int = 0
                  ) -> dict[str, int]:
    """Migrate ``url`` and fill it (it must hold no problem yet); returns the rows written
    per table."""
    upgrade(url)
    db = Database(url)
    with db.read_session() as s:
        existing = s.scalar(select(func.count()).select_from(ProblemRow)) or 0
    db.dispose()
    if existing:
        raise ValueError(f"{url} already holds {existing} problems: seed an empty database")
    seeder = Seeder(url, seed, datetime.now(UTC).replace(microsecond=0))
    try:
        seeder.run(problems, measurements, attention_share, active)
    finally:
        seeder.db.dispose()
    return dict(seeder.writer.written)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.dashboard.seed",
                                 description=(__doc__ or "").strip().splitlines()[0])
    ap.add_argument("url", help="SQLAlchemy URL of an empty database")
    ap.add_argument("--problems", type=int, default=10_000)
    ap.add_argument("--measurements", type=int, default=1_000_000,
                    help="add full-search jobs until this many measurements are stored")
    ap.add_argument("--attention-share", type=float, default=0.12)
    ap.add_argument("--active", type=int, default=6, help="jobs left queued or running")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        written = seed_database(args.url, problems=args.problems,
                                measurements=args.measurements,
                                attention_share=args.attention_share, active=args.active,
                                seed=args.seed)
    except ValueError as exc:
        ap.error(str(exc))
    print(", ".join(f"{n} {t}" for t, n in written.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
