"""The service side of the decision loop: evidence in, actions out.

:func:`search.decision.plan` is pure; this module reads one job's evidence from the database
(calibration, candidates with their measurements, the verification), asks the agent, and carries
out what it says: enqueue the calibration, the library candidates, a tier's Optuna proposals or
the interleaved verification; cancel a finished tier's pending trials; store the decision and
finish the job. Transactions stay short and never span a tuner call (see ``service.flow``).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from db import calibrations, decisions, jobs, measurements, workers
from db import candidates as cands
from db.engine import Database
from db.records import (
    CandidateRecord,
    CandidateStatus,
    JobRecord,
    JobStatus,
    MeasurementRecord,
)
from search import decision, kinds
from search.limits import DeviceLimits, limits_for
from search.optimizer import CompileBudget
from search.roofline import Calibration
from search.types import Measurement, Status, Task, config_key
from service.catalogues import declared
from service.outages import outage_of
from service.settings import ServiceSettings
from service.tuning import TunerPool

log = logging.getLogger("kernelsearch.agent")

Clock = Callable[[], datetime]

#: A trial running this long (or a lease, if longer) without a candidate was left by a dead
#: process: another process's proposals are stored within seconds of being asked.
STALE_TRIAL_S = 60.0
#: The stage of a job whose decision waits for other workers to re-measure its held results.
RECHECK = "recheck"


class AgentLoop:
    """Advances jobs through the decision loop; one instance per service process."""

    def __init__(self, database: Database, settings: ServiceSettings, tuners: TunerPool,
                 clock: Clock) -> None:
        self.db = database
        self.settings = settings
        self.tuners = tuners
        self.clock = clock
        # Striped per-job locks: a fixed set, so the table does not grow with every job ever run.
        self._locks = [threading.Lock() for _ in range(64)]

    # -- entry point --------------------------------------------------------------------------
    def advance(self, job_id: int, device: dict[str, Any] | None = None) -> None:
        """Plan and act until the plan no longer changes (at most a few rounds). ``device`` is
        the worker at hand (leasing or reporting); default: the model's latest worker."""
        with self._locks[job_id % len(self._locks)]:
            for _ in range(6):
                job = self._job(job_id)
                if job is None or job.status != JobStatus.RUNNING or job.bound_gpu is None:
                    return
                now = self.clock()
                if time_up(job, now):
                    self._drop_pending(job, "time budget exhausted")
                # the worker resolved once: later rounds reuse it
                ev, device = self.evidence(job, now, device)
                p = decision.plan(ev)
                # a decision waits while another worker may still confirm a held result
                waits = (p.stage == decision.Stage.DECIDED
                         and self.recheck_wait(job, now) is not None)
                stage = RECHECK if waits else str(p.stage)
                if job.stage != stage:
                    with self.db.session() as s:
                        jobs.set_stage(s, job.id, stage)
                if waits or not self._act(job, ev, p, device, now):
                    return

    def recheck_wait(self, job: JobRecord, now: datetime) -> datetime | None:
        """Until when the job's decision waits for the re-measurement of its held results
        still queued (:func:`recheck_until`); None once there is nothing to wait for."""
        with self.db.read_session() as s:
            held = cands.held_outstanding(s, job.id)
        until = recheck_until(job, held, self.settings.held_wait_seconds)
        return until if until is not None and now < until else None

    # -- evidence -----------------------------------------------------------------------------
    def evidence(self, job: JobRecord, now: datetime, device: dict[str, Any] | None = None
                 ) -> tuple[decision.Evidence, dict[str, Any]]:
        problem = job.problem
        policy = decision.Policy.from_dict(job.policy)
        gpu = job.bound_gpu or ""
        with self.db.read_session() as s:
            if device is None:
                worker = workers.latest_of_model(s, gpu)
                device = dict(worker.device) if worker is not None else {}
            cal = calibrations.latest(s, gpu)
            calibration = (Calibration(gpu, cal.bandwidth_gbs, cal.peak_tflops, cal.env,
                                       cal.peak_low_tflops)
                           if cal is not None else None)
            if calibration is not None and device and (
                    not calibration.matches(device) or calibration.peak(problem.dtype) is None):
                # driver or toolkit changed, or it predates this dtype's peak (fp8): measure
                # again (a device that cannot measure the peak still gets one run per job)
                calibration = None
            rows = cands.job_candidates(s, job.id)
            found = measurements.of_candidates(s, [c.id for c in rows])
            pending_cal = cands.outstanding_tasks(s, gpu, Task.CALIBRATE.value)
        kind = kinds.get(problem.kind)
        trials: list[decision.Trial] = []
        verification: decision.Verification | None = None
        cal_done, cal_gpu_s = False, 0.0
        for c in rows:
            m = found.get(c.id)
            if c.task == Task.CALIBRATE.value:
                if m is not None:
                    cal_gpu_s += m.gpu_s
                    cal_done = True
                    own = _own_calibration(gpu, m)
                    if calibration is None and own is not None:
                        calibration = own  # this job measured it: use it whatever the env says
                elif c.status == CandidateStatus.FAILED:
                    cal_done = True
                continue
            if c.task == Task.VERIFY.value:
                if c.status == CandidateStatus.CANCELLED and m is None:
                    continue
                verification = _verification(c, m)
                continue
            if c.status == CandidateStatus.CANCELLED and m is None:
                continue  # never ran: neither evidence nor spent budget
            trials.append(_trial(c, m, kind.precision_of(problem, c.backend or "", c.config)))
        backends = job.bound_backends or ()
        model = gpu or str(device.get("gpu_model", ""))
        library = kind.library_plan(problem, policy, backends, model,
                                    declared(self.db, model), self.settings.cutlass_candidates)
        tiers = allowed_tiers(kind, kind.tier_plans(problem, device, policy), backends)
        ev = decision.Evidence(
            problem=problem, policy=policy, calibration=calibration,
            calibration_failed=cal_done and calibration is None,
            calibration_pending=pending_cal > 0,
            library_configs=library.configs, library_notes=library.notes,
            custom_allowed=any(b in kind.custom_backends for b in backends), tiers=tiers,
            trials=tuple(trials), exhausted_tiers=frozenset(job.exhausted_tiers),
            verification=verification, max_trials=job.max_trials,
            time_up=time_up(job, now), calibration_gpu_s=cal_gpu_s,
            roles=kind.roles_on(model))
        return ev, device

    # -- actions ------------------------------------------------------------------------------
    def _act(self, job: JobRecord, ev: decision.Evidence, p: decision.Plan, device: dict[str, Any],
             now: datetime) -> bool:
        """Carry out the plan's actions; True when the state changed so that planning again
        may give a different answer."""
        changed = False
        for action in p.actions:
            if isinstance(action, decision.Calibrate):
                self._add(job, [(Task.CALIBRATE.value, {})], now, task=True)
            elif isinstance(action, decision.MeasureLibrary):
                self._add(job, [(backend, dict(config)) for backend, config in action.candidates],
                          now)
            elif isinstance(action, decision.StopTier):
                changed |= bool(self._drop_pending(job, f"tier over: {action.reason}",
                                                   action.tier, keep_held=True))
            elif isinstance(action, decision.Search):
                changed |= self._search(job, ev, action, device, now)
            elif isinstance(action, decision.Verify):
                self._add(job, [(Task.VERIFY.value, _verify_config(action))], now, task=True)
            elif isinstance(action, decision.Decide):
                self._decide(job, action.decision, ev.verification, device, now)
                return False
        return changed

    def _add(self, job: JobRecord, items: list[tuple[str, dict[str, Any]]], now: datetime,
             *, task: bool = False) -> None:
        """Enqueue library candidates ``(backend, config)`` (with ``task``: tasks
        ``(task, config)``), in order, in one transaction: never twice for one job."""
        with self.db.session() as s:
            current = jobs.get_job(s, job.id, lock=True)
            if current is None or not current.active:
                return
            have = {(c.backend, c.task, c.config_key) for c in cands.job_candidates(s, job.id)
                    if c.status != CandidateStatus.CANCELLED}
            for name, config in items:
                ck = config_key(config)
                key = (None, name, ck) if task else (name, None, ck)
                if key in have:
                    continue
                have.add(key)
                if task:
                    cands.add_task(s, job.id, job.problem_id, name, config, now)
                else:
                    cands.add_candidates(s, job.id, job.problem_id, name, [(config, None)],
                                         now)

    def _search(self, job: JobRecord, ev: decision.Evidence, action: decision.Search,
                device: dict[str, Any], now: datetime) -> bool:
        """Top the tier (a custom tier, or the library search) up to the job's window of
        outstanding trials; True when planning again may add more: the tier's space ran out,
        or its budget is all out and the window still has room (the next tier may start)."""
        kind = kinds.get(job.problem.kind)
        library_search = action.tier == kind.library_tier
        backend = kind.backend_of(action.tier)
        with self.db.read_session() as s:
            outstanding = cands.job_counts(s, job.id).outstanding
        room = self.settings.window - outstanding
        n = room if action.n is None else min(room, action.n)
        if n <= 0:
            return False
        problem = job.problem
        limits = _limits(device)
        gpu = job.bound_gpu or ""

        policy = decision.Policy.from_dict(job.policy)

        def known(config: dict[str, Any]) -> Measurement | None:
            with self.db.read_session() as s:
                found = measurements.find_known(s, job.problem_id, gpu, backend,
                                                config_key(config))
            if found is None:
                return None
            # measured for another job, maybe under another bound: judged under this one's
            return policy.judge(found.to_measurement(),
                                kind.precision_of(problem, backend, config))

        # a library-side search compiles within the budget the agent allows
        extra = ({"budget": self._compile_budget(job, ev, action, backend)}
                 if library_search else {})
        seen = sum(1 for t in ev.trials if t.tier == action.tier)
        with self.tuners.use(problem, gpu, limits, job.seed, action.tier,
                             catalogues=declared(self.db, gpu)) as tuner:
            self._settle_stale(job, action.tier, tuner)
            proposals = tuner.propose(n, known, **extra)
            exhausted = bool(tuner.exhausted)
            kept: list[Any] = []
            with self.db.session() as s:
                current = jobs.get_job(s, job.id, lock=True)
                active = current is not None and current.active
                if active:
                    # Under the job's row lock, count again: another API process may have
                    # topped the job up since the evidence was read; what no longer fits the
                    # window or the tier's budget is given back to the study.
                    fit = self.settings.window - cands.job_counts(s, job.id).outstanding
                    if action.n is not None:
                        added = cands.tier_trials(s, job.id, action.tier) - seen
                        fit = min(fit, action.n - max(0, added))
                    kept = proposals[:max(0, fit)]
                    cands.add_candidates(s, job.id, job.problem_id, backend,
                                         [(dict(x.config), x.trial_number) for x in kept],
                                         now, action.tier)
                    if exhausted:
                        jobs.mark_exhausted(s, job.id, action.tier)
            for x in proposals[len(kept):]:
                _safely(lambda t=tuner, n=x.trial_number: t.abandon(n))
        filled = action.n is not None and len(kept) == action.n and action.n < room
        return active and (exhausted or filled)

    def settle(self, job: JobRecord) -> None:
        """Tell every tier's study of the job what became of its trials (the planner's first
        step: with ``planning="background"`` a report only stores the result), then let the
        tiers' tuners forget nothing: see ``_settle_stale``."""
        with self.db.read_session() as s:
            tiers = {c.tier for c in cands.job_candidates(s, job.id)
                     if c.trial_number is not None}
        for tier in sorted(tiers, key=str):
            try:
                self.with_tuner(job, tier, lambda t, tier=tier: self._settle_stale(
                    job, tier, t, tell_all=True))
            except Exception as exc:
                if outage_of(exc) is not None:
                    raise
                # a tier whose tuner cannot be made here (say, CUTLASS with no catalogue of
                # this GPU model) has nothing to be told; the others still are
                log.warning("job %s: trials of tier %s not told: %s", job.id, tier, exc)

    def _settle_stale(self, job: JobRecord, tier: str | None, tuner: Any, *,
                      tell_all: bool = False) -> None:
        """Tell the study what became of trials asked longer ago than a lease (and at least
        ``STALE_TRIAL_S``) and never told. A service process that died between asking and
        storing the candidates, or between storing a result and telling it, leaves such trials
        running, and a running trial's configuration counts as in flight: never proposed
        again. A stored result is told, a failed or cancelled candidate (or none at all) closes
        its trial; one still out waits. ``tell_all``: every running trial whose candidate has
        settled is told at once, whatever its age (a trial with no candidate yet is closed
        only once stale: another process may be storing it)."""
        stale = getattr(tuner, "stale_running", None)
        grace = max(self.settings.lease_seconds, STALE_TRIAL_S)
        numbers = stale(0.0 if tell_all else grace) if stale is not None else []
        if not numbers:
            return
        old = set(stale(grace)) if tell_all and stale is not None else set(numbers)
        with self.db.read_session() as s:
            found = cands.of_trials(s, job.problem_id, job.bound_gpu or "", tier, numbers)
            measured = measurements.of_candidates(s, [c.id for c in found.values()])
        for number in numbers:
            c = found.get(number)
            m = measured.get(c.id) if c is not None else None
            if m is not None:
                _safely(lambda n=number, m=m: tuner.record(n, m.to_measurement()))
            elif c is None and number not in old:
                continue  # asked moments ago: its candidate may not be stored yet
            elif c is None or c.status == CandidateStatus.CANCELLED:
                log.info("closing trial %s of %s: no candidate stands for it", number, tier)
                _safely(lambda n=number: tuner.abandon(n))
            elif c.status == CandidateStatus.FAILED:
                crashed = Measurement(status=Status.CRASHED, error=c.failure_reason)
                _safely(lambda n=number, m=crashed: tuner.record(n, m))

    def _compile_budget(self, job: JobRecord, ev: decision.Evidence, action: decision.Search,
                        backend: str) -> CompileBudget:
        """What the library search may still compile: the seconds the agent allows, the
        operations some worker has built for this problem and GPU model (measured past
        compiling, or declared in its catalogue as in its artifact cache), and this job's
        proposals whose compile has not been reported yet."""
        with self.db.read_session() as s:
            built = measurements.built_ops(s, job.problem_id, job.bound_gpu or "", backend)
        # and what the workers of this GPU model declared already built (their catalogue's
        # ``built``: an artifact cache filled ahead, workers.device.catalogues)
        found = declared(self.db, job.bound_gpu or "")(f"{job.problem.kind}/{backend}")
        listed = found.body.get("built") if found is not None else None
        built |= {str(name) for name in listed} if isinstance(listed, list) else set()
        pending = {str(t.config.get("op")) for t in ev.library
                   if t.tier == action.tier and not t.done} - built
        left = math.inf if action.compile_left_s is None else action.compile_left_s
        return CompileBudget(left, frozenset(built), frozenset(pending))

    def _drop_pending(self, job: JobRecord, reason: str, tier: str | None = None, *,
                      keep_held: bool = False) -> list[CandidateRecord]:
        """Cancel the job's pending candidates (of ``tier`` only, if given; ``keep_held``:
        not those queued for the re-measurement of a held result) and close their trials in
        the tuners; returns them."""
        with self.db.session() as s:
            dropped = _cancel_pending(s, job.id, reason, tier, keep_held=keep_held)
        self.abandon(job, dropped)
        return dropped

    def _decide(self, job: JobRecord, d: decision.Decision,
                verification: decision.Verification | None, device: dict[str, Any],
                now: datetime) -> None:
        pick = d.custom if d.chosen == "custom" else d.library
        env = {k: device.get(k) for k in ("gpu_model", "sm_count", "cc", "driver", "cuda",
                                           "torch", "triton") if k in device}
        served = (pick.precision or job.problem.dtype) if pick is not None else None
        with self.db.session() as s:
            current = jobs.get_job(s, job.id, lock=True)
            if current is None or current.status != JobStatus.RUNNING:
                return
            dropped = _cancel_pending(s, job.id, "decided")
            _unconfirmed(s, current, now, self.settings.held_wait_seconds)
            rf = d.roofline
            if pick is not None:
                decisions.add_decision(
                    s, problem_id=job.problem_id, job_id=job.id, gpu_model=job.bound_gpu or "",
                    verdict=str(d.verdict), chosen=d.chosen, backend=pick.backend,
                    config=dict(pick.config), median_us=pick.median_us, speedup=d.speedup,
                    bound=rf.bound if rf else None,
                    attainable_us=rf.attainable_us if rf else None, verified=d.verified,
                    rationale=d.rationale, evidence=stored_evidence(d, verification), env=env,
                    now=now, precision=served, rel_error=pick.rel_error,
                    saved_gpu_s=decision.early_stop_savings(
                        d.spend, job.max_trials, bool(d.policy.get("full_search"))))
                jobs.finish_job(s, job.id, JobStatus.DONE, now)
            else:
                reasons = Counter((c.failure_reason or c.status)[:120]
                                  for c in cands.job_candidates(s, job.id)
                                  if c.status == CandidateStatus.FAILED)
                summary = "; ".join(f"{r} (x{n})" for r, n in reasons.most_common(3))
                jobs.finish_job(s, job.id, JobStatus.FAILED, now,
                                f"no candidate ran ok: {summary or 'none was measured'}")
        self.abandon(job, dropped)

    # -- tuner bookkeeping --------------------------------------------------------------------
    def abandon(self, job: JobRecord, dropped: list[CandidateRecord]) -> None:
        by_tier: dict[str | None, list[int]] = {}
        for c in dropped:
            if c.trial_number is not None:
                by_tier.setdefault(c.tier, []).append(c.trial_number)
        for tier, numbers in by_tier.items():
            def close(t: Any, numbers: list[int] = numbers) -> None:
                for n in numbers:
                    t.abandon(n)
            self.with_tuner(job, tier, close)

    def with_tuner(self, job: JobRecord, tier: str | None, fn: Callable[[Any], None],
                   device: dict[str, Any] | None = None, *, outages: bool = False) -> None:
        """Run ``fn`` on the job's tuner of ``tier``; a failure is logged, never lost data.
        ``device``: the worker at hand (a reporting worker); default: the model's latest.
        With ``outages`` a database outage is raised rather than logged (a report is then
        answered 503 and sent again, and its repeat tells the tuner)."""
        if job.bound_gpu is None:
            return
        problem = job.problem
        if device is None:
            with self.db.read_session() as s:
                worker = workers.latest_of_model(s, job.bound_gpu)
            device = dict(worker.device) if worker is not None else None
        limits = _limits(device) if device is not None else DeviceLimits()
        with self.tuners.use(problem, job.bound_gpu, limits, job.seed, tier,
                             catalogues=declared(self.db, job.bound_gpu)) as tuner:
            _safely(lambda: fn(tuner), outages)

    # -- helpers ------------------------------------------------------------------------------
    def _job(self, job_id: int) -> JobRecord | None:
        with self.db.read_session() as s:
            return jobs.get_job(s, job_id)



def allowed_tiers(kind: kinds.ProblemKind, tiers: Sequence[decision.TierPlan],
                  backends: Sequence[str]) -> tuple[decision.TierPlan, ...]:
    """``tiers`` with those whose backend the job does not allow marked inapplicable: their
    candidates would never be leased, so the job would wait on them for ever."""
    if not backends:
        return tuple(tiers)
    out = []
    for t in tiers:
        backend = kind.backend_of(t.name)
        if t.applicable and backend not in backends:
            t = replace(t, applicable=False,
                        reason=f"the job does not allow its backend {backend}")
        out.append(t)
    return tuple(out)


def time_up(job: JobRecord, now: datetime) -> bool:
    """Whether the job's time budget (from its start) has run out."""
    if job.max_seconds is None or job.started_at is None:
        return False
    return (now - job.started_at).total_seconds() >= job.max_seconds


def recheck_until(job: JobRecord, held: dict[int, datetime], wait_s: float
                  ) -> datetime | None:
    """Until when the job's decision waits for the re-measurement of ``held`` (candidate:
    when its result was held): ``wait_s`` after the last was held, never past the job's time
    budget; None when nothing is held."""
    if not held:
        return None
    until = max(held.values()) + timedelta(seconds=wait_s)
    if job.max_seconds is not None and job.started_at is not None:
        until = min(until, job.started_at + timedelta(seconds=job.max_seconds))
    return until


def _unconfirmed(s: Session, job: JobRecord, now: datetime, wait_s: float) -> None:
    """Say of each held result of the job that no other worker re-measured (the job decides
    now, without it) why it was never confirmed."""
    why = ("the job's time budget ran out first" if time_up(job, now) else
           f"no other worker re-measured it within {wait_s:g} s (KS_HELD_WAIT_SECONDS)")
    settle_unconfirmed(s, job.id, why)


def settle_unconfirmed(s: Session, job_id: int, why: str) -> None:
    """Note on each held result of the job that no other worker re-measured that the job
    ended without it, and ``why``; the result stays held."""
    for m in measurements.held_of_job(s, job_id):
        if "recheck" not in (m.extra or {}):
            measurements.settle_held(
                s, m, confirmed=False, extra={},
                error=f"{m.error}; unconfirmed: {why}, so the job ended without it")


def _cancel_pending(s: Session, job_id: int, reason: str, tier: str | None = None, *,
                    keep_held: bool = False) -> list[CandidateRecord]:
    """Cancel the job's pending candidates (of ``tier`` only, if given; ``keep_held``: not
    those queued for the re-measurement of a held result); returns them."""
    keep = set(cands.held_outstanding(s, job_id)) if keep_held else set()
    dropped = [c for c in cands.job_candidates(s, job_id)
               if c.status == CandidateStatus.PENDING and (tier is None or c.tier == tier)
               and c.id not in keep]
    cands.cancel_ids(s, [c.id for c in dropped], reason)
    return dropped


def record_calibration(s: Session, cand: CandidateRecord, m: Measurement, gpu_model: str,
                       worker_id: int, now: datetime) -> None:
    """Store what a calibration task measured (its report carries the peaks in ``extra``)."""
    extra = m.extra or {}
    try:
        bandwidth = float(extra["bandwidth_gbs"])
        peaks = {str(k): float(v) for k, v in dict(extra["peak_tflops"]).items()}
        lows = {str(k): float(v) for k, v in dict(extra.get("peak_low_tflops") or {}).items()}
    except (KeyError, TypeError, ValueError):
        log.warning("calibration report of candidate %s has no usable peaks", cand.id)
        return
    calibrations.add_calibration(s, gpu_model, bandwidth, peaks, dict(m.env), now,
                                 job_id=cand.job_id, worker_id=worker_id, bench_s=m.bench_s,
                                 peak_low_tflops=lows)


def _limits(device: dict[str, Any]) -> DeviceLimits:
    return limits_for(str(device.get("mode", "")), int(device.get("smem_per_block", 0) or 0),
                      str(device.get("cc", "") or ""), int(device.get("sm_count", 0) or 0))


def _own_calibration(gpu: str, m: MeasurementRecord) -> Calibration | None:
    if m.status != "ok":
        return None
    try:
        return Calibration.from_dict({"gpu_model": gpu, **m.extra, "env": m.env})
    except (KeyError, TypeError, ValueError):
        return None


def _trial(c: CandidateRecord, m: MeasurementRecord | None, precision: str | None
           ) -> decision.Trial:
    """``precision``: what the candidate computes in when below the input precision."""
    if m is not None:
        return decision.Trial(c.id, c.backend, c.config, c.tier, m.status, m.median_us, m.p20_us,
                              m.p80_us, m.gpu_s, m.compile_s or 0.0, m.rel_error, precision)
    if c.status == CandidateStatus.FAILED:  # never measured: its lease expired too often
        return decision.Trial(c.id, c.backend, c.config, c.tier, "crashed",
                              precision=precision)
    return decision.Trial(c.id, c.backend, c.config, c.tier, precision=precision)


def _verification(c: CandidateRecord, m: MeasurementRecord | None) -> decision.Verification:
    lib_id = int(c.config.get("library_id", 0))
    cus_id = int(c.config["custom_id"]) if c.config.get("custom_id") is not None else None
    if m is None:
        status = "crashed" if c.status == CandidateStatus.FAILED else None
        return decision.Verification(lib_id, cus_id, status, error=c.failure_reason)
    extra = m.extra or {}
    ref_id = c.config.get("reference_id")
    return decision.Verification(
        lib_id, cus_id, m.status, tuple(float(x) for x in extra.get("library_us") or ()),
        tuple(float(x) for x in extra.get("custom_us") or ()), m.gpu_s, m.error,
        int(ref_id) if ref_id is not None else None,
        tuple(float(x) for x in extra.get("reference_us") or ()),
        _float_or_none(extra.get("custom_rel_error")),
        tuple((int(r["id"]), tuple(float(x) for x in r.get("us") or ()),
               _float_or_none(r.get("rel_error")))
              for r in extra.get("runners_up") or () if r.get("id") is not None),
        tuple((int(r["id"]) if r.get("id") is not None else None, str(r.get("reason", "")))
              for r in extra.get("runners_up_dropped") or ()))


def _float_or_none(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def stored_evidence(d: decision.Decision, v: decision.Verification | None) -> dict[str, Any]:
    """A decision's stored evidence: the decision, and the verification it saw with each
    contender's per-round medians (a task, so not among the problem's trials)."""
    rounds = None
    if v is not None:
        rounds = {"status": v.status, "error": v.error, "rounds": len(v.library_us),
                  "library_id": v.library_id, "custom_id": v.custom_id,
                  "reference_id": v.reference_id, "library_us": list(v.library_us),
                  "custom_us": list(v.custom_us), "reference_us": list(v.reference_us),
                  "gpu_s": v.gpu_s}
        if v.runners_up or v.runners_up_dropped:
            rounds["runners_up"] = [{"id": rid, "us": list(us), "rel_error": err}
                                    for rid, us, err in v.runners_up]
            rounds["runners_up_dropped"] = [{"id": rid, "reason": why}
                                            for rid, why in v.runners_up_dropped]
    return {**d.to_dict(), "verification": rounds}


def _verify_config(v: decision.Verify) -> dict[str, Any]:
    config: dict[str, Any] = {
        "library": {"backend": v.library.backend, "config": dict(v.library.config)},
        "rounds": v.rounds, "library_id": v.library.id}
    if v.custom is not None:  # None: a library confirmation (the pick against cuBLAS)
        config["custom"] = {"backend": v.custom.backend, "config": dict(v.custom.config)}
        config["custom_id"] = v.custom.id
    if v.reference is not None:
        config["reference"] = {"backend": v.reference.backend,
                               "config": dict(v.reference.config)}
        config["reference_id"] = v.reference.id
    if v.runners_up:
        config["runners_up"] = [{"id": t.id, "backend": t.backend, "config": dict(t.config)}
                                for t in v.runners_up]
    return config


def _safely(fn: Callable[[], None], outages: bool = False) -> None:
    try:
        fn()
    except Exception as exc:  # the tuner is advisory; the database already holds the truth
        if outages and outage_of(exc) is not None:
            raise
        log.exception("telling the tuner failed")
