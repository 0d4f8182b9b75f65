"""A replay runner for the decision loop: a FAKE device that serves real recorded measurements.

``tests/data/h100_gemm_trials.json`` holds what an H100 measured for the public shapes (cuBLAS
and 64 Triton trials each). :class:`ReplayDevice` answers the agent's actions from it: the
library candidate gets the recorded cuBLAS time, a tier's search gets the recorded Triton trials
of that tier in their recorded order, a verification gets five rounds drawn from each
contender's recorded p20..p80 band. Nothing here is a GPU result; it lets the agent's logic be
tested on the CPU against realistic numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from search.decision import (
    Calibrate,
    Decide,
    Decision,
    Evidence,
    MeasureLibrary,
    Policy,
    Search,
    StopTier,
    TierPlan,
    Trial,
    Verification,
    Verify,
    Wait,
    plan,
)
from search.kinds.gemm import CUTLASS_TIER, GEMM
from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_space import tier_plans
from search.roofline import Calibration

DATA = Path(__file__).resolve().parents[1] / "data" / "h100_gemm_trials.json"
#: Calibration of the replayed H100: the copy bandwidth quoted for that machine (3.0 TB/s, bytes
#: read + written) and peaks from the recorded cuBLAS times of the large compute-bound shapes.
H100_REPLAY_CALIBRATION = Calibration(
    "NVIDIA H100 80GB HBM3 (replay)", 3000.0,
    {"bf16": 2 * 4096**3 / 176.9e-6 / 1e12, "fp16": 2 * 4096**3 / 176.9e-6 / 1e12,
     "fp32": 2 * 4096**3 / 2645.9e-6 / 1e12})


def problem_of(key: str) -> GemmProblem:
    return GemmProblem.from_key(key)


def recorded() -> dict[str, list[dict[str, Any]]]:
    data = json.loads(DATA.read_text())
    return {p["problem_key"]: p["trials"] for p in data["problems"]}


def tier_of(config: dict[str, Any]) -> str:
    return "split_k" if int(config.get("SPLIT_K", 1)) > 1 else "tiles"


def replay_tiers(problem: GemmProblem) -> tuple[TierPlan, ...]:
    """The service's tiers for an H100 minus the Hopper variants (the recording has none)."""
    plans = tier_plans(problem, mode="cuda", cc="9.0", sm_count=132, allow_tf32=False)
    return tuple(t for t in plans if t.name != "hopper")


@dataclass
class ReplayDevice:
    """Drives ``plan`` to a decision, answering from recorded results (a fake, not a GPU)."""

    problem: GemmProblem
    trials: list[dict[str, Any]]
    policy: Policy
    max_trials: int | None = 64
    window: int = 4
    calibration: Calibration | None = H100_REPLAY_CALIBRATION
    #: overrides for recorded results: config key -> trial fields (e.g. a wrong result)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    library_us: float | None = None  # replace the recorded cuBLAS time
    verify_jitter: float = 1.0  # scales the p20..p80 band the verify rounds are drawn from
    gpu_s_per_trial: float = 1.0  # the cost model of this fake: every measurement costs 1 s
    #: FAKE CUTLASS results (no recording has any): the first-stage candidates' time, and the
    #: CUTLASS search's answers in order (config, median_us, compile_s); None: no CUTLASS
    cutlass_seed_us: float | None = None
    cutlass_search: list[tuple[dict[str, Any], float, float]] | None = None
    log: list[str] = field(default_factory=list)

    def run(self, max_steps: int = 1000) -> Decision:
        state = _State()
        lib = [t for t in self.trials if t["backend"] == "cublas"][0]
        by_tier: dict[str, list[dict[str, Any]]] = {}
        for t in self.trials:
            if t["backend"] == "triton":
                by_tier.setdefault(tier_of(t["config"]), []).append(t)
        for _ in range(max_steps):
            ev = self._evidence(state)
            p = plan(ev)
            for a in p.actions:
                self.log.append(f"{p.stage}: {a}")
                if isinstance(a, Decide):
                    return a.decision
                if isinstance(a, Calibrate):
                    state.calibrated = True
                elif isinstance(a, MeasureLibrary):
                    for backend, config in a.candidates:
                        if backend == "cutlass" and self.cutlass_seed_us is not None:
                            state.add(_fake_ok("cutlass", dict(config), self.cutlass_seed_us),
                                      None, self.gpu_s_per_trial, compile_s=60.0)
                    if not any(b == "cublas" for b, _ in a.candidates):
                        continue
                    rec = dict(lib)
                    if self.library_us is not None:
                        f = self.library_us / rec["median_us"]
                        rec = {**rec, "median_us": self.library_us, "p20_us": rec["p20_us"] * f,
                               "p80_us": rec["p80_us"] * f}
                    state.add(rec, None, self.gpu_s_per_trial)
                elif isinstance(a, Search) and a.tier == CUTLASS_TIER:
                    queue_c = self.cutlass_search or []
                    n = self.window if a.n is None else min(a.n, self.window)
                    for _ in range(n):
                        i = state.cursor.get(a.tier, 0)
                        if i >= len(queue_c):
                            state.exhausted.add(a.tier)
                            break
                        state.cursor[a.tier] = i + 1
                        config, us, compile_s = queue_c[i]
                        state.add(_fake_ok("cutlass", config, us), a.tier,
                                  self.gpu_s_per_trial, compile_s)
                elif isinstance(a, Search):
                    queue = by_tier.get(a.tier, [])
                    n = self.window if a.n is None else min(a.n, self.window)
                    for _ in range(n):
                        if state.cursor.get(a.tier, 0) >= len(queue):
                            state.exhausted.add(a.tier)
                            break
                        rec = queue[state.cursor.get(a.tier, 0)]
                        state.cursor[a.tier] = state.cursor.get(a.tier, 0) + 1
                        rec = {**rec, **self.overrides.get(json.dumps(rec["config"],
                                                                      sort_keys=True), {})}
                        state.add(rec, a.tier, self.gpu_s_per_trial)
                elif isinstance(a, StopTier):
                    pass  # every replayed trial completes at once: nothing is left pending
                elif isinstance(a, Verify):
                    state.verification = self._verify(a)
                elif isinstance(a, Wait):
                    pass
        raise AssertionError("the agent did not decide within max_steps")

    def _verify(self, a: Verify) -> Verification:
        def rounds(t: Trial) -> tuple[float, ...]:
            return verify_rounds(t.median_us, t.p20_us, t.p80_us, self.verify_jitter)
        ref = a.reference
        cus_id = a.custom.id if a.custom is not None else None
        checked = a.custom if a.custom is not None else a.library  # a confirmation: the pick
        wrong = self.overrides.get(json.dumps(dict(checked.config), sort_keys=True), {})
        if wrong.get("status", "ok") != "ok":
            return Verification(a.library.id, cus_id, str(wrong["status"]),
                                gpu_s=self.gpu_s_per_trial, error="recheck failed",
                                reference_id=ref.id if ref is not None else None)
        sides = 1 + (a.custom is not None) + (ref is not None) + len(a.runners_up)
        return Verification(a.library.id, cus_id, "ok", rounds(a.library),
                            rounds(a.custom) if a.custom is not None else (),
                            gpu_s=sides * self.gpu_s_per_trial,
                            reference_id=ref.id if ref is not None else None,
                            reference_us=rounds(ref) if ref is not None else (),
                            runners_up=tuple((t.id, rounds(t), None) for t in a.runners_up))

    def _evidence(self, state: _State) -> Evidence:
        return Evidence(
            problem=self.problem, policy=self.policy,
            calibration=self.calibration if state.calibrated else None,
            library_configs=(("cublas", {}), *self._cutlass_seeds()),
            tiers=replay_tiers(self.problem),
            trials=tuple(state.trials), exhausted_tiers=frozenset(state.exhausted),
            verification=state.verification, max_trials=self.max_trials, roles=GEMM.roles)


    def _cutlass_seeds(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        if self.cutlass_seed_us is None:
            return ()
        return tuple(("cutlass", {"op": f"fake_op_{i}", "raster": "heuristic", "swizzle": 1,
                                  "splits": 1}) for i in range(2))


def _fake_ok(backend: str, config: dict[str, Any], us: float) -> dict[str, Any]:
    """A FAKE ok record in the recording's shape."""
    return {"backend": backend, "config": config, "status": "ok", "median_us": us,
            "p20_us": us * 0.99, "p80_us": us * 1.01}


@dataclass
class _State:
    calibrated: bool = False
    trials: list[Trial] = field(default_factory=list)
    cursor: dict[str, int] = field(default_factory=dict)
    exhausted: set[str] = field(default_factory=set)
    verification: Verification | None = None

    def add(self, rec: dict[str, Any], tier: str | None, gpu_s: float,
            compile_s: float = 0.0) -> None:
        self.trials.append(Trial(len(self.trials) + 1, rec["backend"], dict(rec["config"]), tier,
                                 rec["status"], rec.get("median_us"), rec.get("p20_us"),
                                 rec.get("p80_us"), gpu_s, compile_s))


def verify_rounds(median: float, p20: float | None, p80: float | None,
                  jitter: float = 1.0) -> tuple[float, ...]:
    """Five FAKE round medians spread over a recorded p20..p80 band, centred on the median."""
    lo = (median - (p20 or median)) * jitter
    hi = ((p80 or median) - median) * jitter
    return (median, median - 0.6 * lo, median + 0.6 * hi, median - 0.3 * lo, median + 0.3 * hi)


def run_shape(key: str, policy: Policy, **kw: Any) -> Decision:
    trials = recorded()[key]
    return ReplayDevice(problem_of(key), trials, policy, **kw).run()


def full(policy: Policy) -> Policy:
    return replace(policy, full_search=True)
