"""Records and flow results turned into response models."""

from __future__ import annotations

from db.records import CalibrationRecord, DecisionRecord, MeasurementRecord, ProblemRecord
from search.types import Problem
from service.flow import JobState
from service.queries import BestAnswer
from service.schemas import (
    BestOut,
    BudgetOut,
    CalibrationOut,
    DecisionOut,
    HeldOut,
    JobOut,
    LibraryOut,
    MeasurementOut,
    ProblemOut,
    ProgressOut,
    TrialOut,
)


def measurement_out(m: MeasurementRecord | None, problem: Problem) -> MeasurementOut | None:
    if m is None or m.median_us is None:
        return None
    return MeasurementOut(backend=m.backend, config=m.config, median_us=m.median_us,
                          p20_us=m.p20_us, p80_us=m.p80_us, tflops=problem.tflops(m.median_us),
                          candidate_id=m.candidate_id, measurement_id=m.id,
                          measured_at=m.created_at, precision=m.precision or problem.dtype,
                          rel_error=m.rel_error)


def job_out(state: JobState) -> JobOut:
    job, counts = state.job, state.counts
    problem = job.problem
    elapsed = None
    if job.started_at is not None:
        end = job.finished_at or state.now
        elapsed = max(0.0, (end - job.started_at).total_seconds())
    best = measurement_out(state.best, problem)
    library = measurement_out(state.library_best, problem)
    speedup = (library.median_us / best.median_us) if best and library else None
    return JobOut(
        id=job.id, status=job.status, problem_id=job.problem_id, problem_key=job.problem_key,
        problem=problem.to_dict(), budget=BudgetOut(max_trials=job.max_trials,
                                              max_seconds=job.max_seconds),
        backends=list(job.backends), target_gpu=job.target_gpu, gpu=job.bound_gpu, seed=job.seed,
        created_at=job.created_at, started_at=job.started_at, finished_at=job.finished_at,
        progress=ProgressOut(trials_done=counts.custom_terminal, trials_budget=job.max_trials,
                             elapsed_s=elapsed, outstanding=counts.outstanding),
        best=best, library_best=library, custom_best=measurement_out(state.custom_best, problem),
        speedup=speedup, error=job.error, policy=job.policy, stage=job.stage,
        decision=decision_out(state.decision) if state.decision else None,
        waiting=state.waiting, owner=job.owner,
        held=[HeldOut(candidate_id=m.candidate_id, backend=m.backend, median_us=m.median_us,
                      worker_id=m.worker_id, reason=m.error) for m in state.held])


def decision_out(d: DecisionRecord) -> DecisionOut:
    ev = d.evidence
    lib, cus = ev.get("library"), ev.get("custom")
    return DecisionOut(
        id=d.id, problem_id=d.problem_id, job_id=d.job_id, gpu=d.gpu_model, verdict=d.verdict,
        chosen=d.chosen, backend=d.backend, config=d.config, median_us=d.median_us,
        speedup=d.speedup, precision=d.precision, rel_error=d.rel_error,
        baseline=ev.get("baseline"),
        speedup_vs_cublas=ev.get("speedup_vs_cublas"), bound=d.bound,
        attainable_us=d.attainable_us,
        efficiency_library=lib.get("efficiency") if lib else None,
        efficiency_custom=cus.get("efficiency") if cus else None, verified=d.verified,
        rationale=d.rationale, library=lib, custom=cus, spend=ev.get("spend") or {},
        tiers=list(ev.get("tiers") or []), policy=ev.get("policy") or {}, env=d.env,
        library_trials=list(ev.get("library_trials") or []), notes=list(ev.get("notes") or []),
        roofline=ev.get("roofline"), reference=ev.get("reference"),
        verification=ev.get("verification"), created_at=d.created_at,
        superseded_at=d.superseded_at, current=d.superseded_at is None)


def calibration_out(c: CalibrationRecord, measured: MeasurementRecord | None = None
                    ) -> CalibrationOut:
    """``measured``: the calibration task's own measurement (its passes, curve, bursts)."""
    return CalibrationOut(id=c.id, gpu=c.gpu_model, bandwidth_gbs=c.bandwidth_gbs,
                          peak_tflops=c.peak_tflops, peak_low_tflops=c.peak_low_tflops,
                          env=c.env, stale=c.stale,
                          job_id=c.job_id, created_at=c.created_at, bench_s=c.bench_s,
                          measurement_id=measured.id if measured else None,
                          extra=measured.extra if measured else {})


def best_out(answer: BestAnswer) -> BestOut:
    problem = answer.problem.problem
    b, lib = answer.best, answer.library
    assert b.median_us is not None
    library = None
    if lib is not None and lib.median_us is not None:
        library = LibraryOut(backend=lib.backend, config=lib.config, median_us=lib.median_us,
                             p20_us=lib.p20_us, p80_us=lib.p80_us,
                             tflops=problem.tflops(lib.median_us), candidate_id=lib.candidate_id,
                             precision=lib.precision or problem.dtype, rel_error=lib.rel_error)
    return BestOut(backend=b.backend, config=b.config, median_us=b.median_us, p20_us=b.p20_us,
                   p80_us=b.p80_us, tflops=problem.tflops(b.median_us),
                   precision=b.precision or problem.dtype, rel_error=b.rel_error,
                   gpu=answer.gpu_model,
                   measured_at=b.created_at, problem_key=answer.problem.key,
                   problem_id=answer.problem.id, candidate_id=b.candidate_id, library=library,
                   speedup=(answer.decision.speedup
                            if answer.decision is not None and answer.decided
                            else library.median_us / b.median_us if library else None),
                   decision=decision_out(answer.decision) if answer.decision else None)


def problem_out(p: ProblemRecord, n_measurements: int) -> ProblemOut:
    return ProblemOut(id=p.id, key=p.key, kind=p.kind, problem=p.problem.to_dict(),
                      created_at=p.created_at, measurements=n_measurements)


def trial_out(m: MeasurementRecord, trial_number: int | None, problem: Problem) -> TrialOut:
    return TrialOut(
        id=m.id, candidate_id=m.candidate_id, job_id=m.job_id, trial_number=trial_number,
        backend=m.backend, config=m.config, status=m.status, median_us=m.median_us,
        p20_us=m.p20_us, p80_us=m.p80_us,
        tflops=problem.tflops(m.median_us) if m.median_us else None, reps=m.reps,
        rel_error=m.rel_error, precision=m.precision or problem.dtype, compile_s=m.compile_s,
        bench_s=m.bench_s, error=m.error,
        gpu=m.gpu_model, worker_id=m.worker_id, created_at=m.created_at, env=m.env,
        extra=m.extra or {})
