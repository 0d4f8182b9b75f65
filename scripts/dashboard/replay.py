"""One SYNTHETIC job: the service's own decision loop (``search.decision.plan``) driven over a
:class:`~scripts.dashboard.sources.Source`, every action answered at once from its records.

What comes out is what the service would have stored for the job: each candidate with its
measurement in order (the calibration and the verification as tasks), and the decision with its
rationale, spend and verification rounds, all computed by the same code the service runs.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from scripts.dashboard.sources import Gpu, Rec, Source
from search import decision, kinds
from search.decision import (
    Calibrate,
    Decide,
    Decision,
    Evidence,
    MeasureLibrary,
    Policy,
    Search,
    Trial,
    Verification,
    Verify,
)
from search.types import Problem


@dataclass(frozen=True)
class Stored:
    """A candidate and its measurement, as the job stored them."""

    id: int
    backend: str | None
    task: str | None
    tier: str | None
    trial_number: int | None
    rec: Rec
    extra: dict[str, Any] | None = field(default=None, hash=False)


@dataclass(frozen=True)
class JobRun:
    stored: list[Stored]
    decision: Decision
    verification: Verification | None
    stage: str


def _key(backend: str, config: Any) -> str:
    return backend + json.dumps(dict(config), sort_keys=True)


class Replay:
    """Runs one job to its decision. ``ids`` hands out candidate ids (the database's);
    ``known``: configurations measured before for this problem on this GPU model, which the
    service's tuners never measure again."""

    def __init__(self, problem: Problem, policy: Policy, gpu: Gpu, source: Source, *,
                 max_trials: int, ids: Iterator[int], known: set[str], calibrated: bool,
                 rng: random.Random, window: int = 16) -> None:
        self.problem, self.policy, self.gpu, self.source = problem, policy, gpu, source
        self.kind = kinds.get(problem.kind)
        self.max_trials, self.ids, self.known = max_trials, ids, known
        self.calibrated, self.rng, self.window = calibrated, rng, window
        self.tiers = tuple(t for t in self.kind.tier_plans(problem, gpu.device, policy)
                           if t.name != "hopper")  # the recordings have no Hopper variants
        self.stored: list[Stored] = []
        self.trials: list[Trial] = []
        self.cursor: dict[str, int] = {}
        self.numbers: dict[str, itertools.count[int]] = {}
        self.exhausted: set[str] = set()
        self.verification: Verification | None = None
        self.calibration_gpu_s = 0.0

    def run(self, max_steps: int = 500) -> JobRun:
        stage = ""
        for _ in range(max_steps):
            p = decision.plan(self._evidence())
            stage = str(p.stage)
            for a in p.actions:
                if isinstance(a, Decide):
                    return JobRun(self.stored, a.decision, self.verification, stage)
                if isinstance(a, Calibrate):
                    self._calibrate()
                elif isinstance(a, MeasureLibrary):
                    for backend, config in a.candidates:
                        self._library(backend, config)
                elif isinstance(a, Search):
                    self._search(a.tier, self.window if a.n is None else min(a.n, self.window))
                elif isinstance(a, Verify):
                    self._verify(a)
        raise RuntimeError(f"no decision for {self.problem.describe()} in {max_steps} steps")

    def _evidence(self) -> Evidence:
        return Evidence(
            problem=self.problem, policy=self.policy,
            calibration=self.gpu.calibration if self.calibrated else None,
            library_configs=tuple((r.backend, r.config) for r in self.source.library),
            tiers=self.tiers, trials=tuple(self.trials),
            exhausted_tiers=frozenset(self.exhausted), verification=self.verification,
            max_trials=self.max_trials, roles=self.kind.roles,
            calibration_gpu_s=self.calibration_gpu_s)

    def _add(self, rec: Rec, tier: str | None) -> None:
        number = None
        if tier is not None:
            number = next(self.numbers.setdefault(tier, itertools.count()))
        trial = Trial(next(self.ids), rec.backend, dict(rec.config), tier, rec.status,
                      rec.median_us, rec.p20_us, rec.p80_us, rec.gpu_s, rec.compile_s)
        self.trials.append(trial)
        self.stored.append(Stored(trial.id, rec.backend, None, tier, number, rec))
        self.known.add(_key(rec.backend, rec.config))

    def _calibrate(self) -> None:
        cal = self.gpu.calibration
        rec = Rec("", {}, bench_s=round(self.rng.uniform(28.0, 34.0), 3))
        extra = {"bandwidth_gbs": cal.bandwidth_gbs, "peak_tflops": dict(cal.peak_tflops),
                 "peak_low_tflops": {k: v * 0.985 for k, v in cal.peak_tflops.items()}}
        self.stored.append(Stored(next(self.ids), None, "calibrate", None, None, rec, extra))
        self.calibrated = True
        self.calibration_gpu_s = rec.gpu_s

    def _library(self, backend: str, config: Any) -> None:
        want = _key(backend, config)
        rec = next((r for r in self.source.library if _key(r.backend, r.config) == want), None)
        if rec is not None:
            self._add(rec, None)

    def _search(self, tier: str, n: int) -> None:
        stream = self.source.streams.get(tier, ())
        made = 0
        while made < n:
            i = self.cursor.get(tier, 0)
            if i >= len(stream):
                self.exhausted.add(tier)
                return
            self.cursor[tier] = i + 1
            rec = stream[i]
            if _key(rec.backend, rec.config) in self.known:
                continue  # told from the stored measurement, not measured again
            self._add(rec, tier)
            made += 1

    def _verify(self, a: Verify) -> None:
        def rounds(t: Trial | None) -> tuple[float, ...]:
            if t is None or t.median_us is None:
                return ()
            lo = t.median_us - (t.p20_us or t.median_us)
            hi = (t.p80_us or t.median_us) - t.median_us
            return tuple(t.median_us + self.rng.uniform(-0.6 * lo, 0.6 * hi)
                         for _ in range(self.policy.verify_rounds))

        lib, cus, ref = rounds(a.library), rounds(a.custom), rounds(a.reference)
        sides = 1 + (a.custom is not None) + (a.reference is not None)
        bench_s = round(sides * self.policy.verify_rounds * self.rng.uniform(0.05, 0.12), 3)
        config: dict[str, Any] = {
            "library": {"backend": a.library.backend, "config": dict(a.library.config)},
            "rounds": a.rounds, "library_id": a.library.id}
        if a.custom is not None:
            config |= {"custom": {"backend": a.custom.backend, "config": dict(a.custom.config)},
                       "custom_id": a.custom.id}
        if a.reference is not None:
            config |= {"reference": {"backend": a.reference.backend,
                                     "config": dict(a.reference.config)},
                       "reference_id": a.reference.id}
        extra = {"library_us": list(lib), "custom_us": list(cus), "reference_us": list(ref)}
        rec = Rec("", config, median_us=None, bench_s=bench_s)
        self.stored.append(Stored(next(self.ids), None, "verify", None, None, rec, extra))
        self.verification = Verification(
            a.library.id, a.custom.id if a.custom else None, "ok", lib, cus, bench_s,
            reference_id=a.reference.id if a.reference else None, reference_us=ref)
