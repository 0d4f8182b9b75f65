"""Orchestration: jobs, leases and reports, between the database and the tuners. No HTTP here.

Transactions are short and never span a tuner call: on SQLite, Optuna writes through its own
connection and would wait on ours. The order is always "read/commit, ask or tell the tuner,
commit", with the tuner's per-(problem, GPU) lock held across a top-up so that two requests in
one process never over-fill a job's window.
"""

from __future__ import annotations

import logging
import secrets
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from db import candidates as cands
from db import catalogues, decisions, jobs, measurements, workers
from db.engine import Database
from db.records import (
    CandidateRecord,
    CandidateStatus,
    DecisionRecord,
    JobCounts,
    JobRecord,
    JobStatus,
    MeasurementRecord,
    WorkerRecord,
)
from search import kinds
from search.decision import Policy
from search.types import Candidate, Device, Measurement, Problem, ProblemError, Status
from service.agent_loop import RECHECK, AgentLoop, settle_unconfirmed, time_up
from service.errors import Conflict, Forbidden, Gone, InvalidInput, NotFound, TooMany
from service.reports import store_all
from service.settings import ServiceSettings
from service.tokens import digest, other_identity, same_secret
from service.tuning import TunerPool
from service.waiting import no_worker, why_waiting

log = logging.getLogger("kernelsearch.flow")

Clock = Callable[[], datetime]
#: The Retry-After of a submission refused for a full queue: jobs take minutes.
QUEUE_RETRY_AFTER_S = 60


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class JobState:
    """A job with what its view needs: counts, the best measurements so far (``best`` and
    ``library_best`` follow the decision once there is one) and the decision."""

    job: JobRecord
    counts: JobCounts
    best: MeasurementRecord | None
    library_best: MeasurementRecord | None
    custom_best: MeasurementRecord | None
    now: datetime
    decision: DecisionRecord | None = None
    #: why a queued job has not started (no worker of its GPU model, or none seen lately), or
    #: why a running one has not decided (held results wait for a re-measurement)
    waiting: str | None = None
    #: its results held as faster than the roofline allows (``service.plausibility``)
    held: tuple[MeasurementRecord, ...] = ()


@dataclass(frozen=True)
class LeaseGrant:
    lease_id: str | None
    expires_at: datetime | None
    lease_seconds: float
    candidates: list[Candidate]
    attempts: list[int]  # earlier expired leases of each candidate


@dataclass(frozen=True)
class ReportOutcome:
    accepted: list[int]
    rejected: list[tuple[int, str]]


class Flow:
    """The service's logic; ``service.routes`` are thin HTTP wrappers around it."""

    def __init__(self, database: Database, settings: ServiceSettings, tuners: TunerPool,
                 clock: Clock = utcnow) -> None:
        self.db = database
        self.settings = settings
        self.tuners = tuners
        self.clock = clock
        self.agent = AgentLoop(database, settings, tuners, clock)
        #: requests mark jobs for the planner rather than plan them (``service.planner``)
        self.background = settings.planning == "background"
        #: problems by id, read once per process: a problem's row never changes once stored
        self._problems: dict[int, Problem] = {}
        self._problems_lock = threading.Lock()

    def close(self) -> None:
        """Release the database connections and the tuners of this process."""
        self.tuners.close()
        self.db.dispose()

    # -- jobs -----------------------------------------------------------------------------------
    def submit_job(self, problem: Problem, *, max_trials: int | None,
                   max_seconds: float | None, backends: Sequence[str], gpu: str | None,
                   seed: int | None, policy: Policy | None = None,
                   owner: str | None = None) -> JobState:
        """Store a job for ``problem``; ``owner`` (the user token's name) counts against
        ``max_queued_jobs_per_owner``, every job against ``max_queued_jobs`` (429 past them)."""
        kind = kinds.get(problem.kind)
        unknown = sorted(set(backends) - set(kind.backends))
        if unknown:
            raise InvalidInput(["body", "backends"], (
                f"{unknown[0]} is not a backend of {kind.name} problems; one of "
                f"{', '.join(kind.backends)}"))
        try:
            kind.check_served(problem, backends)
            kind.check_policy(problem, policy or Policy(), backends)
        except ProblemError as exc:
            where = (["body", "backends"] if exc.field == "backends" else
                     ["body", *exc.field.split(".")] if exc.field.startswith("policy.") else
                     ["body", "problem", exc.field])
            raise InvalidInput(where, exc.message) from exc
        if problem.min_bytes > self.settings.max_problem_bytes:
            raise InvalidInput(["body", "problem"], (
                f"operands need {problem.min_bytes} bytes, over max_problem_bytes="
                f"{self.settings.max_problem_bytes}"))
        now = self.clock()
        with self.db.session() as s:
            record = jobs.get_or_create_problem(s, problem, now)
            # a job stored just now is queued: it waits for a worker of its GPU model, if any
            waiting = no_worker(s, gpu, now, self.settings.lease_seconds)
            # the lock is held to the commit: only the count and the insert run under it
            jobs.lock_submissions(s)
            self._check_queue(s, owner)
            job = jobs.create_job(s, record, max_trials=max_trials, max_seconds=max_seconds,
                                  backends=list(dict.fromkeys(backends)), target_gpu=gpu,
                                  seed=seed or 0, now=now,
                                  policy=(policy or Policy()).to_dict(), owner=owner)
            # what job_state would read back: a job stored just now has no candidate,
            # measurement, held result or decision yet, only a reason to wait
            return JobState(job, JobCounts(), None, None, None, now, waiting=waiting)

    def _check_queue(self, s: Session, owner: str | None) -> None:
        limit, retry = self.settings.max_queued_jobs, QUEUE_RETRY_AFTER_S
        if jobs.count_active(s) >= limit:
            raise TooMany(f"{limit} jobs are queued or running, the limit (max_queued_jobs); "
                          "submit again when some have finished", retry)
        mine = self.settings.max_queued_jobs_per_owner
        if owner is not None and jobs.count_active(s, owner) >= mine:
            raise TooMany(f"{owner} has {mine} jobs queued or running, the limit per owner "
                          "(max_queued_jobs_per_owner); submit again when some have "
                          "finished", retry)

    def job_state(self, job_id: int) -> JobState:
        now = self.clock()
        job = self._job(job_id)
        if job.status == JobStatus.RUNNING and (time_up(job, now) or (
                job.stage == RECHECK and self.agent.recheck_wait(job, now) is None)):
            self._plan(job.id)
        with self.db.read_session() as s:
            return self._state(s, job_id, now)

    def list_jobs(self, limit: int, offset: int) -> tuple[list[JobState], int]:
        now = self.clock()
        with self.db.read_session() as s:
            page, total = jobs.list_jobs(s, limit, offset)
            return [self._state(s, j.id, now) for j in page], total

    def cancel_job(self, job_id: int) -> JobState:
        now = self.clock()
        with self.db.session() as s:
            job = jobs.get_job(s, job_id, lock=True)
            if job is None:
                raise NotFound(f"job {job_id} not found")
            if not job.active:
                raise Conflict(f"job {job_id} is already {job.status}")
            dropped = [c for c in cands.job_candidates(s, job_id)
                       if c.status in (CandidateStatus.PENDING, CandidateStatus.LEASED)]
            cands.cancel_outstanding(s, job_id, "job cancelled")
            settle_unconfirmed(s, job_id, "the job was cancelled first")
            jobs.finish_job(s, job_id, JobStatus.CANCELLED, now)
            if self.background:  # the planner closes the dropped trials
                jobs.mark_due(s, [job_id])
        if not self.background:
            self.agent.abandon(job, dropped)
        return self.job_state(job_id)

    # -- workers --------------------------------------------------------------------------------
    def register_worker(self, name: str, device: Device,
                        declared: Mapping[str, dict[str, Any]] | None = None,
                        secret: str | None = None, identity: str | None = None
                        ) -> tuple[WorkerRecord, str | None]:
        """Register (or re-register) a worker; each catalogue it declares (by
        ``"<kind>/<backend>"``, validated by ``RegisterIn``) becomes its GPU model's
        (``search.kinds.gemm.library`` reads the CUTLASS one). A name registered with a secret
        is re-registered only with it, and one registered with a worker token (``identity``:
        the name of the call's) only with a token of that identity (403 otherwise); the first
        registration returns the secret it issued (only its digest is stored), later ones
        None."""
        now = self.clock()
        with self.db.session() as s:
            known = workers.by_name(s, name)
            issued = None
            if known is None or known.secret_sha256 is None:
                issued = secrets.token_urlsafe(32)
            elif not same_secret(secret, known.secret_sha256):
                raise _taken(name)
            if known is not None and identity is not None:
                _same_identity(known, identity)
            worker = workers.register(s, name, device.gpu_model, device.to_dict(), now,
                                      digest(issued) if issued else None, identity)
            if issued is not None and worker.secret_sha256 != digest(issued):
                raise _taken(name)  # a concurrent first registration of the name won
            if identity is not None:
                _same_identity(worker, identity)  # or a concurrent one under another token
            for key, body in (declared or {}).items():
                catalogues.declare(s, device.gpu_model, key, catalogues.digest_of(body), body,
                                   worker.id, now)
            return worker, issued

    def lease(self, worker_id: int, max_candidates: int,
              check: CheckWorker | None = None) -> LeaseGrant:
        """Lease up to ``max_candidates`` of the work the worker's GPU model can run; ``check``
        (the HTTP route's: the worker's secret) runs on the worker as it is read."""
        now = self.clock()
        lease_id = str(uuid.uuid4())
        expires = now + timedelta(seconds=self.settings.lease_seconds)
        if self.background:
            return self._lease_planned(worker_id, max_candidates, lease_id, now, expires,
                                       check)
        worker = self._worker(worker_id, check)
        device = Device.from_dict(worker.device)
        self.expire_stale()
        with self.db.session() as s:
            workers.touch(s, worker_id, now)
        granted: list[Candidate] = []
        attempts: list[int] = []
        for job in self._eligible(worker.gpu_model):
            if len(granted) >= max_candidates:
                break
            if not self._fits(job, device):
                continue
            if job.bound_gpu is None:
                job = self._bind(job, device, now)
                if job is None:
                    continue
            self.agent.advance(job.id, worker.device)
            usable = [b for b in job.bound_backends or () if b in device.backends]
            with self.db.session() as s:
                got = cands.lease_pending(s, job.id, usable, max_candidates - len(granted),
                                          lease_id, worker_id, expires,
                                          by_identity=self.settings.distinct_confirmers,
                                          token_name=worker.token_name)
                if got and not granted:
                    cands.create_lease(s, lease_id, worker_id, now, expires)
            granted += [Candidate(job.problem, c.backend, c.config, c.id, c.task) for c in got]
            attempts += [c.attempts for c in got]
        if not granted:
            return LeaseGrant(None, None, self.settings.lease_seconds, [], [])
        return LeaseGrant(lease_id, expires, self.settings.lease_seconds, granted, attempts)

    def _lease_planned(self, worker_id: int, max_candidates: int, lease_id: str,
                       now: datetime, expires: datetime,
                       check: CheckWorker | None) -> LeaseGrant:
        """A lease that plans nothing (``planning="background"``), in one transaction: take
        back expired leases (their jobs marked), hand out what the planner has queued for the
        worker's GPU model in one statement, and, with room left, bind the oldest queued job
        the device can run and mark it for the planner (its candidates come in a later
        lease)."""
        with self.db.session() as s:
            worker = _known_worker(s, worker_id, check)
            device = Device.from_dict(worker.device)
            expired = cands.expire_stale(s, now, self.settings.max_attempts)
            jobs.mark_due(s, [e.candidate.job_id for e in expired])
            if _seen_long_ago(worker, now):
                workers.touch(s, worker_id, now)
            got = cands.lease_pending_of_model(s, worker.gpu_model, device.backends,
                                               max_candidates, lease_id, worker_id, expires,
                                               by_identity=self.settings.distinct_confirmers,
                                               token_name=worker.token_name)
            if got:
                cands.create_lease(s, lease_id, worker_id, now, expires)
            problems = self._problems_of(s, [c.problem_id for c in got])
            if len(got) < max_candidates:
                self._bind_next(s, device, now)
        if not got:
            return LeaseGrant(None, None, self.settings.lease_seconds, [], [])
        return LeaseGrant(lease_id, expires, self.settings.lease_seconds,
                          [Candidate(problems[c.problem_id], c.backend, c.config, c.id, c.task)
                           for c in got], [c.attempts for c in got])

    def _problems_of(self, s: Session, problem_ids: Sequence[int]) -> dict[int, Problem]:
        """The problems of ``problem_ids``, read only where this process has not read them
        before (a lease's candidates are mostly of problems an earlier lease handed out)."""
        with self._problems_lock:
            known = {i: self._problems[i] for i in problem_ids if i in self._problems}
        missing = sorted(set(problem_ids) - known.keys())
        if missing:
            read = jobs.problems_of(s, missing)
            known.update(read)
            with self._problems_lock:
                if len(self._problems) + len(read) > _KEPT_PROBLEMS:
                    self._problems.clear()
                self._problems.update(read)
        return known

    def _bind_next(self, s: Session, device: Device, now: datetime) -> None:
        """Bind the oldest queued job that ``device`` can run to its GPU model and mark it for
        the planner (in the lease's transaction)."""
        after, size = 0, _FIRST_PAGE  # the oldest usually fits: read a few jobs first
        while True:
            page = jobs.unbound_jobs(s, device.gpu_model, after=after, limit=size, lock=True)
            for job in page:
                if not self._fits(job, device):
                    continue
                backends = [b for b in job.backends if b in device.backends]
                if jobs.bind_and_mark(s, job.id, device.gpu_model, backends, now):
                    return
            if len(page) < size:
                return
            after, size = page[-1].id, _PAGE

    def _plan(self, job_id: int, device: dict[str, Any] | None = None) -> None:
        """Plan the job now (``planning="inline"``), or mark it for the planner."""
        if self.background:
            with self.db.session() as s:
                jobs.mark_due(s, [job_id])
        else:
            self.agent.advance(job_id, device)

    def renew(self, worker_id: int, lease_id: str) -> datetime:
        self._worker(worker_id)
        now = self.clock()
        with self.db.session() as s:
            lease = cands.get_lease(s, lease_id)
            if lease is None or lease.worker_id != worker_id:
                raise NotFound(f"lease {lease_id} of worker {worker_id} not found")
            expired = lease.expires_at <= now
            if not expired:
                expires = now + timedelta(seconds=self.settings.lease_seconds)
                cands.renew_lease(s, lease_id, expires)
                workers.touch(s, worker_id, now)
        if expired:
            self.expire_stale()
            raise Gone(f"lease {lease_id} expired at {lease.expires_at.isoformat()}; "
                       "its candidates went back to the queue")
        return expires

    def report(self, worker_id: int, lease_id: str,
               results: Iterable[tuple[int, Measurement]],
               check: CheckWorker | None = None) -> ReportOutcome:
        """Store each result of the lease (inline planning: each in its own transaction) under
        the candidate's row lock, so that a report stored is never stored twice (a retry, the
        same report through another API process) and a late one (its lease expired, the
        candidate re-queued or run again) is refused: at most one measurement per candidate.
        A repeat of a stored report tells the tuner again (a no-op unless the first telling
        was cut off)."""
        if self.background:
            return self._report_planned(worker_id, lease_id, results, check)
        worker = self._worker(worker_id, check)
        accepted: list[int] = []
        rejected: list[tuple[int, str]] = []
        touched: set[int] = set()
        for candidate_id, measurement in results:
            with self.db.session() as s:
                now = self.clock()
                [got] = store_all(s, worker, lease_id, [(candidate_id, measurement)],
                                  lambda now=now: now, self.settings.implausible_below,
                                  self.settings.distinct_confirmers)
                if got.refused is None:
                    workers.touch(s, worker.id, now)
            if got.cand is None or got.job is None or got.refused is not None:
                rejected.append((candidate_id, got.refused or "unknown candidate"))
                if got.stored is not None and got.cand is not None and got.job is not None:
                    # after the transaction: on SQLite Optuna would wait for our lock
                    self._tell(got.job, got.cand, got.stored.to_measurement(), worker.device)
                continue
            accepted.append(candidate_id)
            touched.add(got.cand.job_id)
            self._tell(got.job, got.cand, got.measurement or measurement, worker.device)
        for job_id in sorted(touched):
            self.agent.advance(job_id, worker.device)
        return ReportOutcome(accepted, rejected)

    def _report_planned(self, worker_id: int, lease_id: str,
                        results: Iterable[tuple[int, Measurement]],
                        check: CheckWorker | None) -> ReportOutcome:
        """A report that tells no tuner (``planning="background"``): every result stored in one
        transaction, the candidates locked in id order (two reports of the same candidates, a
        retry racing its original, never lock in opposite orders), and the jobs of what was
        stored, or repeated, marked for the planner, which tells the studies."""
        accepted: list[int] = []
        rejected: list[tuple[int, str]] = []
        with self.db.session() as s:
            worker = _known_worker(s, worker_id, check)
            marked: set[int] = set()
            ordered = sorted(results, key=lambda r: r[0])
            stored = store_all(s, worker, lease_id, ordered, self.clock,
                               self.settings.implausible_below,
                               self.settings.distinct_confirmers)
            for (candidate_id, _), got in zip(ordered, stored, strict=True):
                if got.cand is not None and (got.refused is None or got.stored is not None):
                    marked.add(got.cand.job_id)  # stored, or a repeat: the planner tells
                if got.cand is None or got.job is None or got.refused is not None:
                    rejected.append((candidate_id, got.refused or "unknown candidate"))
                else:
                    accepted.append(candidate_id)
            jobs.mark_due(s, sorted(marked))
            if accepted and _seen_long_ago(worker, now := self.clock()):
                workers.touch(s, worker_id, now)
        return ReportOutcome(accepted, rejected)

    def _tell(self, job: JobRecord, cand: CandidateRecord, measurement: Measurement,
              device: dict[str, Any]) -> None:
        """Tell a trial's tuner how it went (the tuner ignores a trial it was told before)."""
        if cand.trial_number is None:
            return
        trial = cand.trial_number
        self.agent.with_tuner(job, cand.tier, lambda t: t.record(trial, measurement), device,
                              outages=True)

    def expire_stale(self) -> None:
        """Take back candidates whose lease ran out, then settle the jobs that changed."""
        now = self.clock()
        with self.db.session() as s:
            expired = cands.expire_stale(s, now, self.settings.max_attempts)
            if self.background:  # the planner tells the tuners and plans the jobs
                jobs.mark_due(s, [e.candidate.job_id for e in expired])
                return
            job_of = {e.candidate.job_id: jobs.get_job(s, e.candidate.job_id) for e in expired}
        for e in expired:
            job, trial = job_of.get(e.candidate.job_id), e.candidate.trial_number
            if job is None or trial is None or job.bound_gpu is None:
                continue
            if e.new_status == CandidateStatus.FAILED:
                crashed = Measurement(status=Status.CRASHED, error=e.candidate.failure_reason)
                self.agent.with_tuner(job, e.candidate.tier,
                                      lambda t, n=trial, m=crashed: t.record(n, m))
            elif e.new_status == CandidateStatus.CANCELLED:
                self.agent.abandon(job, [e.candidate])
        for job_id in sorted(job_of):
            if any(e.new_status != CandidateStatus.PENDING for e in expired
                   if e.candidate.job_id == job_id):
                self.agent.advance(job_id)

    # -- internals ------------------------------------------------------------------------------
    def job(self, job_id: int) -> JobRecord:
        """The job, or a 404."""
        return self._job(job_id)

    def _job(self, job_id: int) -> JobRecord:
        with self.db.read_session() as s:
            job = jobs.get_job(s, job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        return job

    def _worker(self, worker_id: int, check: CheckWorker | None = None) -> WorkerRecord:
        with self.db.read_session() as s:
            return _known_worker(s, worker_id, check)

    def _state(self, s: Session, job_id: int, now: datetime) -> JobState:
        job = jobs.get_job(s, job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        decision = decisions.of_job(s, job_id)
        # once decided, the job's best is the decision's pick, as GET /v1/best answers
        kind = kinds.get(job.problem.kind)
        best, library = decisions.as_decided(
            s, decision, measurements.job_best(s, job_id),
            measurements.job_best(s, job_id, kind.library_backends))
        return JobState(job, cands.job_counts(s, job_id, kind.library_tier), best, library,
                        measurements.job_best(s, job_id, kind.custom_backends), now, decision,
                        self._waiting(s, job, now), tuple(measurements.held_of_job(s, job_id)))

    def waiting(self, jobs: Sequence[JobRecord]) -> dict[int, str | None]:
        """Why each of ``jobs`` waits (``JobState.waiting``: None unless it is queued)."""
        now = self.clock()
        with self.db.read_session() as s:
            return {j.id: self._waiting(s, j, now) for j in jobs}

    def _waiting(self, s: Session, job: JobRecord, now: datetime) -> str | None:
        return why_waiting(s, job, now, self.settings.lease_seconds,
                           self.settings.held_wait_seconds)

    def _eligible(self, gpu_model: str) -> Iterator[JobRecord]:
        """The jobs a worker of ``gpu_model`` may serve, oldest first, read a page at a time
        as the lease walks them (a long queue is not read whole for each lease)."""
        after = 0
        while True:
            with self.db.read_session() as s:
                page = jobs.eligible_jobs(s, gpu_model, after=after, limit=_PAGE)
            yield from page
            if len(page) < _PAGE:
                return
            after = page[-1].id

    def _fits(self, job: JobRecord, device: Device) -> bool:
        allowed = job.bound_backends if job.bound_backends is not None else job.backends
        if not set(allowed) & set(device.backends):
            return False
        needed = job.problem.min_bytes
        return device.memory_bytes <= 0 or needed <= device.memory_bytes

    def _bind(self, job: JobRecord, device: Device, now: datetime) -> JobRecord | None:
        """Bind an unbound job to the device's GPU model (the agent then plans its work)."""
        backends = [b for b in job.backends if b in device.backends]
        with self.db.session() as s:
            jobs.bind_job(s, job.id, device.gpu_model, backends, now)
            bound = jobs.get_job(s, job.id)
        if bound is None or not bound.active or bound.bound_gpu != device.gpu_model:
            return None
        return bound


#: A check of the worker a call acts as (``service.auth.worker_check``: its secret).
CheckWorker = Callable[[WorkerRecord], None]


#: Seconds between two writes of a worker's ``last_seen`` by background leases and reports
#: (a worker polls every second or so; who waits for it reads ``last_seen`` against
#: ``lease_seconds``, minutes).
SEEN_EVERY_S = 5.0


def _seen_long_ago(worker: WorkerRecord, now: datetime) -> bool:
    """Whether the worker's ``last_seen`` is worth writing again."""
    return worker.last_seen is None or (now - worker.last_seen).total_seconds() >= SEEN_EVERY_S


def _known_worker(s: Session, worker_id: int, check: CheckWorker | None) -> WorkerRecord:
    """The worker ``worker_id`` (404 when unknown), passed by ``check``."""
    worker = workers.get_worker(s, worker_id)
    if worker is None:
        raise NotFound(f"worker {worker_id} not found: register with "
                       "POST /v1/workers/register")
    if check is not None:
        check(worker)
    return worker


def _same_identity(worker: WorkerRecord, identity: str) -> None:
    """A worker registered with a worker token re-registers only with a token of its identity."""
    if other_identity(worker.token_name, identity):
        raise Forbidden(f"worker name {worker.name!r} is registered with the worker token "
                        f"{worker.token_name!r}, not {identity!r}: re-register it with that "
                        "token, or choose another name (KS_WORKER_NAME) for this host's worker")


def _taken(name: str) -> Forbidden:
    return Forbidden(f"worker name {name!r} is registered with a secret: re-registering it "
                     "needs its X-Worker-Secret (returned by its first registration and kept "
                     "in the worker's state directory, KS_STATE_DIR); choose another name "
                     "(KS_WORKER_NAME) for a new worker")


#: Eligible jobs a lease reads at a time (``Flow._eligible``), and the first page of the
#: unbound jobs a background lease reads to bind one (``Flow._bind_next``).
_PAGE, _FIRST_PAGE = 32, 4
#: Problems a process keeps parsed for its leases (``Flow._problems_of``), a few KB each.
_KEPT_PROBLEMS = 10_000
